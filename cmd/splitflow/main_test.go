package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The CLI lists a lingering transaction with its age and aborts it, after
// which read_committed consumers are no longer pinned.
func TestTxnListAndAbortLingering(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx := context.Background()
	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("job-0-3"), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.Close() // abandoned: the transaction stays open

	var out, errOut bytes.Buffer
	args := []string{"txn", "list", "--brokers", strings.Join(seeds, ","), "--prefix", "job"}
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("txn list: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "job-0-3") || !strings.Contains(out.String(), "Ongoing") {
		t.Fatalf("txn list output lacks the open transaction:\n%s", out.String())
	}
	out.Reset()
	args = []string{"txn", "abort", "--brokers", strings.Join(seeds, ","), "--prefix", "job", "--yes"}
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("txn abort: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "aborted job-0-3") || !strings.Contains(out.String(), "1 transaction(s) aborted") {
		t.Fatalf("txn abort output:\n%s", out.String())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, "out")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lso.Lookup("out", 0); o.Offset == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last stable offset still pinned after the abort: %v", lso)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out.Reset()
	args = []string{"txn", "list", "--brokers", strings.Join(seeds, ","), "--prefix", "job"}
	if err := run(ctx, args, &out, &errOut); err != nil || !strings.Contains(out.String(), "no open transactions") {
		t.Fatalf("txn list after the abort: %v\n%s", err, out.String())
	}
}

