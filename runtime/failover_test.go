package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
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
		WithRestartStrategy(FixedDelayRestart(-1, time.Hour)), listen}
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
			opts := []Option{WithLogger(discardLogger()), WithRestartStrategy(FixedDelayRestart(-1, time.Millisecond)),
				WithStartupFailureTimeout(200 * time.Millisecond)}
			if checkpoints {
				opts = append(opts, WithCheckpointInterval(10*time.Millisecond))
			}
			env := NewEnvironment(opts...)
			SinkToTwoPhase(FromSource(env, src, "unreachable", NoWatermarks[int64]()).UID("src"), &txnSink2PC{store: newTxnStore()}).UID("sink")
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
		// since the previous failure.
		if failures.Load() < 3 && completed.Load() > failures.Load() {
			failures.Add(1)
			return 0, errors.New("injected failure")
		}
		return v, nil
	}
	j.opts = []Option{WithCheckpointInterval(time.Millisecond), WithStartupFailureTimeout(time.Nanosecond),
		WithRestartStrategy(FixedDelayRestart(-1, time.Millisecond)),
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
			opts := []Option{WithLogger(discardLogger()), WithRestartStrategy(FixedDelayRestart(-1, time.Hour)), listen}
			if checkpoints {
				opts = append(opts, WithCheckpointInterval(time.Hour))
			}
			env := NewEnvironment(opts...)
			SinkToTwoPhase(FromSource(env, src, "unreachable", NoWatermarks[int64]()).UID("src"), &txnSink2PC{store: newTxnStore()}).UID("sink")
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
