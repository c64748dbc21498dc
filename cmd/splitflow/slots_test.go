package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// writeSlotCheckpoints writes checkpoints ids into the storage of slot's
// claim of epoch under root, as a distributed job lays them out
// (<root>/<job>/slots/<slot>/epoch-<epoch>).
func writeSlotCheckpoints(t *testing.T, root, job string, slot int, epoch int64, ids ...int64) {
	t.Helper()
	st, err := checkpoint.NewDirStorage(filepath.Join(root, job, "slots", fmt.Sprint(slot), fmt.Sprintf("epoch-%d", epoch)))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		w, err := st.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("count", slot), fmt.Appendf(nil, "state %d", id))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: time.Now(), Fingerprint: "wc", States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
	}
}

// writeSlotLog writes the records of slot's ownership log in their
// stored form (runtime/internal/slots' wire records).
func writeSlotLog(t *testing.T, root, job string, slot int, records ...string) {
	t.Helper()
	st, err := checkpoint.OpenStorage(filepath.Join(root, job, "slots", fmt.Sprint(slot), "log"))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range records {
		if err := st.(checkpoint.RecordStorage).CreateRecord(fmt.Sprintf("log-%019d", i+1), []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
}

// checkpoints ls of a distributed job's checkpoint root (or of its job
// directory) lists each slot: the claim governing its log, where its next
// owner restores, and each claim's storage with its checkpoints, the
// restore point marked. The root holds no checkpoint of its own: before,
// ls said "no checkpoints".
func TestCheckpointsLsListsADistributedJobsSlots(t *testing.T) {
	root := t.TempDir()
	const job = "wc"
	// Slot 0: claimed at epoch 1, then taken over at epoch 2, which
	// recorded chk-5; chk-6 was stored under epoch 2 and never recorded.
	writeSlotCheckpoints(t, root, job, 0, 1, 2, 3)
	writeSlotCheckpoints(t, root, job, 0, 2, 5, 6)
	writeSlotLog(t, root, job, 0,
		`{"version":1,"kind":"claim","epoch":1,"generation":1,"member":"m-a"}`,
		`{"version":1,"kind":"checkpoint","epoch":1,"member":"m-a","checkpoint":3}`,
		`{"version":1,"kind":"claim","epoch":2,"generation":4,"member":"m-b"}`,
		`{"version":1,"kind":"checkpoint","epoch":2,"member":"m-b","checkpoint":5}`)
	// Slot 1: claimed, nothing checkpointed yet.
	writeSlotLog(t, root, job, 1, `{"version":1,"kind":"claim","epoch":1,"generation":1,"member":"m-a"}`)

	for _, dir := range []string{root, filepath.Join(root, job)} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
			t.Fatal(err)
		}
		t.Logf("ls %s:\n%s", dir, out.String())
		for _, re := range []string{
			`(?m)^distributed job wc: 2 slot\(s\) with a storage under ` + regexp.QuoteMeta(root) + `/wc/slots$`,
			`(?m)^slot 0: claim of epoch 2 by m-b \(generation 4\); restores chk-5 of epoch 2$`,
			`(?m)^  1 +chk-2 +\S+ +1 +\d+ +ok$`,
			`(?m)^  1 +chk-3 +\S+ +1 +\d+ +ok$`,
			`(?m)^  2 +chk-5 +\S+ +1 +\d+ +ok, restore point: the slot's next owner resumes here$`,
			`(?m)^  2 +chk-6 +\S+ +1 +\d+ +ok$`,
			`(?m)^slot 1: claim of epoch 1 by m-a \(generation 1\); fresh: no checkpoint recorded, its next owner starts from nothing$`,
		} {
			if !regexp.MustCompile(re).MatchString(out.String()) {
				t.Errorf("ls %s does not match %s", dir, re)
			}
		}
		if regexp.MustCompile(`no checkpoints in`).MatchString(out.String()) {
			t.Errorf("ls %s says there are no checkpoints", dir)
		}
	}
}
