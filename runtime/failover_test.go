package runtime

import (
	"context"
	"errors"
	"strings"
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
