package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
)

// Rule (E): a panic in an enumerator's async work, which runs off the
// coordinator goroutine, fails the job like any coordinator failure (the
// operator, subtask -1) with the panic and its stack, instead of crashing
// the process.
func TestPanicInAsyncWorkFailsTheJob(t *testing.T) {
	env := NewEnvironment()
	src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(3)}
	src.onEnumerator = func(e *memEnumerator[ev]) {
		e.ctx.CallAsync(func(context.Context) func() error { panic("async boom") })
	}
	SinkTo(FromSource(env, src, "mem"), newCollectSink[ev]())
	err := env.Execute(context.Background(), "async panic")
	var oe *OperatorError
	if !errors.As(err, &oe) || oe.Operator != "Source: mem" || oe.Subtask != -1 {
		t.Fatalf("Execute = %v, want the coordinator's *OperatorError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "panic: async boom") || !strings.Contains(msg, "goroutine") {
		t.Fatalf("error %q does not carry the panic and its stack", msg)
	}
}

// panickyCloser is an enumerator whose Close panics.
type panickyCloser struct{ *memEnumerator[ev] }

func (panickyCloser) Close() error { panic("close boom") }

type panickyCloseSource struct{ *memSource[ev] }

func (s panickyCloseSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*memSplit]) (connector.SplitEnumerator[*memSplit, int], error) {
	e, err := s.memSource.CreateEnumerator(ctx)
	if err != nil {
		return nil, err
	}
	return panickyCloser{e.(*memEnumerator[ev])}, nil
}

// Rule (E): a panic while the coordinator shuts down (the enumerator's
// Close) fails the coordinator with the panic and its stack; the process
// survives and the shutdown completes.
func TestPanicInCoordinatorShutdownFailsIt(t *testing.T) {
	src := panickyCloseSource{&memSource[ev]{numSplits: 1, perSplit: 1, gen: genEv(1)}}
	errc := make(chan error, 4)
	c := srccoord.New[ev, *memSplit, int](coordOperator(engine.OpInfo{Name: "src", UID: "u", Subtask: -1}), src, 1, func(err error) { errc <- err }, srccoord.GateOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("coordinator did not stop")
	}
	select {
	case err := <-errc:
		var oe *OperatorError
		if !errors.As(err, &oe) || oe.Subtask != -1 || !strings.Contains(err.Error(), "close boom") || !strings.Contains(err.Error(), "goroutine") {
			t.Fatalf("coordinator failed with %v, want its *OperatorError with the panic and stack", err)
		}
	default:
		t.Fatal("the panic in shutdown did not fail the coordinator")
	}
}
