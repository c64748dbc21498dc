package kafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A slot's older owner (a zombie: a process paused past the takeover)
// may open a transaction after the newer owner's writer started and
// aborted what the older claim had open: the zombie's id had nothing
// open then, so the start neither aborted nor fenced it. If the zombie
// then dies without ending it, the transaction stays open until the
// broker's transaction timeout, and every read_committed reader of its
// partitions waits behind it (the last stable offset stays below it).
// The newer owner aborts such transactions at its next completed
// checkpoint.
func TestNewerOwnerAbortsAnOlderClaimsTransactionOpenedAfterItsStart(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("zombie-txn-%d", time.Now().UnixNano())
		// The older owner (claim 1) is running with its ids registered.
		zs := stringSink(t, c, topic, prefix)
		old, err := zs.CreateWriter(claimCtx{subCtx{sub: 1, par: 2}, 1})
		if err != nil {
			t.Fatal(err)
		}
		zombie := old.(*sinkWriter[string])

		// The newer owner (claim 2) starts: nothing of claim 1 is open.
		s := stringSink(t, c, topic, prefix)
		w, cm, _ := openSubtask(t, s, claimCtx{subCtx{sub: 1, par: 2}, 2}, nil, nil)
		defer cm.Close()
		defer w.Close()

		// The zombie opens a transaction, its records reach the broker,
		// and it dies: nothing ends the transaction.
		write(t, zombie, "zombie")
		zcs := prepare(t, zombie, 7)
		if len(zcs) != 1 {
			t.Fatalf("the zombie prepared %v, want one transaction", zcs)
		}
		zid := zcs[0].TransactionalID
		// Closed at the end only, by which time the transaction was
		// ended by the newer owner (or never will be: the test failed).
		t.Cleanup(func() { zombie.Close() })

		// The newer owner's next checkpoint completes.
		write(t, w, "b")
		cs := prepare(t, w, 1)
		if err := w.NotifyCheckpointComplete(1); err != nil {
			t.Fatal(err)
		}
		for _, r := range commit(t, s, cs) {
			if r.outcome != "" {
				t.Fatalf("newer owner's commit: %s %v", r.outcome, r.err)
			}
		}

		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		var stable, end int64
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			lso, err1 := adm.ListCommittedOffsets(ctx, topic)
			hwm, err2 := adm.ListEndOffsets(ctx, topic)
			cancel()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			l, _ := lso.Lookup(topic, 0)
			h, _ := hwm.Lookup(topic, 0)
			stable, end = l.Offset, h.Offset
			if stable == end || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if stable != end {
			state := "unknown"
			if d, err := adm.DescribeTransactions(context.Background(), zid); err == nil {
				if tx, ok := d[zid]; ok {
					state = tx.State
				}
			}
			t.Fatalf("read_committed readers are pinned 10s after the newer owner's checkpoint completed: last stable offset %d, high watermark %d; the older claim's transaction %s is %s",
				stable, end, zid, state)
		}
		if got := c.committed(t, topic); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("read_committed sees %q, want [b]", got)
		}
	})
}
