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

// SplitFetcherManager starts, feeds and stops the split fetchers of one
// reader, all of which put into one bounded queue of batches. Two threading models are
// built in:
//
//   - NewSingleFetcherManager: one fetcher (one SplitReader, one goroutine)
//     for all splits, like a Kafka consumer reading many partitions.
//   - NewFetcherPerSplitManager: one fetcher per split, for clients that
//     read one thing at a time, like files. At most WithMaxSplitFetchers
//     (default 16) run at once; further splits wait their turn, so memory
//     does not grow with the number of splits.
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
	queue     *elementsQueue[RecordsWithSplitIDs[E]]
	ctx       context.Context // cancelled by Close; passed to every Fetch
	cancel    context.CancelFunc

	// Task goroutine only.
	fetchers []*splitFetcher[E, S] // live fetchers in creation order
	nextID   int
	closed   bool
	// Fetcher-per-split mode: splits waiting for a fetcher, in order, and
	// which of them were paused meanwhile.
	waiting       []S
	pausedWaiting map[string]bool
	// started, when set (by tests), is called on the task goroutine as
	// soon as a fetcher's goroutine is started.
	started func()

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
// its split is finished. No more than WithMaxSplitFetchers fetchers run at
// once: a split given while that many run waits, in order, until one of
// them is shut down.
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
		cfg:           cfg,
		newReader:     newReader,
		perSplit:      perSplit,
		queue:         newElementsQueue[RecordsWithSplitIDs[E]](cfg.queueCapacity),
		ctx:           ctx,
		cancel:        cancel,
		pausedWaiting: make(map[string]bool),
	}, nil
}

// queue is the queue the fetchers put into and the reader polls.
func (m *SplitFetcherManager[E, S]) elements() *elementsQueue[RecordsWithSplitIDs[E]] {
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
		m.waiting = append(m.waiting, splits...)
		return m.startWaiting()
	}
	if n := len(m.fetchers); n > 0 {
		if err := m.fetchers[n-1].AddSplits(splits); err != nil {
			return m.orFetchError(err)
		}
		return nil
	}
	return m.startFetcher(splits, nil)
}

// startFetcher creates a fetcher, queues splits to it, and the pause of
// those of them in paused, and only then starts its goroutine: the
// fetcher never looks idle before it had work, and its first Fetch sees
// the splits paused. A pause the reader cannot make is returned after
// the fetcher started, as PauseOrResumeSplits on a running one does.
func (m *SplitFetcherManager[E, S]) startFetcher(splits []S, paused []string) error {
	reader, err := m.newReader()
	if err != nil {
		return fmt.Errorf("base: create split reader: %w", err)
	}
	f := newSplitFetcher(m.nextID, reader, m.queue, m.report, m.fetcherExited)
	m.nextID++
	if err := f.AddSplits(splits); err != nil {
		return err // cannot happen: nobody else knows f yet
	}
	var pauseErr error
	if len(paused) > 0 {
		pauseErr = f.PauseOrResumeSplits(paused, nil)
	}
	m.fetchers = append(m.fetchers, f)
	m.running.Add(1)
	m.live.Add(1)
	go f.run(m.ctx)
	if m.started != nil {
		m.started()
	}
	return pauseErr
}

// startWaiting starts fetchers for waiting splits while fewer than the
// maximum run; a split paused while it waited starts paused.
func (m *SplitFetcherManager[E, S]) startWaiting() error {
	for len(m.waiting) > 0 && len(m.fetchers) < m.cfg.maxFetchers {
		s := m.waiting[0]
		m.waiting[0] = *new(S)
		m.waiting = m.waiting[1:]
		var paused []string
		if id := s.SplitID(); m.pausedWaiting[id] {
			delete(m.pausedWaiting, id)
			paused = []string{id}
		}
		if err := m.startFetcher([]S{s}, paused); err != nil {
			return err
		}
	}
	return nil
}

