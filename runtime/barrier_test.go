package runtime

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
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

// Rule (aligned checkpoints): only barrier N counts towards the alignment
// of checkpoint N. A barrier of an older checkpoint, arriving on a channel
// that has not delivered N yet, is given up (that checkpoint can no longer
// complete here: another channel is past it), and the alignment of N goes
// on until N arrived on every channel.
func TestStaleBarrierDoesNotCountTowardNewerAlignment(t *testing.T) {
	down := engine.NewInputGate[int](1, 8)
	out := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &engine.OpInfo{Name: "t"}, cfg: &config{}, mb: engine.NewMailbox(), outputs: []engine.NetworkOutput{out}}
	up := engine.NewInputGate[int](2, 8)
	tk.gate = up
	in := &gateInput[int]{t: tk, gate: up, head: engine.Output[int](out), valve: engine.NewWatermarkValve(2, out)}
	a := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 0, 1, nil, 128, 0)
	b := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 1, 1, nil, 128, 0)
	barrier := func(id int64) engine.Event {
		return engine.Event{Kind: engine.EventBarrier, Barrier: engine.CheckpointBarrier{CheckpointID: id}}
	}
	drain := func() {
		for {
			if st, err := in.Step(); err != nil {
				t.Fatal(err)
			} else if st == engine.InputNothing {
				return
			}
		}
	}
	var got []int
	collect := func() {
		out.Flush()
		for {
			_, bt, ok := down.Poll(nil, 0)
			if !ok {
				return
			}
			for _, r := range bt.Records {
				got = append(got, r.Value)
			}
			if bt.Ev.Kind == engine.EventBarrier {
				got = append(got, -int(bt.Ev.Barrier.CheckpointID))
			}
		}
	}
	_ = a.Collect(1, 0)
	a.BroadcastEvent(barrier(6))
	_ = a.Collect(100, 0) // behind barrier 6
	drain()
	_ = b.Collect(2, 0)
	b.BroadcastEvent(barrier(5))
	drain()
	collect()
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("after barrier 6 on channel 0 and barrier 5 on channel 1: forwarded %v, want [1 2] (barrier 5 must not complete checkpoint 6)", got)
	}
	_ = b.Collect(3, 0)
	b.BroadcastEvent(barrier(6))
	drain()
	collect()
	if fmt.Sprint(got) != "[1 2 3 -6 100]" {
		t.Fatalf("forwarded %v, want [1 2 3 -6 100]: checkpoint 6 once barrier 6 arrived on both channels", got)
	}
}
