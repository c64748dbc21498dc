package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
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

// checkpoints show of a slot's checkpoint lists as pending only the
// splits its own slot reads: a slot's Kafka enumerator holds every
// partition, and the partitions the owner rule gives other slots (a
// shuffle topic's partition p is slot p's) are shown as theirs. Before,
// every other slot's partition was listed as pending in every slot.
func TestCheckpointsShowOfASlotListsOtherSlotsSplitsAsTheirs(t *testing.T) {
	root := t.TempDir()
	const job, slotCount = "wc", 3
	var pending []kafka.Split
	for p := range int32(4) {
		pending = append(pending, kafka.NewSplit(kafka.TopicPartition{Topic: "clicks", Partition: p}, 10*int64(p), kafka.NoStoppingOffset))
	}
	for p := range int32(slotCount) {
		pending = append(pending, kafka.NewSplit(kafka.TopicPartition{Topic: "wc.count.shuffle", Partition: p}, 0, kafka.NoStoppingOffset))
	}
	enum, err := kafka.EnumeratorStateSerializer{}.Serialize(kafka.EnumeratorState{InitialDiscoveryDone: true, Pending: pending})
	if err != nil {
		t.Fatal(err)
	}
	blob := append(binary.AppendUvarint(nil, uint64(kafka.EnumeratorStateSerializer{}.Version())), enum...)
	const slot = 1
	dir := filepath.Join(root, job, "slots", fmt.Sprint(slot), "epoch-2")
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Begin(7)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.WriteState(checkpoint.CoordinatorOwner("clicks-src"), blob)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 7, Timestamp: time.Now(), Fingerprint: "wc", States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	// The job's other slots have storages of their own.
	for s := range slotCount {
		writeSlotLog(t, root, job, s, `{"version":1,"kind":"claim","epoch":2,"generation":1,"member":"m-a"}`)
	}

	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "show", "--json", filepath.Join(dir, "chk-7")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var r showReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if r.Slot == nil || *r.Slot != (slotView{Job: job, Slot: slot, Epoch: 2, Slots: slotCount}) {
		t.Errorf("slot %+v, want slot %d of %d of job %s, epoch 2", r.Slot, slot, slotCount, job)
	}
	e := operator(r, "clicks-src").Enumerator.Enumerator
	mine, others := map[string]bool{}, map[string]int{}
	for _, sp := range e.Pending {
		mine[fmt.Sprintf("%s-%d", sp.Topic, *sp.Partition)] = true
	}
	for _, sp := range e.OtherSlots {
		others[fmt.Sprintf("%s-%d", sp.Topic, *sp.Partition)] = *sp.Slot
	}
	for _, sp := range pending {
		id := sp.SplitID()
		owner := ownerOf(job, sp.Topic, sp.Partition, slotCount)
		switch {
		case owner == slot && !mine[id]:
			t.Errorf("%s is slot %d's and not listed pending: pending %v, other slots' %v", id, slot, mine, others)
		case owner != slot && others[id] != owner:
			t.Errorf("%s is slot %d's and listed as %d's (pending here: %v)", id, owner, others[id], mine[id])
		}
	}
	if len(mine)+len(others) != len(pending) || len(mine) == 0 || len(others) == 0 {
		t.Fatalf("pending %v and other slots' %v; want the %d splits parted, some each way", mine, others, len(pending))
	}
	if !mine["wc.count.shuffle-1"] || others["wc.count.shuffle-2"] != 2 {
		t.Fatalf("shuffle partition p is slot p's: pending %v, other slots' %v", mine, others)
	}

	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", filepath.Join(dir, "chk-7")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("show:\n%s", out.String())
	for _, re := range []string{
		`(?m)^slot +1 of 3 of distributed job wc, claim epoch 2$`,
		fmt.Sprintf(`(?m)^ +pending \(%d\):$`, len(mine)),
		fmt.Sprintf(`(?m)^ +other slots' \(%d\), read by those slots:$`, len(others)),
		`(?m)^ +wc\.count\.shuffle +2 +2$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("show does not match %s", re)
		}
	}
}

// ownerOf is the Kafka source's owner rule (connector/kafka) with slots
// for subtasks, and a shuffle's: partition p to slot p.
func ownerOf(job, topic string, p int32, slotCount int) int {
	if strings.HasPrefix(topic, job+".") && strings.HasSuffix(topic, ".shuffle") {
		return int(p)
	}
	h := fnv.New32a()
	h.Write([]byte(topic))
	return (int(h.Sum32()&0x7fffffff)%slotCount + int(p)) % slotCount
}
