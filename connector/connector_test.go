package connector_test

import (
	"context"
	"errors"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// The tests below check the promise of the package doc: capability
// interfaces compose with generic engine entry points, and the engine finds a
// writer's capabilities by asserting with the type arguments it was given.

type txnID string

type plainWriter struct{ written []string }

func (w *plainWriter) Write(e string, _ connector.WriteContext) error {
	w.written = append(w.written, e)
	return nil
}
func (w *plainWriter) Flush(bool) error { return nil }
func (w *plainWriter) Close() error     { return nil }

type txnWriter struct {
	plainWriter
	open int
}

func (w *txnWriter) PrepareCommit(int64) ([]txnID, error) {
	w.open++
	return []txnID{txnID("txn-" + string(rune('0'+w.open)))}, nil
}

func (w *txnWriter) SnapshotState(int64) ([]int, error) { return []int{w.open}, nil }

type plainSink struct{}

func (plainSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return &plainWriter{}, nil
}

type txnSink struct{}

func (txnSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return &txnWriter{}, nil
}

func (txnSink) RestoreWriter(_ connector.SinkInitContext, states []int) (connector.StatefulSinkWriter[string, int], error) {
	w := &txnWriter{}
	for _, s := range states {
		w.open = max(w.open, s)
	}
	return w, nil
}
func (txnSink) WriterStateSerializer() connector.VersionedSerializer[int] { return nil }

func (txnSink) CreateCommitter(connector.SinkInitContext) (connector.Committer[txnID], error) {
	return committerFunc(func(context.Context, []connector.CommitRequest[txnID]) error { return nil }), nil
}
func (txnSink) CommittableSerializer() connector.VersionedSerializer[txnID] { return nil }

type committerFunc func(context.Context, []connector.CommitRequest[txnID]) error

func (f committerFunc) Commit(ctx context.Context, r []connector.CommitRequest[txnID]) error {
	return f(ctx, r)
}
func (committerFunc) Close() error { return nil }

type initCtx struct{}

func (initCtx) Context() context.Context            { return context.Background() }
func (initCtx) SubtaskIndex() int                   { return 0 }
func (initCtx) Parallelism() int                    { return 1 }
func (initCtx) AttemptNumber() int                  { return 0 }
func (initCtx) RestoredCheckpointID() (int64, bool) { return 0, false }

// sinkToTwoPhase stands in for the engine's exactly-once entry point: it names
// the capability with explicit type parameters and asserts the writer with
// the same arguments.
func sinkToTwoPhase[T, Comm any](s connector.TwoPhaseCommittingSink[T, Comm], elems []T) ([]Comm, error) {
	w, err := s.CreateWriter(initCtx{})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cw, ok := w.(connector.CommittingSinkWriter[T, Comm])
	if !ok {
		return nil, errNotCommitting
	}
	for _, e := range elems {
		if err := cw.Write(e, connector.WriteContext{Timestamp: connector.NoTimestamp}); err != nil {
			return nil, err
		}
	}
	if err := cw.Flush(false); err != nil {
		return nil, err
	}
	return cw.PrepareCommit(1)
}

var errNotCommitting = errors.New("writer is not a CommittingSinkWriter")

func TestCapabilitiesAreFoundByTypeAssertion(t *testing.T) {
	// A generic entry point accepts a two-phase sink and finds the
	// committing writer behind the plain SinkWriter it gets back.
	comms, err := sinkToTwoPhase[string, txnID](txnSink{}, []string{"a", "b"})
	if err != nil {
		t.Fatalf("sinkToTwoPhase: %v", err)
	}
	if len(comms) != 1 || comms[0] != "txn-1" {
		t.Fatalf("committables = %v, want [txn-1]", comms)
	}

	// The capabilities are separate interfaces: a plain sink is not a
	// two-phase sink, and its writer has no PrepareCommit.
	var s connector.Sink[string] = plainSink{}
	if _, ok := s.(connector.TwoPhaseCommittingSink[string, txnID]); ok {
		t.Fatal("plain sink asserted as TwoPhaseCommittingSink")
	}
	if _, ok := s.(connector.StatefulSink[string, int]); ok {
		t.Fatal("plain sink asserted as StatefulSink")
	}
	w, _ := s.CreateWriter(initCtx{})
	if _, ok := w.(connector.CommittingSinkWriter[string, txnID]); ok {
		t.Fatal("plain writer asserted as CommittingSinkWriter")
	}

	// Type arguments are part of the capability: the same writer is not a
	// committing writer for another committable type.
	var tw connector.SinkWriter[string] = &txnWriter{}
	if _, ok := tw.(connector.CommittingSinkWriter[string, int]); ok {
		t.Fatal("writer asserted with the wrong committable type")
	}
	if _, ok := tw.(connector.StatefulSinkWriter[string, int]); !ok {
		t.Fatal("stateful writer not found by assertion")
	}
	var ts connector.Sink[string] = txnSink{}
	if _, ok := ts.(connector.StatefulSink[string, int]); !ok {
		t.Fatal("stateful sink not found by assertion")
	}
}

func TestEnumsHaveNames(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{connector.MoreAvailable.String(), "more-available"},
		{connector.NothingAvailable.String(), "nothing-available"},
		{connector.EndOfInput.String(), "end-of-input"},
		{connector.InputStatus(0).String(), "unknown-input-status"},
		{connector.Bounded.String(), "bounded"},
		{connector.ContinuousUnbounded.String(), "continuous-unbounded"},
		{connector.Boundedness(0).String(), "unknown-boundedness"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
