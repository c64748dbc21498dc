package runtime

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Rule (Flink's SinkWriterOperator): a sink writer that fails to prepare
// at a barrier has given up its open transaction, so its task fails and
// restarts from the last completed checkpoint. Declining the checkpoint
// instead would let the next one complete with source positions past the
// aborted records: they would be missing while Execute returns nil, even
// with a checkpoint failure tolerated.
func TestPrepareFailureFailsTaskNotCheckpoint(t *testing.T) {
	errPrepare := errors.New("injected prepare failure: transaction aborted")
	var mu sync.Mutex
	failed, completed := false, 0
	restarts := 0
	j := &rangeJob{par: 1, splits: 2, perSplit: 200, delay: 100 * time.Microsecond}
	j.sink = &txnSink2PC{store: newTxnStore(), prepareFail: func(_ int, id int64, open int) error {
		mu.Lock()
		defer mu.Unlock()
		// Once, with records in the transaction, after a checkpoint
		// completed (so that there is one to go back to).
		if failed || open == 0 || completed == 0 {
			return nil
		}
		failed = true
		return fmt.Errorf("checkpoint %d: %w", id, errPrepare)
	}}
	j.opts = []Option{
		WithCheckpointInterval(2 * time.Millisecond),
		WithTolerableCheckpointFailures(1),
		WithJobListener(JobListener{
			CheckpointCompleted: func(int64) { mu.Lock(); completed++; mu.Unlock() },
			Restarting:          func(int, error) { mu.Lock(); restarts++; mu.Unlock() },
		}),
	}
	if err := j.env().Execute(testCtx(t), "prepare failure"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !failed {
		t.Fatal("the prepare failure was never injected")
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatalf("after a failed prepare: %v", err)
	}
	if restarts != 1 {
		t.Fatalf("%d restarts, want 1: a failed prepare must fail the task", restarts)
	}
}
