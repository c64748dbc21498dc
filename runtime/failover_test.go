package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/restart"
)

// restartListener reports each restart's failure on a channel.
func restartListener() (Option, <-chan error) {
	c := make(chan error, 16)
	return WithJobListener(JobListener{Restarting: func(_ int, err error) {
		select {
		case c <- err:
		default:
		}
	}}), c
}

// A cancel during a restart whose drain cannot commit the restored
// transactions says so: Execute returns ErrCancelledWhileRestarting with
// the failure it was restarting from, the commit's failure, that the
// checkpoint's transactions may still be open, and how to commit them.
func TestCancelDuringRestartSaysWhenTransactionsStayOpen(t *testing.T) {
	errCommit := errors.New("broker unreachable")
	j := &rangeJob{par: 1, splits: 2, perSplit: 10}
	j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
		r.SignalFailedWithUnknownReason(errCommit)
		return false
	}}
	listen, restarting := restartListener()
	dir := t.TempDir()
	j.opts = []Option{WithCheckpointInterval(time.Millisecond), WithCheckpointDir(dir),
		WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Hour)), listen}
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() { errc <- j.env().Execute(ctx, "stuck commit") }()
	select {
	case <-restarting:
	case err := <-errc:
		t.Fatalf("Execute = %v before any restart", err)
	}
	cancel()
	err := <-errc
	if !errors.Is(err, ErrCancelledWhileRestarting) || !errors.Is(err, errCommit) {
		t.Fatalf("Execute = %v, want ErrCancelledWhileRestarting wrapping the commit failure", err)
	}
	for _, want := range []string{"may still be open", "run the job again", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Execute = %v; it does not say %q", err, want)
		}
	}
}

// unreachableSource is a range source whose readers cannot be created,
// as a source whose brokers cannot be reached.
type unreachableSource struct {
	*rangeSrc
	err   error
	tries atomic.Int64
}

func (s *unreachableSource) CreateReader(connector.SourceReaderContext) (connector.SourceReader[int64, *rSplit], error) {
	s.tries.Add(1)
	return nil, s.err
}

// A job that never gets going (no checkpoint completed, no record read
// since Execute began) fails with its last error once the startup failure
// timeout has passed, instead of restarting without end.
func TestJobThatNeverGetsGoingFailsWithTheLastError(t *testing.T) {
	for _, checkpoints := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoints %v", checkpoints), func(t *testing.T) {
			errDial := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
			src := &unreachableSource{rangeSrc: &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, err: errDial}
			opts := []Option{WithLogger(discardLogger()), WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Millisecond)),
				WithStartupFailureTimeout(200 * time.Millisecond)}
			if checkpoints {
				opts = append(opts, WithCheckpointInterval(10*time.Millisecond))
			}
			env := NewEnvironment(opts...)
			SinkTo(FromSource(env, src, "unreachable").UID("src"), twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := env.Execute(ctx, "never gets going")
			if ctx.Err() != nil {
				t.Fatalf("Execute = %v after restarting for 10 s (%d readers tried); want the job failed after its startup failure timeout", err, src.tries.Load())
			}
			if !errors.Is(err, ErrNeverStarted) || !errors.Is(err, errDial) {
				t.Fatalf("Execute = %v, want ErrNeverStarted wrapping the last failure", err)
			}
			if src.tries.Load() < 2 {
				t.Fatalf("%d readers tried: the job failed without restarting first", src.tries.Load())
			}
		})
	}
}

// The startup failure timeout spares a job that got going: failures after
// it, each after a completed checkpoint, restart as the strategy says.
func TestStartupFailureTimeoutSparesAJobThatGotGoing(t *testing.T) {
	var completed atomic.Int64
	var failures atomic.Int64
	j := &rangeJob{par: 2, splits: 4, perSplit: 50, delay: 100 * time.Microsecond}
	j.mapFn = func(v int64) (int64, error) {
		// Fail three times, each time only once a checkpoint completed
		// since the previous failure. Both subtasks run this at once: the
		// count moves by compare-and-swap, or both could fail at the
		// third.
		for {
			f := failures.Load()
			if f >= 3 || completed.Load() <= f {
				return v, nil
			}
			if failures.CompareAndSwap(f, f+1) {
				return 0, errors.New("injected failure")
			}
		}
	}
	j.opts = []Option{WithCheckpointInterval(time.Millisecond), WithStartupFailureTimeout(time.Nanosecond),
		WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Millisecond)),
		WithJobListener(JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }})}
	if err := j.env().Execute(testCtx(t), "got going"); err != nil {
		t.Fatalf("Execute = %v after %d failures", err, failures.Load())
	}
	if failures.Load() != 3 {
		t.Fatalf("%d failures injected, want 3", failures.Load())
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
}

