package runtime

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Keyed state rescaled on restore stays whole while the job runs on and
// fails over again: the pebble store a rescaled subtask opens (its key
// groups' range kept, the rest deleted) is read by the job's writes,
// snapshots and the key filter's build at once, and a failover after it
// restores the rescaled job's own checkpoint. Every count is emitted once.
func TestKeyedStateRescaledThenFailedOverIsExact(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		const from, to = 2, 3
		dir := t.TempDir()
		store := newTxnStore()
		died := make(chan struct{})
		var once sync.Once
		src1 := &rangeSrc{splits: 4, perSplit: 40, delay: 300 * time.Microsecond, readerFailAt: -1,
			hold: func(v int64) bool { return v >= 40 && v%40 >= 20 }, release: died}
		kill := func(v int64) (int64, error) {
			select {
			case <-died:
				return 0, errors.New("process killed")
			default:
				return v, nil
			}
		}
		env1 := countingJobVia(viaHandles, from, src1, kill, &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(NoRestart()), backend)
		var cover atomic.Int64
		env1.hooks = &testHooks{
			barrierInjected: func(id int64) {
				if cover.Load() == 0 && src1.holding.Load() == int32(from) {
					cover.Store(id)
				}
			},
			checkpointCompleted: func(id int64, _ checkpoint.Storage) {
				if c := cover.Load(); c != 0 && id >= c {
					once.Do(func() { close(died) })
				}
			},
		}
		if err := env1.Execute(testCtx(t), "first"); err == nil {
			t.Fatal("the job finished before it could be killed; the test proves nothing")
		}
		// Slow enough that the rescaled job runs on while its stores are
		// read in the background, and fails over once on the way.
		src2 := &rangeSrc{splits: 4, perSplit: 40, delay: 300 * time.Microsecond, readerFailAt: -1}
		env2 := countingJobVia(viaHandles, to, src2, failOnce(150), &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), backend,
			WithRestartStrategy(FixedDelayRestart(5, time.Millisecond)))
		if err := env2.Execute(testCtx(t), "second"); err != nil {
			t.Fatal(err)
		}
		if n := env2.Status().Restarts; n != 1 {
			t.Fatalf("the rescaled job restarted %d times, want the 1 injected failure", n)
		}
		checkCounts(t, store, 160, 7)
	})
}
