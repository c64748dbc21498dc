package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
)

// keyedSavepointJob is a running count per key (v % 7) on the chosen
// backend, the counts committed as key*100000+count; extra adds a
// stateless operator before the count, which fails once at each of failAt.
func keyedSavepointJob(par, maxPar int, src *rangeSrc, extra bool, failAt []int64, store *txnStore, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(par), WithMaxParallelism(maxPar), WithFlushTimeout(time.Millisecond),
		WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second), WithCheckpointInterval(5 * time.Millisecond)}, opts...)...)
	ds := Map(FromSource(env, src, "range").UID("src"), func(v int64) (int64, error) { return v, nil }).UID("map")
	if extra {
		ds = Map(ds, failOnce(failAt...)).UID("extra")
	}
	counts := Map(Count(KeyBy(ds, func(v int64) int64 { return v % 7 })).UID("counts"), func(kv KV[int64, int64]) (int64, error) {
		return kv.Key*100000 + kv.Value, nil
	})
	SinkTo(counts, twoPhase(&txnSink2PC{store: store})).UID("sink")
	return env
}

// pebbleIn is the pebble backend working in dir.
func pebbleIn(dir string) Option {
	return optionFunc(func(c *config) {
		c.state.backend = kindPebble
		c.state.dir, c.state.dirSet = dir, true
		c.state.bufferEntries = 8
	})
}

// keyedSavepointRoundTrip stops a keyed job at parallelism from with a
// savepoint under target, deletes its checkpoints (deleteDir), and starts
// a job with one more operator at parallelism to from the savepoint, in a
// new state directory; the savepoint's pebble files must be stored again
// in its storage, whose newest checkpoint is checked whole (on heap, a
// failover resumes from those checkpoints); every running count is
// committed once.
func keyedSavepointRoundTrip(t *testing.T, backend func() Option, from, to int, cpDir1, target, cpDir2 string, deleteDir bool) {
	t.Helper()
	const splits, perSplit, keys = 4, 300, 7
	store := newTxnStore()
	src1 := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Millisecond, readerFailAt: -1}
	sp := stopAfter(t, keyedSavepointJob(from, 16, src1, false, nil, store, WithCheckpointDir(cpDir1), WithRestartStrategy(restart.None()), backend()), src1, target)
	before := len(committedOnce(t, store))
	if before == 0 || before == splits*perSplit {
		t.Fatalf("first job committed %d of %d counts; the test needs a stop half-way", before, splits*perSplit)
	}
	if deleteDir {
		if err := os.RemoveAll(cpDir1); err != nil {
			t.Fatal(err)
		}
	}
	pebble := isPebble(backend())
	if pebble {
		c, err := checkpoint.OpenRestorePoint(sp.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Files()) == 0 {
			t.Fatalf("pebble savepoint %s holds no shared files; the test would not restore any", sp.Path)
		}
	}
	var restores []status.Restore
	var mu sync.Mutex
	var restarts int
	// The last record of every split fails once: late enough that the
	// job has checkpoints of its own by then.
	var failAt []int64
	for s := range int64(splits) {
		failAt = append(failAt, s*perSplit+perSplit-1)
	}
	src2 := &rangeSrc{splits: splits, perSplit: perSplit, delay: 200 * time.Microsecond, readerFailAt: -1}
	env := keyedSavepointJob(to, 16, src2, true, failAt, store, WithCheckpointDir(cpDir2), WithRestoreFrom(sp.Path),
		WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), backend(),
		WithJobListener(JobListener{
			Restored: func(r status.Restore) {
				mu.Lock()
				defer mu.Unlock()
				restores = append(restores, r)
			},
			Restarting: func(int, error) { mu.Lock(); restarts++; mu.Unlock() },
		}))
	if err := env.Execute(testCtx(t), "second"); err != nil {
		t.Fatal(err)
	}
	if len(restores) == 0 || restores[0].Checkpoint != sp.Checkpoint || restores[0].Path != sp.Path {
		t.Fatalf("second job restored %+v, want checkpoint %d at %s first", restores, sp.Checkpoint, sp.Path)
	}
	own := false
	for _, r := range restores[1:] {
		own = own || r.Checkpoint > 0 && r.Path != sp.Path
	}
	if restarts == 0 || !own {
		t.Fatalf("the second job restarted %d times, restores %+v: none from a checkpoint of its own; the test proves nothing of them", restarts, restores)
	}
	// The restored job's newest checkpoint stands on its own storage:
	// every shared file it names is there, whole.
	last, err := checkpoint.OpenRestorePoint(cpDir2)
	if err != nil {
		t.Fatal(err)
	}
	if pebble && len(last.Files()) == 0 {
		t.Fatalf("the restored job's checkpoint %d at %s names no shared file", last.ID, cpDir2)
	}
	for i, f := range last.Files() {
		if err := last.CopyFile(f, filepath.Join(t.TempDir(), fmt.Sprint(i))); err != nil {
			t.Fatalf("shared file %s of the restored job's checkpoint %d: %v", f.Name, last.ID, err)
		}
	}
	n := len(committedOnce(t, store))
	checkCounts(t, store, splits*perSplit, keys)
	if n != splits*perSplit {
		t.Fatalf("committed %d distinct counts over both jobs, want %d", n, splits*perSplit)
	}
}