// A cancel while the job waits to restart returns the failure it was
// restarting from, not nil: with checkpoints off, and with checkpoints on
// but none completed (nothing prepared that a restart would commit).
func TestCancelWhileRestartingReturnsTheLastFailure(t *testing.T) {
	for _, checkpoints := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoints %v", checkpoints), func(t *testing.T) {
			errDial := errors.New("connection refused")
			src := &unreachableSource{rangeSrc: &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}, err: errDial}
			listen, restarting := restartListener()
			opts := []Option{WithLogger(discardLogger()), WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Hour)), listen}
			if checkpoints {
				opts = append(opts, WithCheckpointInterval(time.Hour))
			}
			env := NewEnvironment(opts...)
			SinkTo(FromSource(env, src, "unreachable").UID("src"), twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
			ctx, cancel := context.WithCancel(testCtx(t))
			errc := make(chan error, 1)
			go func() { errc <- env.Execute(ctx, "cancelled while failing") }()
			select {
			case <-restarting:
			case err := <-errc:
				t.Fatalf("Execute = %v before any restart", err)
			}
			cancel()
			err := <-errc
			if !errors.Is(err, ErrCancelledWhileRestarting) || !errors.Is(err, errDial) {
				t.Fatalf("Execute = %v, want ErrCancelledWhileRestarting wrapping the failure", err)
			}
			if strings.Contains(err.Error(), "may still be open") {
				t.Fatalf("Execute = %v: no checkpoint completed, so no transaction can be open", err)
			}
		})
	}
}

// blockIgnoringCancellation is a user function stuck where cancellation
// cannot reach it: it waits for release, whatever the task's context says.
func blockIgnoringCancellation(blocked chan<- struct{}, release <-chan struct{}) {
	close(blocked)
	<-release
}

// A task that ignores its cancellation cannot hang failover: the map
// blocks on a channel that only the test releases, the source fails, and
// the restart that waits for every old task to exit gives up after the
// task cancellation timeout: Execute fails with an error naming the stuck
// operator and subtask and showing where its goroutine is.
func TestStuckTaskFailsJobAfterCancellationTimeout(t *testing.T) {
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool
	src := &rangeSrc{splits: 1, perSplit: 2000, delay: 2 * time.Millisecond, readerFailAt: -1}
	env := NewEnvironment(WithLogger(discardLogger()), WithCheckpointInterval(time.Hour),
		WithFlushTimeout(time.Millisecond),
		WithRestartStrategy(restart.FixedDelay(restart.Unlimited, time.Millisecond)),
		WithTaskCancellationTimeout(200*time.Millisecond))
	// The source's chain fails once the map is stuck; the rebalance puts
	// the map in a task of its own, which the restart must cancel.
	read := Map(FromSource(env, src, "range").UID("src"), func(v int64) (int64, error) {
		if armed.Load() {
			return 0, errors.New("injected failure")
		}
		return v, nil
	}).UID("fail")
	stuck := Map(Rebalance(read), func(v int64) (int64, error) {
		once.Do(func() { blockIgnoringCancellation(blocked, release) })
		return v, nil
	}).Name("stuck map").UID("stuck")
	SinkTo(stuck, twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
	errc := make(chan error, 1)
	go func() { errc <- env.Execute(context.Background(), "stuck") }()
	defer func() {
		close(release) // the goroutine the job left behind can end now
	}()
	<-blocked
	armed.Store(true)
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return 10 s after a restart began: a task that ignores cancellation hangs failover")
	}
	var ce *TaskCancellationError
	if !errors.As(err, &ce) {
		t.Fatalf("Execute = %v, want a *TaskCancellationError", err)
	}
	if !strings.Contains(ce.Operator, "stuck map") || ce.Subtask != 0 || ce.Timeout != 200*time.Millisecond {
		t.Errorf("TaskCancellationError names %q subtask %d after %v, want the chain of \"stuck map\", subtask 0, 200ms", ce.Operator, ce.Subtask, ce.Timeout)
	}
	if !strings.Contains(ce.Stack, "blockIgnoringCancellation") {
		t.Errorf("the stack excerpt does not show where the task is stuck:\n%s", ce.Stack)
	}
	if !strings.Contains(err.Error(), "stuck map") || !strings.Contains(err.Error(), "blockIgnoringCancellation") {
		t.Errorf("the error does not name the operator and where it is stuck: %v", err)
	}
}

// Nor can it hold Execute after a stop: a cancel drains, the stuck map
// outlasts the drain timeout, the hard stop cancels it, and the watchdog
// gives up on it: Execute returns ErrDrainTimeout and the stuck task's
// error.
func TestStuckTaskCannotHoldExecuteAfterTheDrainTimeout(t *testing.T) {
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	src := &rangeSrc{splits: 1, perSplit: 2000, delay: 2 * time.Millisecond, readerFailAt: -1}
	env := NewEnvironment(WithLogger(discardLogger()), WithFlushTimeout(time.Millisecond),
		WithDrainTimeout(100*time.Millisecond), WithTaskCancellationTimeout(200*time.Millisecond))
	stuck := Map(Rebalance(FromSource(env, src, "range").UID("src")), func(v int64) (int64, error) {
		once.Do(func() { blockIgnoringCancellation(blocked, release) })
		return v, nil
	}).Name("stuck map").UID("stuck")
	SinkTo(stuck, newCollectSink[int64]()).UID("sink")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- env.Execute(ctx, "stuck at stop") }()
	defer close(release)
	<-blocked
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return 10 s after the cancel: a task that ignores cancellation holds it")
	}
	var ce *TaskCancellationError
	if !errors.Is(err, ErrDrainTimeout) || !errors.As(err, &ce) || !strings.Contains(ce.Stack, "blockIgnoringCancellation") {
		t.Fatalf("Execute = %v, want ErrDrainTimeout and the stuck task's TaskCancellationError", err)
	}
}

