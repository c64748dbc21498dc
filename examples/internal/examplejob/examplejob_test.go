package examplejob

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
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

// syncBuffer is a strings.Builder safe for the goroutines that write it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A program that ends by itself was not interrupted: nothing says it was,
// before its exit or after.
func TestNoInterruptLineWithoutAnInterrupt(t *testing.T) {
	var stdout, stderr syncBuffer
	code := mainCode(nil, &stdout, &stderr, "example", "draining", func([]string, io.Writer) (int, error) { return 0, nil },
		func(int) bool { return false }, func(context.Context, int, io.Writer, *slog.Logger) (int, error) { return 0, nil })
	time.Sleep(50 * time.Millisecond) // what a goroutine left behind would print by now
	if code != 0 || strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
