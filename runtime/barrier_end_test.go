package runtime

import (
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// Rule (B): a channel that ends counts as aligned: barrier 1 on channel 0,
// then channel 1 ends, and barrier 1 is forwarded without waiting further.
func TestEndedChannelCompletesAlignment(t *testing.T) {
	down := engine.NewInputGate[int](1, 4)
	out := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &engine.OpInfo{Name: "t"}, cfg: &config{}, mb: engine.NewMailbox(), outputs: []engine.NetworkOutput{out}}
	up := engine.NewInputGate[int](2, 4)
	in := &gateInput[int]{t: tk, gate: up, head: engine.Output[int](out), valve: engine.NewWatermarkValve(2, out)}
	tk.gate = up
	a := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 0, 100, nil, 128, 0)
	b := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 1, 100, nil, 128, 0)
	drain := func() {
		for {
			st, err := in.Step()
			if err != nil {
				t.Fatal(err)
			}
			if st != engine.InputMore {
				return
			}
		}
	}
	a.BroadcastEvent(engine.Event{Kind: engine.EventBarrier, Barrier: engine.CheckpointBarrier{CheckpointID: 1}})
	drain()
	if _, got, ok := down.Poll(nil, 0); ok {
		t.Fatalf("forwarded %+v before channel 1 delivered the barrier or ended", got.Ev)
	}
	b.BroadcastEvent(engine.Event{Kind: engine.EventEndOfPartition})
	drain()
	_, got, ok := down.Poll(nil, 0)
	if !ok || got.Ev.Kind != engine.EventBarrier || got.Ev.Barrier.CheckpointID != 1 {
		t.Fatal("barrier 1 was not forwarded after the other channel ended")
	}
	if tk.aligning != 0 || up.NBlocked != 0 {
		t.Fatalf("alignment still open (aligning %d, %d channels blocked)", tk.aligning, up.NBlocked)
	}
}
