package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/restart"
)

// Rule: the job's status, which GET /api/v1/job serves without a token,
// shows a panic's value and where it happened, never its stack; the stack
// stays in Execute's error and the log, where the code at fault is looked
// for. Before, the status carried the whole stack of the task goroutine.
func TestStatusShowsAPanicWithoutItsStack(t *testing.T) {
	var logs statustest.LockedBuffer
	env := NewEnvironment(WithLogger(slogText(&logs)), WithRestartStrategy(restart.FixedDelay(1, 0)))
	src := &memSource[ev]{numSplits: 1, perSplit: 10, gen: genEv(3)}
	in := FromSource(env, src, "mem")
	SinkTo(Map(in, func(e ev) (ev, error) { panic("map boom") }).Name("boom"), newCollectSink[ev]())
	err := env.Execute(context.Background(), "panic status")
	if err == nil || !strings.Contains(err.Error(), "panic: map boom") || !strings.Contains(err.Error(), "goroutine ") {
		t.Fatalf("Execute = %v, want the panic with its stack", err)
	}
	if l := logs.String(); !strings.Contains(l, "map boom") || !strings.Contains(l, "goroutine ") {
		t.Fatalf("the restart's log line lacks the panic's stack:\n%s", l)
	}
	st := env.Status()
	if st.LastFailure == nil || !strings.Contains(st.LastFailure.Error, "panic: map boom") {
		t.Fatalf("last failure %+v, want the panic's value", st.LastFailure)
	}
	b, _ := json.Marshal(st)
	if strings.Contains(string(b), "goroutine ") || strings.Contains(string(b), "debug.Stack") {
		t.Fatalf("the status JSON carries a stack: %s", b)
	}
}
