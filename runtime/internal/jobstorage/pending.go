package jobstorage

import (
	"sync"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// A checkpoint's state files are written off the master goroutine, on
// goroutines of their own, while the master may abort the checkpoint.

// PendingWriter is the Writer of a pending checkpoint as the master holds it.
// WriteState runs on write goroutines while the master may abort the
// checkpoint (a timeout, a decline, a restart); Writer's contract wants
// Abort only once every WriteState returned, so an Abort that arrives with
// writes under way only closes the writer to new writes, and the last
// write to return performs it.
type PendingWriter struct {
	checkpoint.Writer

	mu       sync.Mutex
	inflight int
	closed   bool // Commit or Abort was called
	abortDue bool // Abort was called with writes under way
}

// NewPendingWriter wraps w, the storage's writer of one checkpoint.
func NewPendingWriter(w checkpoint.Writer) *PendingWriter { return &PendingWriter{Writer: w} }

func (s *PendingWriter) WriteState(owner checkpoint.Owner, data []byte, files ...checkpoint.FileHandle) (checkpoint.StateHandle, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return checkpoint.StateHandle{}, checkpoint.ErrWriterClosed
	}
	s.inflight++
	s.mu.Unlock()
	h, err := s.Writer.WriteState(owner, data, files...)
	s.mu.Lock()
	s.inflight--
	abort := s.abortDue && s.inflight == 0
	s.abortDue = s.abortDue && !abort
	s.mu.Unlock()
	if abort {
		_ = s.Writer.Abort()
	}
	return h, err
}

// Commit is called by the master only after every acknowledgement reached
// the coordinator, hence after every write returned.
func (s *PendingWriter) Commit(m checkpoint.Metadata) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return checkpoint.ErrWriterClosed
	}
	s.closed = true
	s.mu.Unlock()
	return s.Writer.Commit(m)
}

func (s *PendingWriter) Abort() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return checkpoint.ErrWriterClosed
	}
	s.closed = true
	if s.inflight > 0 {
		s.abortDue = true
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.Writer.Abort()
}
