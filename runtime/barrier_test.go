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

// Rule (aligned checkpoints): only barrier N counts towards the alignment
// of checkpoint N. A barrier of an older checkpoint, arriving on a channel
// that has not delivered N yet, is given up (that checkpoint can no longer
// complete here: another channel is past it), and the alignment of N goes
// on until N arrived on every channel.
func TestStaleBarrierDoesNotCountTowardNewerAlignment(t *testing.T) {
	down := newInputGate[int](1, 8)
	out := newRecordWriter(partitionForward, []*inputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &opInfo{name: "t"}, cfg: &config{}, mb: newMailbox(), outputs: []networkOutput{out}}
	up := newInputGate[int](2, 8)
	tk.gate = up
	in := &gateInput[int]{t: tk, gate: up, head: output[int](out), valve: newWatermarkValve(2, out)}
	a := newRecordWriter(partitionForward, []*inputGate[int]{up}, 0, 1, nil, 128, 0)
	b := newRecordWriter(partitionForward, []*inputGate[int]{up}, 1, 1, nil, 128, 0)
	barrier := func(id int64) event {
		return event{kind: eventBarrier, barrier: checkpointBarrier{CheckpointID: id}}
	}
	drain := func() {
		for {
			if st, err := in.step(); err != nil {
				t.Fatal(err)
			} else if st == inputNothing {
				return
			}
		}
	}
	var got []int
	collect := func() {
		out.flush()
		for {
			_, bt, ok := down.poll(nil, 0)
			if !ok {
				return
			}
			for _, r := range bt.records {
				got = append(got, r.value)
			}
			if bt.ev.kind == eventBarrier {
				got = append(got, -int(bt.ev.barrier.CheckpointID))
			}
		}
	}
	_ = a.collect(1, 0)
	a.broadcastEvent(barrier(6))
	_ = a.collect(100, 0) // behind barrier 6
	drain()
	_ = b.collect(2, 0)
	b.broadcastEvent(barrier(5))
	drain()
	collect()
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("after barrier 6 on channel 0 and barrier 5 on channel 1: forwarded %v, want [1 2] (barrier 5 must not complete checkpoint 6)", got)
	}
	_ = b.collect(3, 0)
	b.broadcastEvent(barrier(6))
	drain()
	collect()
	if fmt.Sprint(got) != "[1 2 3 -6 100]" {
		t.Fatalf("forwarded %v, want [1 2 3 -6 100]: checkpoint 6 once barrier 6 arrived on both channels", got)
	}
}
