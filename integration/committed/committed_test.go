package committed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Visible ends when it has passed every stable offset, including records
// a read_committed consumer never delivers: those of a transaction
// aborted after another one began, whose abort marker lies past the last
// stable offset (the open transaction's first record). A failed job
// leaves exactly that: one writer aborted, another's prepared
// transaction open. Before, the reader waited for a record at or past
// the aborted ones until its context ended.
func TestVisiblePassesAbortedRecordsWhoseMarkerIsPastTheStableOffset(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	producer := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(id), kgo.DefaultProduceTopic("out"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, vals ...string) {
		for _, v := range vals {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	committed := producer("committed")
	produce(committed, "c1", "c2")
	if err := committed.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	aborted, open := producer("aborted"), producer("open")
	produce(aborted, "a1", "a2", "a3")
	produce(open, "o1")
	if err := aborted.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	recs, err := Visible(ctx, seeds, "out", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(values(recs))
	if want := "[c1 c2]"; got != want {
		t.Fatalf("visible %s, want %s", got, want)
	}
}

func values(recs []*kgo.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Value))
	}
	return out
}
