package base

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// checkpoint is what a job would hold for one reader at a checkpoint: the
// reader's splits, the splits still with the enumerator, whether the
// enumerator had signalled the end, and the records emitted downstream up to
// the checkpoint (the "committed output").
type checkpoint struct {
	readerSplits []testSplit
	pending      []testSplit
	noMore       bool
	emitted      []int64
}

// exactlyOnceRun is one seeded interleaving of polls, split assignments,
// snapshots, and restores of a reader.
type exactlyOnceRun struct {
	t        *testing.T
	rng      *rand.Rand
	cfg      readerSetup
	all      []testSplit // every split of the source
	expected map[int64]bool

	r           *testReader
	out         *recordingOutput
	pending     []testSplit // not yet assigned: the enumerator's state
	noMore      bool
	checkpoints []checkpoint
}

func newExactlyOnceRun(t *testing.T, seed uint64) *exactlyOnceRun {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	run := &exactlyOnceRun{
		t:   t,
		rng: rng,
		cfg: readerSetup{
			perSplit: rng.IntN(2) == 0,
			batch:    1 + rng.IntN(16),
			capacity: 1 + rng.IntN(3),
		},
		expected: map[int64]bool{},
	}
	for i := range 1 + rng.IntN(6) {
		from := int64(i) * 1000
		n := int64(rng.IntN(60)) // some splits are empty
		run.all = append(run.all, testSplit{ID: fmt.Sprintf("s%d", i), Next: from, End: from + n})
		for v := from; v < from+n; v++ {
			run.expected[v] = true
		}
	}
	run.pending = slices.Clone(run.all)
	return run
}

// start replaces the current reader by one restored from cp, as the engine
// does on failover: the reader gets the checkpointed splits back, the
// enumerator its pending splits, and downstream keeps only what was emitted
// up to the checkpoint.
func (run *exactlyOnceRun) start(cp checkpoint) {
	run.t.Helper()
	if run.r != nil {
		closeReader(run.t, run.r)
	}
	run.r, _, _ = newTestReader(run.t, run.cfg)
	run.out = newRecordingOutput()
	run.out.records = slices.Clone(cp.emitted)
	run.pending = slices.Clone(cp.pending)
	run.noMore = false
	if len(cp.readerSplits) > 0 {
		if err := run.r.AddSplits(cp.readerSplits); err != nil {
			run.t.Fatalf("restore splits: %v", err)
		}
	}
	if cp.noMore {
		run.noMore = true
		run.r.NotifyNoMoreSplits()
	}
	if err := run.r.Start(); err != nil {
		run.t.Fatal(err)
	}
}

func (run *exactlyOnceRun) snapshot() checkpoint {
	run.t.Helper()
	splits, err := run.r.SnapshotState(int64(len(run.checkpoints) + 1))
	if err != nil {
		run.t.Fatalf("snapshot: %v", err)
	}
	return checkpoint{
		readerSplits: splits,
		pending:      slices.Clone(run.pending),
		noMore:       run.noMore,
		emitted:      slices.Clone(run.out.records),
	}
}

// assignSome moves a few pending splits to the reader, or signals the end
// when none are left.
func (run *exactlyOnceRun) assignSome() {
	if len(run.pending) == 0 {
		if !run.noMore {
			run.noMore = true
			run.r.NotifyNoMoreSplits()
		}
		return
	}
	n := 1 + run.rng.IntN(len(run.pending))
	if err := run.r.AddSplits(run.pending[:n]); err != nil {
		run.t.Fatalf("add splits: %v", err)
	}
	run.pending = run.pending[n:]
}

// pollSome polls up to n times, sometimes waiting for availability, and
// reports whether the reader reached the end.
func (run *exactlyOnceRun) pollSome(n int) bool {
	for range n {
		st, err := run.r.PollNext(run.out)
		if err != nil {
			run.t.Fatalf("PollNext: %v", err)
		}
		switch st {
		case connector.EndOfInput:
			return true
		case connector.NothingAvailable:
			// Waiting only helps when something is bound to arrive: records
			// or the end of a split the reader holds, or the end of input.
			if run.rng.IntN(2) == 0 || (run.r.NumSplits() == 0 && !run.noMore) {
				return false // go do something else meanwhile
			}
			select {
			case <-run.r.Available():
			case <-time.After(10 * time.Second):
				run.t.Fatalf("reader stuck holding %d splits (no more splits: %v)", run.r.NumSplits(), run.noMore)
			}
		}
	}
	return false
}

// checkExactlyOnce asserts that emitted holds every record of the source
// exactly once, and each split's records in order.
func (run *exactlyOnceRun) checkExactlyOnce(what string, emitted []int64) {
	run.t.Helper()
	seen := make(map[int64]bool, len(emitted))
	last := map[int64]int64{}
	for _, v := range emitted {
		if !run.expected[v] {
			run.t.Fatalf("%s: record %d does not exist", what, v)
		}
		if seen[v] {
			run.t.Fatalf("%s: record %d emitted twice", what, v)
		}
		seen[v] = true
		split := v / 1000
		if prev, ok := last[split]; ok && v < prev {
			run.t.Fatalf("%s: record %d after %d in the same split", what, v, prev)
		}
		last[split] = v
	}
	if len(seen) != len(run.expected) {
		run.t.Fatalf("%s: %d of %d records emitted", what, len(seen), len(run.expected))
	}
}

// TestSnapshotRestoreExactlyOnce checks the task-goroutine rule (split state
// is advanced only by the emitter on the task goroutine, and queued data is
// not in the checkpoint): over many seeded random interleavings of polls,
// split assignments, snapshots and restores, with fetchers racing ahead into
// the queue, every run ends with every record emitted exactly once; and
// restoring any snapshot taken along the way into a fresh reader and reading
// to the end does too.
func TestSnapshotRestoreExactlyOnce(t *testing.T) {
	const (
		seeds          = 300
		maxCheckpoints = 8
		maxRestores    = 3
	)
	for seed := range uint64(seeds) {
		ok := t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			run := newExactlyOnceRun(t, seed)
			run.start(checkpoint{pending: run.pending})
			ended, restores := false, 0
			for steps := 0; !ended; steps++ {
				if steps > 100_000 {
					t.Fatal("no end after 100000 steps")
				}
				switch p := run.rng.IntN(100); {
				case p < 55:
					ended = run.pollSome(1 + run.rng.IntN(20))
				case p < 75:
					run.assignSome()
				case p < 90:
					if len(run.checkpoints) < maxCheckpoints {
						run.checkpoints = append(run.checkpoints, run.snapshot())
					}
				default:
					// A bounded number of failovers, so every run ends.
					if len(run.checkpoints) > 0 && restores < maxRestores {
						restores++
						run.start(run.checkpoints[run.rng.IntN(len(run.checkpoints))])
					}
				}
			}
			closeReader(t, run.r)
			run.checkExactlyOnce("final run", run.out.records)

			// Every snapshot, restored on its own and read to the end.
			for i, cp := range run.checkpoints {
				run.start(cp)
				for len(run.pending) > 0 || !run.noMore {
					run.assignSome()
				}
				driveToEnd(t, run.r, run.out)
				closeReader(t, run.r)
				run.r = nil
				run.checkExactlyOnce(fmt.Sprintf("restore of snapshot %d", i), run.out.records)
			}
		})
		if !ok {
			break // one failing seed says it all; the others would repeat it
		}
	}
}
