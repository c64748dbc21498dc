package kafka

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/txn"
)

// claimCtx is the SinkInitContext of a subtask that runs in a slot of a
// distributed job, under its process's claim epoch.
type claimCtx struct {
	subCtx
	epoch int64
}

func (c claimCtx) ClaimEpoch() int64 { return c.epoch }

// A slot's older owner may live on after a newer one claimed the slot (a
// paused process resumes): its execution fails on its fenced producers,
// restarts within its stale claim, and starts a writer again. That writer
// must not touch the newer claim's transactions: registering the newer
// owner's ids would abort the transaction of a checkpoint the newer owner
// recorded and is about to commit, and that output would be lost.
func TestOlderClaimNeverAbortsANewerClaimsTransactions(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("claims-%d", time.Now().UnixNano())
		// The first owner (claim epoch 1) completes checkpoint 1 and
		// commits it, then opens the next transaction and stops.
		zs := stringSink(t, c, topic, prefix)
		old, err := zs.CreateWriter(claimCtx{subCtx{sub: 2, par: 4}, 1})
		if err != nil {
			t.Fatal(err)
		}
		zombie := old.(*sinkWriter[string])
		defer zombie.Close()
		write(t, zombie, "a")
		cs1 := prepare(t, zombie, 1)
		for _, r := range commit(t, zs, cs1) {
			if r.outcome != "" {
				t.Fatalf("first owner's commit: %s %v", r.outcome, r.err)
			}
		}
		write(t, zombie, "zombie")

		// The newer owner (claim epoch 2) restores checkpoint 1, writes
		// and prepares checkpoint 2, which its log records.
		s := stringSink(t, c, topic, prefix)
		w, cm, reqs := openSubtask(t, s, claimCtx{subCtx{sub: 2, par: 4, restored: 1}, 2}, cs1, cs1)
		defer cm.Close()
		defer w.Close()
		if reqs[0].outcome != "" {
			t.Fatalf("restored commit: %s %v", reqs[0].outcome, reqs[0].err)
		}
		write(t, w, "b")
		cs2 := prepare(t, w, 2)

		// Before it commits, the older owner's execution restarts from its
		// own last checkpoint under its old claim.
		zs2 := stringSink(t, c, topic, prefix)
		zw, zcm, _ := openSubtask(t, zs2, claimCtx{subCtx{sub: 2, par: 4, restored: 1}, 1}, cs1, cs1)
		defer zcm.Close()
		defer zw.Close()

		for _, r := range commit(t, s, cs2) {
			var dl *txn.DataLossError
			if errors.As(r.err, &dl) {
				t.Fatalf("the newer owner's recorded transaction was aborted by the older owner's restart: %v", r.err)
			}
			if r.outcome != "" {
				t.Fatalf("newer owner's commit: %s %v", r.outcome, r.err)
			}
		}
		if got := c.committed(t, topic); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("read_committed sees %q, want [a b]", got)
		}
	})
}
