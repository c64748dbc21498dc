package base

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// SplitFetcherManager starts, feeds and stops the SplitFetchers of one
// reader, all of which put into one ElementsQueue. Two threading models are
// built in:
//
//   - NewSingleFetcherManager: one fetcher (one SplitReader, one goroutine)
//     for all splits, like a Kafka consumer reading many partitions.
//   - NewFetcherPerSplitManager: one fetcher per split, for clients that
//     read one thing at a time, like files.
//
// Fetchers that have delivered all their splits become idle and are shut down
// by MaybeShutdownFinishedFetchers. The first error of any fetcher is kept
// and returned by Err from then on.
//
// Every method is called on the task goroutine unless documented otherwise;
// SourceReaderBase does that for you.
type SplitFetcherManager[E any, S connector.Split] struct {
	cfg       managerConfig
	newReader func() (SplitReader[E, S], error)
	perSplit  bool
	queue     *ElementsQueue[RecordsWithSplitIDs[E]]
	ctx       context.Context // cancelled by Close; passed to every Fetch
	cancel    context.CancelFunc

	// Task goroutine only.
	fetchers []*SplitFetcher[E, S] // live fetchers in creation order
	nextID   int
	closed   bool

	running   sync.WaitGroup // one per fetcher goroutine, also after removal
	live      atomic.Int64   // fetcher goroutines still running, for Close's error
	firstErr  atomic.Pointer[error]
	closeMu   sync.Mutex
	closeErrs []error
}

// NewSingleFetcherManager returns a manager that runs every split on one
// fetcher. newReader is called on the task goroutine when splits arrive and
// no fetcher is running (the first time, and again after the previous
// fetcher finished everything and was shut down).
func NewSingleFetcherManager[E any, S connector.Split](
	newReader func() (SplitReader[E, S], error), opts ...ManagerOption,
) (*SplitFetcherManager[E, S], error) {
	return newManager(newReader, false, opts)
}

// NewFetcherPerSplitManager returns a manager that starts a fetcher with a
// new SplitReader for every split it is given; the fetcher is shut down once
// its split is finished.
func NewFetcherPerSplitManager[E any, S connector.Split](
	newReader func() (SplitReader[E, S], error), opts ...ManagerOption,
) (*SplitFetcherManager[E, S], error) {
	return newManager(newReader, true, opts)
}

