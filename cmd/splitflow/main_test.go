package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
