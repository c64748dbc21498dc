package jobstorage

import (
	"errors"
	"sync"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// orderWriter records the order of WriteState returns and Abort, and holds
// WriteState until release closes.
type orderWriter struct {
	checkpoint.Writer
	release chan struct{}
	mu      sync.Mutex
	events  []string
}

func (w *orderWriter) WriteState(o checkpoint.Owner, _ []byte, _ ...checkpoint.FileHandle) (checkpoint.StateHandle, error) {
	<-w.release
	w.mu.Lock()
	w.events = append(w.events, "write "+o.String())
	w.mu.Unlock()
	return checkpoint.StateHandle{Owner: o}, nil
}

func (w *orderWriter) Abort() error {
	w.mu.Lock()
	w.events = append(w.events, "abort")
	w.mu.Unlock()
	return nil
}

// Writer's contract: Abort only once every WriteState returned. A
// checkpoint aborted by the master (timeout, decline, restart) while a
// state file is still being written off the master goroutine is aborted by
// the last write to return; writes after the abort are refused.
func TestPendingWriterAbortsAfterWritesUnderWay(t *testing.T) {
	ow := &orderWriter{release: make(chan struct{})}
	w := NewPendingWriter(ow)
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		close(started)
		if _, err := w.WriteState(checkpoint.OperatorOwner("op", 0), nil); err != nil {
			t.Error(err)
		}
	})
	<-started
	// The write may not have reached the inner writer yet; either way the
	// abort must come after it.
	for {
		w.mu.Lock()
		n := w.inflight
		w.mu.Unlock()
		if n == 1 {
			break
		}
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteState(checkpoint.OperatorOwner("op", 1), nil); !errors.Is(err, checkpoint.ErrWriterClosed) {
		t.Fatalf("WriteState after Abort: %v, want ErrWriterClosed", err)
	}
	close(ow.release)
	wg.Wait()
	if got := ow.events; len(got) != 2 || got[0] != "write op/0" || got[1] != "abort" {
		t.Fatalf("events %v, want the write, then the abort", got)
	}
	if err := w.Commit(checkpoint.Metadata{}); !errors.Is(err, checkpoint.ErrWriterClosed) {
		t.Fatalf("Commit after Abort: %v", err)
	}
}
