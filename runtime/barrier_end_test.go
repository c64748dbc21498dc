package runtime

import (
	"testing"
)

// Rule (B): a channel that ends counts as aligned: barrier 1 on channel 0,
// then channel 1 ends, and barrier 1 is forwarded without waiting further.
func TestEndedChannelCompletesAlignment(t *testing.T) {
	down := newInputGate[int](1, 4)
	out := newRecordWriter(partitionForward, []*inputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &opInfo{name: "t"}, cfg: &config{}, mb: newMailbox(), outputs: []networkOutput{out}}
	up := newInputGate[int](2, 4)
	in := &gateInput[int]{t: tk, gate: up, head: output[int](out), valve: newWatermarkValve(2, out)}
	tk.gate = up
	a := newRecordWriter(partitionForward, []*inputGate[int]{up}, 0, 100, nil, 128, 0)
	b := newRecordWriter(partitionForward, []*inputGate[int]{up}, 1, 100, nil, 128, 0)
	drain := func() {
		for {
			st, err := in.step()
			if err != nil {
				t.Fatal(err)
			}
			if st != inputMore {
				return
			}
		}
	}
	a.broadcastEvent(event{kind: eventBarrier, barrier: checkpointBarrier{CheckpointID: 1}})
	drain()
	if _, got, ok := down.poll(nil, 0); ok {
		t.Fatalf("forwarded %+v before channel 1 delivered the barrier or ended", got.ev)
	}
	b.broadcastEvent(event{kind: eventEndOfPartition})
	drain()
	_, got, ok := down.poll(nil, 0)
	if !ok || got.ev.kind != eventBarrier || got.ev.barrier.CheckpointID != 1 {
		t.Fatal("barrier 1 was not forwarded after the other channel ended")
	}
	if tk.aligning != 0 || up.nblocked != 0 {
		t.Fatalf("alignment still open (aligning %d, %d channels blocked)", tk.aligning, up.nblocked)
	}
}
