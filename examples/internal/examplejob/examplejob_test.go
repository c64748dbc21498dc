package examplejob

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The first interrupt cancels the job and hands the signals back to their
// default action, so that a second one ends the process even while the
// drain or the verification is still under way; the line printed says so.
func TestInterruptRestoresDefaultSignalAction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var out strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		AfterInterrupt(ctx, func() { close(stopped) }, &out, "wordcount: interrupted: draining the job; interrupt again to quit at once")
	}()
	select {
	case <-stopped:
		t.Fatal("signals handed back before any interrupt")
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	<-done
	select {
	case <-stopped:
	default:
		t.Fatal("the first interrupt did not hand the signals back (stop not called)")
	}
	if !strings.Contains(out.String(), "interrupt again to quit at once") {
		t.Errorf("printed %q, want it to say a second interrupt quits", out.String())
	}
}