func TestCheckpointsLsAndShow(t *testing.T) {
	dir := t.TempDir()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 2; id++ {
		w, err := st.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("lines", 0), []byte(fmt.Sprintf("state %d", id)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: time.Now(), Fingerprint: "wordcount", States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "chk-1") || !strings.Contains(out.String(), "chk-2") || !strings.Contains(out.String(), "latest") {
		t.Fatalf("ls output:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", filepath.Join(dir, "chk-2")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "checkpoint 2") || !strings.Contains(out.String(), "lines") || !strings.Contains(out.String(), "wordcount") {
		t.Fatalf("show output:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"checkpoints", "show", filepath.Join(dir, "chk-9")}, &out, &out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("show of a missing checkpoint: %v", err)
	}
	if err := run(context.Background(), []string{"checkpoints", "frobnicate"}, &out, &out); !errors.Is(err, errUsage) {
		t.Fatalf("unknown command: %v", err)
	}
}

// checkpoints ls shows what a restart does under the storage's rule: a
// damaged newest checkpoint that may have been reported complete stops a
// restart (it is not passed over); one whose commit never returned is
// passed over, and the restart resumes from the one before.
func TestCheckpointsLsShowsWhatARestartUses(t *testing.T) {
	dir := t.TempDir()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for id := int64(1); id <= 3; id++ {
		w, err := st.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("lines", 0), fmt.Appendf(nil, "state %d", id))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: time.Now(), Fingerprint: "wordcount", States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, "chk-3", h.File)
	}
	if err := os.WriteFile(file, []byte("state X"), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := func() string {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := ls()
	t.Logf("damaged chk-3, reported:\n%s", out)
	for _, want := range []string{"chk-3", "DAMAGED: a restart fails here", "a restart fails: checkpoint storage " + dir + ": checkpoint 3 is damaged", "resume from checkpoint 2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("ls output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a restart resumes here") {
		t.Fatalf("ls says a restart resumes from an older checkpoint:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(dir, "chk-3", "_committing"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out = ls()
	t.Logf("damaged chk-3, commit interrupted:\n%s", out)
	for _, want := range []string{"DAMAGED, commit interrupted (never reported complete): a restart passes over it", "chk-2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("ls output does not say %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "a restart resumes here") && !strings.HasPrefix(line, "chk-2") {
			t.Fatalf("a restart resumes from another checkpoint than chk-2:\n%s", out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "chk-3", "_committing")); err != nil {
		t.Fatalf("ls changed the directory: %v", err)
	}
}

// Rule: checkpoints ls and show mark a savepoint as one, and ls never says
// a restart resumes from it: a savepoint is where a job is started from
// (--from-savepoint), no restart of a job resumes there.
func TestCheckpointsLsAndShowMarkASavepoint(t *testing.T) {
	dir := t.TempDir()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Begin(7)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.WriteState(checkpoint.OperatorOwner("lines", 0), []byte("state 7"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 7, Timestamp: time.Now(), Fingerprint: "wordcount", States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	chk, err := st.Load(7)
	if err != nil {
		t.Fatal(err)
	}
	sp := checkpoint.SavepointPath(t.TempDir(), 7, time.Now())
	if _, err := checkpoint.WriteSavepoint(chk, sp, ""); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "ls", sp}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if ls := out.String(); !strings.Contains(ls, "chk-7") || !strings.Contains(ls, "savepoint") || strings.Contains(ls, "restart") {
		t.Fatalf("ls of a savepoint says nothing of it or speaks of a restart:\n%s", ls)
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if ls := out.String(); strings.Contains(ls, "savepoint") || !strings.Contains(ls, "a restart resumes here") {
		t.Fatalf("ls of the job's own checkpoint:\n%s", ls)
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", filepath.Join(sp, "chk-7")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if show := out.String(); !regexp.MustCompile(`(?m)^savepoint +7$`).MatchString(show) {
		t.Fatalf("show of a savepoint does not say it is one:\n%s", show)
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", "--json", filepath.Join(sp, "chk-7")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Savepoint bool `json:"savepoint"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || !r.Savepoint {
		t.Fatalf("show --json of a savepoint: %v, savepoint %v:\n%s", err, r.Savepoint, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"checkpoints", "show", filepath.Join(dir, "chk-7")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if show := out.String(); strings.Contains(show, "savepoint") || !strings.Contains(show, "checkpoint 7") {
		t.Fatalf("show of the job's own checkpoint:\n%s", show)
	}
}

// The txn commands select ids by the sink's id layout, never by a string
// prefix: --prefix orders takes orders:<subtask>-<n> and
// orders:<subtask>-e<epoch>-<n>, and the legacy orders-<subtask>-<n> and
// orders-<subtask>-e<epoch>-<n> of checkpoints from before the colon, and
// leaves job orders-eu's legacy orders-eu-<subtask>-<n>, which begins with
// "orders-" too. And txn abort,
// like every command that destroys, lists what it would do and does
// nothing without --yes.
func TestTxnCommandsSelectOnlyThePrefixsIDsAndAbortOnlyWithYes(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	brokers := strings.Join(seeds, ",")
	ctx := context.Background()
	// Legacy ids (before the colon: orders-<subtask>-<n>), which a
	// checkpoint of an older version may have left open, are still the
	// prefix's.
	mine, theirs := []string{"orders:0-1", "orders:1-e3-0", "orders-0-2", "orders-1-e2-0"}, []string{"orders-eu:0-1", "orders-eu:1-e2-0", "orders-eu-0-1"}
	for _, id := range append(append([]string(nil), mine...), theirs...) {
		p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(id), kgo.DefaultProduceTopic("out"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(id)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.Close() // abandoned: the transaction stays open
	}
	cmd := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, append(args, "--brokers", brokers), &out, &errOut); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
	check := func(what, out string, want, unwanted []string) {
		t.Helper()
		for _, id := range want {
			if !strings.Contains(out, id) {
				t.Errorf("%s does not name %s:\n%s", what, id, out)
			}
		}
		for _, id := range unwanted {
			if strings.Contains(out, id) {
				t.Errorf("%s names %s, another job's transaction:\n%s", what, id, out)
			}
		}
	}
	check("txn list --prefix orders", cmd("txn", "list", "--prefix", "orders"), mine, theirs)

	out := cmd("txn", "abort", "--prefix", "orders")
	check("txn abort --prefix orders without --yes", out, mine, theirs)
	if strings.Contains(out, "aborted orders") || !strings.Contains(out, "nothing aborted: run again with --yes") {
		t.Errorf("txn abort without --yes did not stop at the listing:\n%s", out)
	}
	check("txn list after txn abort without --yes", cmd("txn", "list", "--prefix", "orders"), mine, theirs)

	out = cmd("txn", "abort", "--prefix", "orders", "--yes")
	check("txn abort --prefix orders --yes", out, mine, theirs)
	if !strings.Contains(out, "4 transaction(s) aborted") {
		t.Errorf("txn abort --yes:\n%s", out)
	}
	if out := cmd("txn", "list", "--prefix", "orders"); !strings.Contains(out, "no open transactions") {
		t.Errorf("orders' transactions still open after the abort:\n%s", out)
	}
	check("txn list --prefix orders-eu after aborting orders", cmd("txn", "list", "--prefix", "orders-eu"), theirs, mine)
}