// idleThenFailSource is a range source whose first reader is idle, as on
// an empty topic, and fails once after failAfter; the readers after it read
// the range.
type idleThenFailSource struct {
	*rangeSrc
	failAfter time.Duration
	err       error
	created   atomic.Int64
}

func (s *idleThenFailSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int64, *rSplit], error) {
	r, err := s.rangeSrc.CreateReader(ctx)
	if err != nil || s.created.Add(1) > 1 {
		return r, err
	}
	return &idleReader{rReader: r.(*rReader), failAfter: s.failAfter, err: s.err}, nil
}

type idleReader struct {
	*rReader
	failAfter time.Duration
	err       error
	due       atomic.Bool
	fail      *time.Timer
}

func (r *idleReader) Start() error {
	r.fail = time.AfterFunc(r.failAfter, func() { r.due.Store(true); r.signal() })
	return r.rReader.Start()
}

func (r *idleReader) PollNext(connector.ReaderOutput[int64]) (connector.InputStatus, error) {
	if r.due.Load() {
		return connector.NothingAvailable, r.err
	}
	return connector.NothingAvailable, nil
}

func (r *idleReader) Close() error {
	r.fail.Stop()
	return r.rReader.Close()
}

// A job whose attempt ran without failing for the startup failure timeout
// got going, even if it read nothing and completed no checkpoint (an empty
// topic, checkpoints off or rarer than the timeout): its first failure
// after that restarts as the restart strategy allows.
func TestAttemptThatRanHealthyForTheStartupTimeoutGotGoing(t *testing.T) {
	for _, checkpoints := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoints %v", checkpoints), func(t *testing.T) {
			const timeout = 200 * time.Millisecond
			errTransient := errors.New("transient broker failure")
			src := &idleThenFailSource{rangeSrc: &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1},
				failAfter: timeout + 50*time.Millisecond, err: errTransient}
			listen, restarting := restartListener()
			opts := []Option{WithLogger(discardLogger()), WithFlushTimeout(time.Millisecond),
				WithRestartStrategy(restart.FixedDelay(1, time.Millisecond)),
				WithStartupFailureTimeout(timeout), listen}
			if checkpoints {
				opts = append(opts, WithCheckpointInterval(time.Hour))
			}
			env := NewEnvironment(opts...)
			sink := &txnSink2PC{store: newTxnStore()}
			SinkTo(FromSource(env, src, "idle").UID("src"), twoPhase(sink)).UID("sink")
			if err := env.Execute(testCtx(t), "idle then failing"); err != nil {
				t.Fatalf("Execute = %v; want the idle attempt's failure restarted", err)
			}
			select {
			case err := <-restarting:
				if !errors.Is(err, errTransient) {
					t.Fatalf("restarted after %v, want the injected failure", err)
				}
			default:
				t.Fatal("the job did not restart")
			}
			if checkpoints {
				if err := sink.store.verify(20); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A failure after the final checkpoint, once some region's tasks may have
// finished, restarts the whole job: a region restart would end with a
// final checkpoint of its own that waits for the finished tasks, which can
// no longer acknowledge it. Two independent pipelines; the final
// checkpoint completes, region 0 commits and finishes, region 1's commit
// fails once.
func TestFailureAfterFinalCheckpointRestartsAllRegions(t *testing.T) {
	errCommit := errors.New("commit failed")
	var failed atomic.Bool
	j := &rangeJob{par: 2, splits: 2, perSplit: 20, push: true}
	j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
		if strings.HasPrefix(r.Committable().ID, "s1-") && failed.CompareAndSwap(false, true) {
			r.SignalFailedWithUnknownReason(errCommit)
			return false
		}
		return true
	}}
	listen, restarting := restartListener()
	j.opts = []Option{WithCheckpointInterval(time.Hour), WithCheckpointTimeout(2 * time.Second),
		WithRestartStrategy(restart.FixedDelay(1, time.Millisecond)), listen}
	if err := j.env().Execute(testCtx(t), "final checkpoint then failure"); err != nil {
		t.Fatalf("Execute = %v (commit failed: %v)", err, failed.Load())
	}
	if !failed.Load() {
		t.Fatal("no commit failed")
	}
	if err := <-restarting; !errors.Is(err, errCommit) {
		t.Fatalf("restarted after %v, want the commit failure", err)
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
}
