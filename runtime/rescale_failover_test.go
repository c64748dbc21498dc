package runtime

import (
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
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
		dieMidStream(t, from, func(src *rangeSrc, kill func(int64) (int64, error), opts ...Option) *Environment {
			return countingJobVia(viaHandles, from, src, kill, &txnSink2PC{store: store}, append(opts, WithCheckpointDir(dir), backend)...)
		})
		// Slow enough that the rescaled job runs on while its stores are
		// read in the background, and fails over once on the way.
		src2 := &rangeSrc{splits: 4, perSplit: 40, delay: 300 * time.Microsecond, readerFailAt: -1}
		env2 := countingJobVia(viaHandles, to, src2, failOnce(150), &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), backend,
			WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)))
		if err := env2.Execute(testCtx(t), "first"); err != nil {
			t.Fatal(err)
		}
		if n := env2.Status().Restarts; n != 1 {
			t.Fatalf("the rescaled job restarted %d times, want the 1 injected failure", n)
		}
		checkCounts(t, store, 160, 7)
	})
}