func newManager[E any, S connector.Split](
	newReader func() (SplitReader[E, S], error), perSplit bool, opts []ManagerOption,
) (*SplitFetcherManager[E, S], error) {
	if newReader == nil {
		return nil, errors.New("base: split reader factory is nil")
	}
	cfg := defaultManagerConfig()
	for _, o := range opts {
		o.applyManager(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &SplitFetcherManager[E, S]{
		cfg:       cfg,
		newReader: newReader,
		perSplit:  perSplit,
		queue:     NewElementsQueue[RecordsWithSplitIDs[E]](cfg.queueCapacity),
		ctx:       ctx,
		cancel:    cancel,
	}, nil
}

// Queue is the queue the fetchers put into and the reader polls.
func (m *SplitFetcherManager[E, S]) Queue() *ElementsQueue[RecordsWithSplitIDs[E]] {
	return m.queue
}

// AddSplits hands splits to fetchers, starting fetchers as the threading
// model requires. It fails if creating a SplitReader fails, or with the
// fetcher's error if the fetcher it would use has failed.
func (m *SplitFetcherManager[E, S]) AddSplits(splits []S) error {
	if m.closed {
		return ErrClosed
	}
	if len(splits) == 0 {
		return nil
	}
	if m.perSplit {
		for _, s := range splits {
			if err := m.startFetcher([]S{s}); err != nil {
				return err
			}
		}
		return nil
	}
	if n := len(m.fetchers); n > 0 {
		if err := m.fetchers[n-1].AddSplits(splits); err != nil {
			return m.orFetchError(err)
		}
		return nil
	}
	return m.startFetcher(splits)
}

// startFetcher creates a fetcher, queues splits to it and only then starts
// its goroutine, so that the fetcher never looks idle before it had work.
func (m *SplitFetcherManager[E, S]) startFetcher(splits []S) error {
	reader, err := m.newReader()
	if err != nil {
		return fmt.Errorf("base: create split reader: %w", err)
	}
	f := newSplitFetcher(m.nextID, reader, m.queue, m.report, m.fetcherExited)
	m.nextID++
	if err := f.AddSplits(splits); err != nil {
		return err // cannot happen: nobody else knows f yet
	}
	m.fetchers = append(m.fetchers, f)
	m.running.Add(1)
	m.live.Add(1)
	go f.run(m.ctx)
	return nil
}

// RemoveSplits stops reading splits, on whichever fetchers hold them.
func (m *SplitFetcherManager[E, S]) RemoveSplits(splits []S) error {
	if m.closed {
		return ErrClosed
	}
	for _, f := range m.fetchers {
		if err := f.RemoveSplits(splits); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// PauseOrResumeSplits pauses and resumes splits by ID on whichever fetchers
// hold them. It returns ErrPauseNotSupported when the SplitReader lacks the
// PausableSplitReader capability.
func (m *SplitFetcherManager[E, S]) PauseOrResumeSplits(pause, resume []string) error {
	if m.closed {
		return ErrClosed
	}
	for _, f := range m.fetchers {
		if err := f.PauseOrResumeSplits(pause, resume); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// RunOnFetchers queues fn on every running fetcher; see SplitFetcher.RunTask.
func (m *SplitFetcherManager[E, S]) RunOnFetchers(fn func(SplitReader[E, S]) error) error {
	if m.closed {
		return ErrClosed
	}
	for _, f := range m.fetchers {
		if err := f.RunTask(fn); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// MaybeShutdownFinishedFetchers shuts down every idle fetcher and reports
// whether no fetcher is left. A fetcher that failed is never idle, so a
// failure cannot pass for the end of the input.
func (m *SplitFetcherManager[E, S]) MaybeShutdownFinishedFetchers() bool {
	m.fetchers = slices.DeleteFunc(m.fetchers, (*SplitFetcher[E, S]).shutdownIfIdle)
	return len(m.fetchers) == 0
}

// Fetchers returns the fetchers not yet shut down as finished, in creation
// order, for connectors that address one fetcher in particular. The slice is
// the caller's; the fetchers are not.
func (m *SplitFetcherManager[E, S]) Fetchers() []*SplitFetcher[E, S] {
	return slices.Clone(m.fetchers)
}

// NumFetchers is the number of fetchers not yet shut down as finished.
func (m *SplitFetcherManager[E, S]) NumFetchers() int {
	return len(m.fetchers)
}

// Err returns the first error any fetcher failed with, or nil. It may be
// called from any goroutine.
func (m *SplitFetcherManager[E, S]) Err() error {
	if p := m.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *SplitFetcherManager[E, S]) orFetchError(err error) error {
	if ferr := m.Err(); ferr != nil {
		return ferr
	}
	return err
}

// report runs on a failing fetcher's goroutine. Only the first error is
// kept: later ones are usually consequences of it, and the task fails on the
// first anyway.
func (m *SplitFetcherManager[E, S]) report(err error) {
	m.firstErr.CompareAndSwap(nil, &err)
	m.queue.NotifyAvailable()
}

// fetcherExited runs last on every fetcher goroutine.
func (m *SplitFetcherManager[E, S]) fetcherExited(closeErr error) {
	if closeErr != nil {
		m.closeMu.Lock()
		m.closeErrs = append(m.closeErrs, fmt.Errorf("base: close split reader: %w", closeErr))
		m.closeMu.Unlock()
	}
	m.live.Add(-1)
	m.running.Done()
}

// Close shuts every fetcher down and waits for their goroutines to exit, up
// to the close timeout. It returns errors from closing the SplitReaders, or
// a timeout error if a reader did not return from Fetch. Calling Close again
// does nothing.
func (m *SplitFetcherManager[E, S]) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	for _, f := range m.fetchers {
		f.Shutdown()
	}
	m.fetchers = nil
	m.cancel()
	m.queue.Close()

	exited := make(chan struct{})
	go func() {
		m.running.Wait()
		close(exited)
	}()
	timer := time.NewTimer(m.cfg.closeTimeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		return fmt.Errorf("base: %d split fetcher(s) still running %v after close; "+
			"their SplitReader's Fetch ignores WakeUp and context cancellation",
			m.live.Load(), m.cfg.closeTimeout)
	}
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	return errors.Join(m.closeErrs...)
}
