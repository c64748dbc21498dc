package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/txn"
)

// subCtx is the SinkInitContext of one subtask of par, restored from
// checkpoint restored (0: a fresh start).
type subCtx struct {
	sub, par int
	restored int64
}

func (subCtx) Context() context.Context { return context.Background() }
func (c subCtx) SubtaskIndex() int      { return c.sub }
func (c subCtx) Parallelism() int       { return c.par }
func (c subCtx) AttemptNumber() int     { return 0 }
func (c subCtx) RestoredCheckpointID() (int64, bool) {
	return c.restored, c.restored > 0
}

// openSubtask does what the engine does when a sink subtask starts from a
// checkpoint holding all (the committables of every old subtask), of which
// mine are mapped to this subtask: it creates the committer, tells it the
// whole checkpoint's committables, commits its own, then creates the
// writer. It returns the writer, the committer and the commit outcomes.
func openSubtask(t *testing.T, s *Sink[string], ctx connector.SinkInitContext, all, mine []txn.Committable) (*sinkWriter[string], connector.Committer[txn.Committable], []*request) {
	t.Helper()
	cm, err := s.CreateCommitter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := cm.(interface{ RestoredCommittables([]txn.Committable) }); ok {
		l.RestoredCommittables(all)
	}
	var reqs []connector.CommitRequest[txn.Committable]
	var out []*request
	for _, c := range mine {
		r := &request{c: c}
		reqs = append(reqs, r)
		out = append(out, r)
	}
	if err := cm.Commit(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWriter(ctx)
	if err != nil {
		t.Fatalf("writer of subtask %d of %d: %v", ctx.SubtaskIndex(), ctx.Parallelism(), err)
	}
	return w.(*sinkWriter[string]), cm, out
}

// Old subtask i's committables go to new subtask i % p, but subtasks
// start concurrently: the subtask that cleans up the lingering
// transactions of the old subtasks beyond the new parallelism must spare
// every restored committable of the checkpoint, not only its own, or it
// aborts one that another subtask is about to commit (4 -> 2: old subtask
// 3's prepared transaction, committed by new subtask 1).
func TestScaleDownKeepsRestoredCommittables(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("scaledown-%d", time.Now().UnixNano())
		old := stringSink(t, c, topic, prefix)
		var all []txn.Committable
		for i := range 4 {
			w, err := old.CreateWriter(subCtx{sub: i, par: 4})
			if err != nil {
				t.Fatal(err)
			}
			ow := w.(*sinkWriter[string])
			write(t, ow, fmt.Sprintf("old-%d", i))
			all = append(all, prepare(t, ow, 1)...)
			// Checkpoint 1 completes and the process dies before anything
			// commits; its writers' clients are closed at the end.
			defer ow.Close()
		}
		if len(all) != 4 {
			t.Fatalf("old writers prepared %v", all)
		}

		s := stringSink(t, c, topic, prefix)
		var want []string
		for sub := range 2 {
			var mine []txn.Committable
			for i, cm := range all {
				if i%2 == sub {
					mine = append(mine, cm)
					want = append(want, fmt.Sprintf("old-%d", i))
				}
			}
			// Subtask 0 opens completely (its writer cleans up prefix-2-*
			// and prefix-3-*) before subtask 1 commits old subtask 3's
			// transaction: the order that lost it.
			w, cm, reqs := openSubtask(t, s, subCtx{sub: sub, par: 2, restored: 1}, all, mine)
			defer cm.Close()
			defer w.Close()
			for _, r := range reqs {
				var dl *txn.DataLossError
				if r.outcome != "" {
					if errors.As(r.err, &dl) {
						t.Fatalf("subtask %d of 2: restored committable %s was aborted before it was committed: %v", sub, r.c, r.err)
					}
					t.Fatalf("subtask %d of 2: commit of restored %s: %s %v", sub, r.c, r.outcome, r.err)
				}
			}
			write(t, w, fmt.Sprintf("new-%d", sub))
			want = append(want, fmt.Sprintf("new-%d", sub))
			for _, r := range commit(t, s, prepare(t, w, 2)) {
				if r.outcome != "" {
					t.Fatalf("subtask %d of 2: commit: %s %v", sub, r.outcome, r.err)
				}
			}
		}
		got := c.committed(t, topic)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("read_committed sees %q, want %q", got, want)
		}
	})
}

// Under transaction protocol v2 a commit bumps the epoch and franz-go keeps
// the bumped one, so the previous attempt's producer that committed a
// transaction holds a current epoch on its id. The restored attempt
// commits that committable again and reserves the id (it must not move
// its epoch while the checkpoint may be restored once more), but once a
// checkpoint taken after the restore completes, it registers the id anew:
// the old producer is fenced before it can commit later output.
func TestFenceZombieHoldingRestoredID(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("zombie-%d", time.Now().UnixNano())
		// Attempt 1 prepares checkpoint 1's transaction, which completes;
		// it commits through its own client and then fails, but its
		// producers live on.
		zs := stringSink(t, c, topic, prefix)
		zombie := writer(t, zs)
		defer zombie.Close()
		write(t, zombie, "a")
		cs := prepare(t, zombie, 1)
		for _, r := range commit(t, zs, cs) {
			if r.outcome != "" {
				t.Fatalf("attempt 1's commit: %s %v", r.outcome, r.err)
			}
		}

		// Attempt 2 restores checkpoint 1: its committer commits the
		// committable again, then its writer starts, runs checkpoint 2 and
		// sees it complete.
		s := stringSink(t, c, topic, prefix)
		w, cm, reqs := openSubtask(t, s, subCtx{sub: 0, par: 1, restored: 1}, cs, cs)
		defer cm.Close()
		defer w.Close()
		if reqs[0].outcome != "" {
			t.Fatalf("restored commit: %s %v", reqs[0].outcome, reqs[0].err)
		}
		write(t, w, "b")
		cs2 := prepare(t, w, 2)
		commit(t, s, cs2)
		if err := w.NotifyCheckpointComplete(2); err != nil {
			t.Fatal(err)
		}

		// The zombie goes on as if its own checkpoints completed: the id of
		// checkpoint 1's transaction is free for it again.
		if got := prepare(t, zombie, 2); len(got) != 0 {
			t.Fatalf("zombie prepared %v", got)
		}
		if err := zombie.NotifyCheckpointComplete(2); err != nil {
			t.Fatal(err)
		}
		write(t, zombie, "zombie")
		if err := zombie.Flush(false); err != nil {
			t.Fatal(err)
		}
		if zc, err := zombie.PrepareCommit(3); err == nil {
			t.Logf("zombie prepared %v", zc)
			commit(t, zs, zc)
		} else if !errors.Is(err, txn.ErrFenced) {
			t.Errorf("the zombie's prepare failed with %v, want an error wrapping txn.ErrFenced", err)
		}
		if got := c.committed(t, topic); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("read_committed sees %q, want [a b]: the old attempt's producer was not fenced", got)
		}
	})
}
