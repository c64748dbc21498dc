package runtime

import (
	"fmt"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/sinkop"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// sinkToTwoPhase adds the two-phase sink operator for sink, handed over
// by its TwoPhase as hidden: sinkop.TwoPhaseOperator, whose doc states
// how it is exactly once with checkpoints on. Without checkpoints it
// commits at the end of input, so such a sink fed by an unbounded source
// is refused without checkpoints, since that end never comes.
//
// The state signature names the hidden committable and writer state
// types, as the job's fingerprint has always named them.
func sinkToTwoPhase[T any](ds DataStream[T], sink connector.Sink[T], hidden connector.HiddenTwoPhaseSink[T]) DataStreamSink {
	n := &node{in: typeOpsFor[T]{}, isSink: true, needsCommit: true}
	sinkType := fmt.Sprintf("%T", sink)
	committable := hidden.CommittableType().String()
	var stateful connector.StatefulSink[T, any]
	writerState := ""
	if t := hidden.WriterStateType(); t != nil {
		writerState = t.String()
		var ok bool
		if stateful, ok = hidden.(connector.StatefulSink[T, any]); !ok {
			n.errs = append(n.errs, fmt.Errorf("sink %s: its TwoPhase names writer state %s but hands over no RestoreWriter and WriterStateSerializer; make it with connector.HideCommittableAndWriterState", sinkType, t))
		}
	}
	n.build = func(info engine.OpInfo, par int, _ any) (engine.Lifecycle, any) {
		op := sinkop.NewTwoPhaseOperator[T, any](info, hidden, par, sinkType, committable)
		if stateful != nil {
			op.Stateful(stateful, writerState)
		}
		return op, engine.Output[T](op)
	}
	n.state = stateformat.TwoPhaseSinkSignature(committable, writerState)
	ds.env.addNode("Sink", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStreamSink{node: n}
}