// Rule (keyed state from a savepoint): a running count on heap and on
// pebble, stopped with a savepoint, restores into a job with one more
// operator at another parallelism (2->3 and 3->1) with the job's
// checkpoints deleted and a new state directory; its own checkpoints
// hold every file they name, and it goes on through a failover from them;
// every count exactly once.
func TestKeyedStateFromSavepointRescaledExactlyOnce(t *testing.T) {
	for _, b := range stateBackends {
		for _, pars := range [][2]int{{2, 3}, {3, 1}} {
			t.Run(fmt.Sprintf("%s/%d->%d", b, pars[0], pars[1]), func(t *testing.T) {
				backend := func() Option {
					if b == kindPebble {
						return pebbleIn(t.TempDir())
					}
					return withBackend(b)
				}
				keyedSavepointRoundTrip(t, backend, pars[0], pars[1], t.TempDir(), t.TempDir(), t.TempDir(), true)
			})
		}
	}
}

// Rule: the same on S3 for pebble: the job's checkpoints, the savepoint
// and the restored job's checkpoints all on the in-process S3 server.
func TestPebbleStateFromSavepointOnS3ExactlyOnce(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	for _, pars := range [][2]int{{2, 3}, {3, 1}} {
		t.Run(fmt.Sprintf("%d->%d", pars[0], pars[1]), func(t *testing.T) {
			p := fmt.Sprintf("p%d%d/", pars[0], pars[1])
			keyedSavepointRoundTrip(t, func() Option { return pebbleIn(t.TempDir()) }, pars[0], pars[1],
				srv.URLOf(p+"job1"), srv.URLOf(p+"savepoints"), srv.URLOf(p+"job2"), false)
		})
	}
}

// Rule: a savepoint's keyed state restores only at the max parallelism it
// was written with; another is refused at start naming it, nothing
// committed.
func TestSavepointWithChangedMaxParallelismRefused(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		store := newTxnStore()
		src1 := &rangeSrc{splits: 4, perSplit: 300, delay: time.Millisecond, readerFailAt: -1}
		sp := stopAfter(t, keyedSavepointJob(2, 16, src1, false, nil, store, WithRestartStrategy(restart.None()), backend), src1, t.TempDir())
		before := len(committedOnce(t, store))
		src2 := &rangeSrc{splits: 4, perSplit: 300, readerFailAt: -1}
		err := keyedSavepointJob(2, 32, src2, false, nil, store, WithRestoreFrom(sp.Path), WithRestartStrategy(restart.None()), backend).
			Execute(testCtx(t), "refused")
		if err == nil || !strings.Contains(err.Error(), "max parallelism 16") || !strings.Contains(err.Error(), "WithMaxParallelism(16)") || !strings.Contains(err.Error(), sp.Path) {
			t.Fatalf("restore at max parallelism 32 of a savepoint written at 16: %v, want a refusal naming 16 and %s", err, sp.Path)
		}
		if n := len(committedOnce(t, store)); n != before {
			t.Fatalf("a refused job committed %d counts", n-before)
		}
	})
}

// isPebble reports whether opt chooses the pebble backend.
func isPebble(opt Option) bool {
	var c config
	opt.apply(&c)
	return c.state.backend == kindPebble
}
