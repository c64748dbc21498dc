package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime/restart"
)

// Transactions left open under the sink's prefix by producers that are gone
// (one of a subtask of this parallelism, one of a subtask beyond it, as a
// run with a higher parallelism leaves) pin read_committed consumers of the
// output until the job starts: its sink aborts them at once, the consumers
// move on promptly, and none of their records is ever visible.
func TestLingeringTransactionsOfAbandonedProducers(t *testing.T) {
	b := kafkatest.Get(t)
	input := b.CreateTopic(t, "abandoned-in", 2, nil)
	output := b.CreateTopic(t, "abandoned-out", 2, nil)
	prefix := output + "-txn"
	const n = 3000
	ids := idRange(0, n)
	writeIDs(t, b, input, ids, modulo(2))
	for _, id := range []string{prefix + "-1-2", prefix + "-5-0"} {
		openTxn(t, b, id, output, 1, 20)
	}
	adm := b.Admin(t)
	lso, mark := offsets(t, adm, output)
	if !pinned(lso, mark) {
		t.Fatalf("abandoned transactions pin nothing: last stable %v, high watermark %v", lso, mark)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- idjob.Run(ctx, idjob.Config{
			Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: prefix,
			Parallelism: 2, CheckpointInterval: 100 * time.Millisecond, Restart: restart.None(),
		})
	}()
	var unpinned time.Duration
	for {
		lso, _ := offsets(t, adm, output)
		if !pinned(lso, mark) {
			unpinned = time.Since(began)
			break
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("read_committed consumers still pinned 30s after the job started: last stable %v, high watermark before it %v", lso, mark)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; err != nil || ctx.Err() != nil {
		t.Fatalf("job: %v (context: %v)", err, ctx.Err())
	}
	if unpinned > 10*time.Second {
		t.Errorf("read_committed consumers were pinned for %s after the job started, want < 10s", unpinned)
	}
	// The abandoned producers' earlier, committed transaction wrote one
	// record "earlier" each; their open ones must not appear.
	recs := kafkatest.ReadCommitted(t, b.Addrs(), output, 60*time.Second)
	var out = recs[:0]
	for _, r := range recs {
		if string(r.Value) != "earlier" {
			out = append(out, r)
		}
	}
	if len(recs)-len(out) != 2 {
		t.Errorf("%d records of the abandoned producers' committed transactions, want 2", len(recs)-len(out))
	}
	report(t, fmt.Sprintf("lingering transactions of %d abandoned producers", 2), 1, n, countRecords(t, out, ids), unpinned)
}