// RemoveSplits stops reading splits, on whichever fetchers hold them.
//
// A SourceReaderBase does not hear of it and keeps the splits in its state
// and its snapshots; it also never reports EndOfInput while it holds them.
// Readers built on SourceReaderBase call SourceReaderBase.RemoveSplits
// instead, which calls this.
func (m *SplitFetcherManager[E, S]) RemoveSplits(splits []S) error {
	_, err := m.removeSplits(splits)
	return err
}

// removeSplits is RemoveSplits that also returns the IDs of the splits that
// were still waiting for a fetcher: nothing of them can be in flight.
func (m *SplitFetcherManager[E, S]) removeSplits(splits []S) (unstarted map[string]bool, err error) {
	if m.closed {
		return nil, ErrClosed
	}
	if len(m.waiting) > 0 {
		ids := make(map[string]bool, len(splits))
		for _, s := range splits {
			ids[s.SplitID()] = true
		}
		m.waiting = slices.DeleteFunc(m.waiting, func(s S) bool {
			id := s.SplitID()
			if !ids[id] {
				return false
			}
			if unstarted == nil {
				unstarted = make(map[string]bool)
			}
			unstarted[id] = true
			delete(m.pausedWaiting, id)
			return true
		})
	}
	return unstarted, m.eachFetcher(func(f *splitFetcher[E, S]) error { return f.RemoveSplits(splits) })
}

// PauseOrResumeSplits pauses and resumes splits by ID on whichever fetchers
// hold them; splits still waiting for a fetcher start paused or not as the
// last call says. It returns ErrPauseNotSupported when the SplitReader lacks
// the PausableSplitReader capability.
func (m *SplitFetcherManager[E, S]) PauseOrResumeSplits(pause, resume []string) error {
	err := m.eachFetcher(func(f *splitFetcher[E, S]) error { return f.PauseOrResumeSplits(pause, resume) })
	if err != nil || len(m.waiting) == 0 {
		return err
	}
	for _, s := range m.waiting {
		id := s.SplitID()
		switch {
		case slices.Contains(resume, id):
			delete(m.pausedWaiting, id)
		case slices.Contains(pause, id):
			m.pausedWaiting[id] = true
		}
	}
	return nil
}

// RunOnFetchers queues fn on every running fetcher; see splitFetcher.RunTask.
func (m *SplitFetcherManager[E, S]) RunOnFetchers(fn func(SplitReader[E, S]) error) error {
	return m.eachFetcher(func(f *splitFetcher[E, S]) error { return f.RunTask(fn) })
}

// eachFetcher calls fn for every running fetcher, skipping those that shut
// down or failed meanwhile (their ErrClosed): a failure surfaces through Err
// instead.
func (m *SplitFetcherManager[E, S]) eachFetcher(fn func(*splitFetcher[E, S]) error) error {
	if m.closed {
		return ErrClosed
	}
	for _, f := range m.fetchers {
		if err := fn(f); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// MaybeShutdownFinishedFetchers shuts down every idle fetcher, starts
// fetchers for waiting splits in their place, and reports whether no fetcher
// is left and no split waits. A fetcher that failed is never idle, so a
// failure cannot pass for the end of the input. If starting a fetcher fails,
// the error is kept like a fetcher's and returned by Err.
func (m *SplitFetcherManager[E, S]) MaybeShutdownFinishedFetchers() bool {
	m.fetchers = slices.DeleteFunc(m.fetchers, (*splitFetcher[E, S]).shutdownIfIdle)
	if len(m.waiting) > 0 && !m.closed {
		if err := m.startWaiting(); err != nil {
			m.report(err)
		}
	}
	return len(m.fetchers) == 0 && len(m.waiting) == 0
}

// hasWaiting reports whether splits wait for a fetcher.
func (m *SplitFetcherManager[E, S]) hasWaiting() bool {
	return len(m.waiting) > 0
}

// liveFetchers returns the fetchers not yet shut down as finished, in
// creation order. The slice is the caller's; the fetchers are not.
func (m *SplitFetcherManager[E, S]) liveFetchers() []*splitFetcher[E, S] {
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
	m.waiting = nil
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
