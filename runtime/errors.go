package runtime

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// ErrInvalidGraph is wrapped by every error Execute returns for a job graph
// it refuses to run: no sink, a parallelism <= 0, a nil function, a max
// parallelism below a parallelism, a duplicate UID. Match it with errors.Is.
var ErrInvalidGraph = engine.ErrInvalidGraph

// ErrDrainTimeout is returned by Execute when, after its context was
// cancelled, the job did not drain within the drain timeout (see
// WithDrainTimeout) and was stopped hard.
var ErrDrainTimeout = errors.New("job did not drain before the drain timeout")

// ErrStopped is returned by Execute when the job ended because it was
// stopped while it ran: by StopWithSavepoint, or by POST /api/v1/job/stop
// of the status server (WithHTTP). The job ended as a cancel of Execute's
// context ends it (sources stopped, the records in flight drained, sinks
// flushed and what they prepared committed), but the caller of Execute
// did not ask for it, and its input had not ended. Like
// http.ErrServerClosed, it says how the job ended, not that it failed: a
// program that stops its own job treats it as success. Match it with
// errors.Is.
var ErrStopped = engine.ErrStopped

// ErrCancelledWhileRestarting is wrapped by the error Execute returns when
// its context was cancelled while the job was restarting after a failure;
// that error wraps the failure too. Before returning, Execute runs the
// restart it was waiting for as a drain, so that the transactions of the
// last completed checkpoint are committed; if that fails, the error says
// they are still open and how to commit them.
var ErrCancelledWhileRestarting = errors.New("job cancelled while restarting after a failure")

// ErrNeverStarted is wrapped by the error Execute returns when the job
// kept failing without ever getting going, for longer than
// WithStartupFailureTimeout: since Execute began no checkpoint completed,
// no source emitted a record and the failing attempt had not run that
// long without failing (for instance, its brokers cannot be reached). The
// error wraps the last failure too.
var ErrNeverStarted = errors.New("job never got going")

// ErrAlreadyExecuted is returned by Execute on an Environment that already
// ran a job. An Environment describes one job.
var ErrAlreadyExecuted = errors.New("environment already executed")

// ErrIncompatibleCheckpoint is wrapped by the error Execute returns when
// the checkpoint it would restore was written by a job graph whose state
// does not fit this one (a stateful UID now names another kind of operator
// or another state type; see the fingerprint in graph.go).
var ErrIncompatibleCheckpoint = engine.ErrIncompatibleCheckpoint

// ErrDifferentJob is wrapped by the error Execute returns for a process
// of a distributed job refused by the job's group because the processes
// already in it run another job: another graph (a stateful operator
// added, removed, or of another kind or state, such as another window
// size under the same uid), slot count or max parallelism. The error
// names what differs. Every process of a distributed job runs the same
// job; an upgrade stops them all before the new version starts
// (docs/operations.md, "Upgrading a distributed job").
var ErrDifferentJob = slots.ErrDifferentJob

// OperatorError is how a job fails because of one operator: a user
// function, a source reader, a sink writer or the source's split enumerator
// returned an error (or panicked). Execute returns it as is, so callers can
// inspect it with errors.As and reach the cause with errors.Is.
type OperatorError struct {
	// Operator is the operator's name; for a panic it is the name of the
	// whole chain, since the engine cannot tell which chained call panicked.
	Operator string
	// UID is the operator's stable id (explicit or generated).
	UID string
	// Subtask is the failing subtask in [0, parallelism), or -1 when the
	// error came from the operator's coordinator (a source's enumerator).
	Subtask int
	// Err is the cause.
	Err error
}

func (e *OperatorError) Error() string {
	if e.Subtask < 0 {
		return fmt.Sprintf("operator %q (uid %s) coordinator failed: %v", e.Operator, e.UID, e.Err)
	}
	return fmt.Sprintf("operator %q (uid %s) subtask %d failed: %v", e.Operator, e.UID, e.Subtask, e.Err)
}

func (e *OperatorError) Unwrap() error { return e.Err }

// TaskCancellationError is how a job fails when a task it cancelled (for a
// restart, or to stop) did not exit within the task cancellation timeout
// (WithTaskCancellationTimeout): something in the task ignores
// cancellation, such as a user function blocked on a channel or a call
// that takes no context. Execute returns it without waiting for the
// task's goroutine, which is left running; fix the code that Stack shows.
type TaskCancellationError struct {
	// Operator is the task's chain of operators, as in "Source: in ->
	// Map"; the stack shows which of them is stuck.
	Operator string
	// UID is the chain's first operator's UID.
	UID string
	// Subtask is the stuck subtask, in [0, parallelism).
	Subtask int
	// Timeout is how long the task was given.
	Timeout time.Duration
	// Stack is the stuck goroutine's stack when the timeout passed, cut
	// to its innermost frames.
	Stack string
}

func (e *TaskCancellationError) Error() string {
	return fmt.Sprintf("task %q (uid %s) subtask %d did not exit within %v of its cancellation (WithTaskCancellationTimeout): code in it ignores cancellation; its goroutine is left running, at:\n%s",
		e.Operator, e.UID, e.Subtask, e.Timeout, e.Stack)
}

// panicError is a recovered panic. Its message carries the stack, for
// Execute's error and the log, where the code at fault is looked for;
// the job's status (statusText), which the status server shows without a
// token, leaves the stack out.
type panicError struct {
	what  string // "panic", or where it happened, as "async work: panic"
	value any
	stack []byte
}

func newPanicError(what string, value any) *panicError {
	return &panicError{what: what, value: value, stack: debug.Stack()}
}

func (e *panicError) Error() string { return fmt.Sprintf("%s: %v\n%s", e.what, e.value, e.stack) }

// statusText is err's message without the stacks it carries (of a panic,
// of a task that ignored its cancellation): what the job's status shows.
func statusText(err error) string {
	msg := err.Error()
	var pe *panicError
	if errors.As(err, &pe) {
		msg = strings.Replace(msg, "\n"+string(pe.stack), "", 1)
	}
	var ce *TaskCancellationError
	if errors.As(err, &ce) && ce.Stack != "" {
		msg = strings.Replace(msg, ", at:\n"+ce.Stack, " (its stack is in the log)", 1)
	}
	return msg
}

func init() {
	engine.SetOperatorErrors(attributeToOperator)
}

// attributeToOperator is how an engine.OpInfo attributes err to its
// operator: an *OperatorError, unless err already carries one, so that an
// error returned through a chain keeps the operator that produced it, not
// the one it passed through.
func attributeToOperator(i *engine.OpInfo, err error) error {
	var oe *OperatorError
	if errors.As(err, &oe) {
		return err
	}
	return &OperatorError{Operator: i.Name, UID: i.UID, Subtask: i.Subtask, Err: err}
}

func invalidGraph(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidGraph, fmt.Sprintf(format, args...))
}
