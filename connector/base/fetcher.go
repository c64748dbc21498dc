package base

import (
	"context"
	"slices"
	"sync"

	"github.com/splitflow/splitflow/connector"
)

// fetcherPhase is where a fetcher goroutine may be blocked, which decides how
// a wake-up reaches it.
type fetcherPhase int

const (
	phaseBusy     fetcherPhase = iota // running a task or between steps: nothing to interrupt
	phaseFetching                     // in SplitReader.Fetch: interrupt with WakeUp
	phasePutting                      // in elementsQueue.Put: interrupt with WakeUpPutter
	phaseWaiting                      // idle, waiting for a task: interrupt with the signal channel
)

type fetcherTask[E any, S connector.Split] struct {
	op  string
	run func(f *splitFetcher[E, S]) error
}

// splitFetcher runs one SplitReader on a goroutine of its own. The goroutine
// loops over three kinds of work, in this order of priority: tasks queued by
// the task goroutine (add, remove, pause splits, or arbitrary work on the
// reader), putting the batch it holds into the elementsQueue, and calling
// Fetch for the next batch. With nothing assigned and nothing queued it is
// idle and waits; with every assigned split paused it waits too, without
// calling Fetch, until a task (resume, add, remove) or shutdown arrives.
//
// Only the fetcher goroutine touches the SplitReader (except WakeUp) and the
// fetcher's split assignment. The task goroutine talks to it by queueing
// tasks; every queued task wakes the goroutine wherever it blocks (in Fetch,
// in Put, or waiting), so a fetcher stuck behind a full queue still notices
// new splits and shutdown promptly.
//
// Fetchers are created and owned by a SplitFetcherManager. Their methods are
// called on the task goroutine unless documented otherwise.
type splitFetcher[E any, S connector.Split] struct {
	id     int
	reader SplitReader[E, S]
	queue  *elementsQueue[RecordsWithSplitIDs[E]]
	report func(error)          // manager's sink for the first error
	exited func(closeErr error) // manager's hook, called last on the goroutine

	// Owned by the fetcher goroutine.
	assigned        map[string]S
	paused          map[string]struct{}    // IDs of assigned splits that are paused
	pending         RecordsWithSplitIDs[E] // fetched, not yet accepted by the queue
	pendingFinished []string               // pending.FinishedSplits(), copied before Put
	// removed are splits taken away by RemoveSplits whose removal the
	// reader has not yet been told of in-band; see RemoveSplits.
	removed []string

	// signal wakes the goroutine when it waits for tasks. One buffered slot:
	// a signal sent while the goroutine is busy waits for it.
	signal chan struct{}

	mu     sync.Mutex
	tasks  []fetcherTask[E, S]
	phase  fetcherPhase
	idle   bool // nothing assigned, nothing pending, nothing queued
	closed bool // shut down or failed; no task is accepted any more
}

func newSplitFetcher[E any, S connector.Split](
	id int,
	reader SplitReader[E, S],
	queue *elementsQueue[RecordsWithSplitIDs[E]],
	report func(error),
	exited func(error),
) *splitFetcher[E, S] {
	return &splitFetcher[E, S]{
		id:       id,
		reader:   reader,
		queue:    queue,
		report:   report,
		exited:   exited,
		assigned: make(map[string]S),
		paused:   make(map[string]struct{}),
		signal:   make(chan struct{}, 1),
	}
}

// ID identifies the fetcher within its manager; it is also its putter ID in
// the elementsQueue.
func (f *splitFetcher[E, S]) ID() int { return f.id }

// AddSplits queues the assignment of splits to the fetcher's reader. It
// returns ErrClosed if the fetcher was shut down or has failed.
func (f *splitFetcher[E, S]) AddSplits(splits []S) error {
	splits = slices.Clone(splits)
	return f.enqueue("add splits", func(f *splitFetcher[E, S]) error {
		// Assigned before the reader hears of them, so that an error from
		// HandleSplitsChanges is reported with these splits' IDs.
		for _, s := range splits {
			f.assigned[s.SplitID()] = s
		}
		return f.reader.HandleSplitsChanges(SplitsChange[S]{Added: splits})
	})
}

// RemoveSplits queues the removal of those of splits the fetcher holds.
//
// Batches fetched before the removal may still carry records of the removed
// splits: the one the fetcher holds, and those already queued. So that the
// task goroutine knows when the last of them has gone by, the fetcher then
// puts, after those batches, a removalAck listing the removed splits. A
// split whose end is already in the held batch gets no such entry: that end
// is the last word on it.
func (f *splitFetcher[E, S]) RemoveSplits(splits []S) error {
	ids := make([]string, len(splits))
	for i, s := range splits {
		ids[i] = s.SplitID()
	}
	return f.enqueue("remove splits", func(f *splitFetcher[E, S]) error {
		held := f.lookup(ids)
		if len(held) == 0 {
			return nil
		}
		for _, s := range held {
			id := s.SplitID()
			delete(f.assigned, id)
			delete(f.paused, id)
			if !slices.Contains(f.pendingFinished, id) {
				f.removed = append(f.removed, id)
			}
		}
		return f.reader.HandleSplitsChanges(SplitsChange[S]{Removed: held})
	})
}

// PauseOrResumeSplits queues pausing and resuming those of the given splits
// the fetcher holds. It returns ErrPauseNotSupported at once when the
// SplitReader is not a PausableSplitReader.
func (f *splitFetcher[E, S]) PauseOrResumeSplits(pause, resume []string) error {
	pr, ok := f.reader.(PausableSplitReader[S])
	if !ok {
		return ErrPauseNotSupported
	}
	pause, resume = slices.Clone(pause), slices.Clone(resume)
	return f.enqueue("pause or resume splits", func(f *splitFetcher[E, S]) error {
		p, r := f.lookup(pause), f.lookup(resume)
		if len(p) == 0 && len(r) == 0 {
			return nil
		}
		for _, s := range p {
			f.paused[s.SplitID()] = struct{}{}
		}
		for _, s := range r {
			delete(f.paused, s.SplitID())
		}
		return pr.PauseOrResumeSplits(p, r)
	})
}

// RunTask queues fn to run on the fetcher goroutine with the fetcher's
// reader, between two Fetch calls: the way to reach a client that is not
// safe for concurrent use, for example to commit offsets. An error from fn
// fails the fetcher like a Fetch error.
func (f *splitFetcher[E, S]) RunTask(fn func(SplitReader[E, S]) error) error {
	return f.enqueue("run task", func(f *splitFetcher[E, S]) error { return fn(f.reader) })
}

// Shutdown asks the goroutine to exit; it closes the reader on its way out.
// Shutdown does not wait; the manager does. It may be called from any
// goroutine, more than once.
func (f *splitFetcher[E, S]) Shutdown() {
	f.mu.Lock()
	wakeReader := false
	if !f.closed {
		f.closed = true
		wakeReader = f.wakeLocked()
	}
	f.mu.Unlock()
	f.wakeReader(wakeReader)
}

// shutdownIfIdle shuts the fetcher down if it is idle, atomically with the
// check, and reports whether it did.
func (f *splitFetcher[E, S]) shutdownIfIdle() bool {
	f.mu.Lock()
	if !f.idle || f.closed {
		f.mu.Unlock()
		return false
	}
	f.closed = true
	wakeReader := f.wakeLocked()
	f.mu.Unlock()
	f.wakeReader(wakeReader)
	return true
}

func (f *splitFetcher[E, S]) enqueue(op string, run func(*splitFetcher[E, S]) error) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.tasks = append(f.tasks, fetcherTask[E, S]{op: op, run: run})
	f.idle = false
	wakeReader := f.wakeLocked()
	f.mu.Unlock()
	f.wakeReader(wakeReader)
	return nil
}

// wakeLocked interrupts whatever the goroutine is blocked in, except Fetch:
// it reports whether the SplitReader must be woken, which the caller does
// with wakeReader after releasing mu. SplitReader.WakeUp is the connector's
// code and may be slow; under mu it would also stall the fetcher goroutine,
// which takes mu as soon as Fetch returns.
//
// No wake-up is lost. The phase is set under mu before the goroutine blocks,
// and both Fetch and Put remember a wake-up that arrives before they block.
// A WakeUp made after mu was released reaches either the Fetch that was
// running, or, if that one has returned meanwhile, a later one, which then
// returns early: harmless, the fetcher calls Fetch again. Either way the
// goroutine next takes mu and finds the queued task or the shutdown.
func (f *splitFetcher[E, S]) wakeLocked() (wakeReader bool) {
	switch f.phase {
	case phaseFetching:
		wakeReader = true
	case phasePutting:
		f.queue.WakeUpPutter(f.id)
	}
	select {
	case f.signal <- struct{}{}:
	default:
	}
	return wakeReader
}

// wakeReader calls SplitReader.WakeUp if wakeLocked said so. It must be
// called without mu held.
func (f *splitFetcher[E, S]) wakeReader(needed bool) {
	if needed {
		f.reader.WakeUp()
	}
}

func (f *splitFetcher[E, S]) setPhase(p fetcherPhase) {
	f.mu.Lock()
	f.phase = p
	f.mu.Unlock()
}

func (f *splitFetcher[E, S]) lookup(ids []string) []S {
	var out []S
	for _, id := range ids {
		if s, ok := f.assigned[id]; ok {
			out = append(out, s)
		}
	}
	return out
}

// run is the fetcher goroutine.
func (f *splitFetcher[E, S]) run(ctx context.Context) {
	defer f.exit()
	for f.runOnce(ctx) {
	}
}

// runOnce does one unit of work and reports whether to go on.
func (f *splitFetcher[E, S]) runOnce(ctx context.Context) bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	if len(f.tasks) > 0 {
		t := f.tasks[0]
		f.tasks[0] = fetcherTask[E, S]{}
		f.tasks = f.tasks[1:]
		f.phase = phaseBusy
		f.mu.Unlock()
		if err := t.run(f); err != nil {
			f.fail(t.op, err)
			return false
		}
		return true
	}

	switch {
	case f.pending != nil:
		f.phase = phasePutting
		f.mu.Unlock()
		ok := f.queue.Put(f.id, f.pending)
		f.setPhase(phaseBusy)
		if ok {
			// The batch now belongs to the task goroutine, which may
			// already be recycling it; that is why its finished splits were
			// copied before Put.
			for _, id := range f.pendingFinished {
				delete(f.assigned, id)
				delete(f.paused, id)
			}
			f.pending = nil
			f.pendingFinished = f.pendingFinished[:0]
		}
		// Not taken: woken for a task or shutdown. The batch stays pending
		// and is put again once the task has run.
		return true

	case len(f.removed) > 0:
		// Tell the task goroutine, after every batch that may carry
		// records of the removed splits, that they are gone.
		f.mu.Unlock()
		f.pending = &removalAck[E]{ids: slices.Clone(f.removed)}
		f.removed = f.removed[:0]
		f.pendingFinished = f.pendingFinished[:0]
		return true

	case len(f.assigned) > len(f.paused):
		f.phase = phaseFetching
		f.mu.Unlock()
		batch, err := f.reader.Fetch(ctx)
		f.setPhase(phaseBusy)
		if err != nil {
			if ctx.Err() != nil || f.isClosed() {
				return false // the client failing because we are shutting it down
			}
			f.fail("fetch", err)
			return false
		}
		if batch == nil {
			return true
		}
		if isEmptyBatch(batch) {
			batch.Recycle()
			return true
		}
		f.pending = batch
		f.pendingFinished = append(f.pendingFinished[:0], batch.FinishedSplits()...)
		return true

	case len(f.assigned) > 0:
		// Every split is paused: Fetch would have nothing to return, and
		// calling it anyway would spin. Wait for a resume, a new split, a
		// removal or shutdown; all of them come as a task or a close.
		f.phase = phaseWaiting
		f.mu.Unlock()
		select {
		case <-f.signal:
		case <-ctx.Done():
		}
		f.setPhase(phaseBusy)
		return true

	default:
		f.phase = phaseWaiting
		becameIdle := !f.idle
		f.idle = true
		f.mu.Unlock()
		if becameIdle {
			// The reader may be deciding whether the input has ended; it
			// must look again now that this fetcher has nothing left.
			f.queue.NotifyAvailable()
		}
		select {
		case <-f.signal:
		case <-ctx.Done():
		}
		f.setPhase(phaseBusy)
		return true
	}
}

func (f *splitFetcher[E, S]) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *splitFetcher[E, S]) fail(op string, err error) {
	ids := make([]string, 0, len(f.assigned))
	for id := range f.assigned {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	f.mu.Lock()
	f.closed = true
	f.idle = false // a failed fetcher never counts as finished
	f.mu.Unlock()
	f.report(&FetchError{FetcherID: f.id, Op: op, SplitIDs: ids, Err: err})
}

func (f *splitFetcher[E, S]) exit() {
	f.mu.Lock()
	f.closed = true
	f.tasks = nil
	f.mu.Unlock()
	if f.pending != nil {
		f.pending.Recycle()
		f.pending = nil
	}
	f.queue.forgetPutter(f.id)
	f.exited(f.reader.Close())
}

// removalAck is the batch a fetcher puts after removing splits: it carries
// no records and finishes no split, it only tells the task goroutine that
// no batch after it holds records of ids. It is not a finish: a split a
// connector removed from the fetchers alone stays in the reader's state.
type removalAck[E any] struct {
	ids []string
}

func (*removalAck[E]) NextSplit() (string, bool) { return "", false }

func (*removalAck[E]) NextRecordFromSplit() (E, bool) {
	var zero E
	return zero, false
}

func (*removalAck[E]) FinishedSplits() []string { return nil }

func (*removalAck[E]) Recycle() {}

// isEmptyBatch reports whether a batch carries neither records nor finished
// splits, for batches that can tell their size. Such a batch (typically
// returned after a wake-up) would only cost a queue slot and a spurious poll.
func isEmptyBatch[E any](b RecordsWithSplitIDs[E]) bool {
	if len(b.FinishedSplits()) > 0 {
		return false
	}
	sized, ok := b.(interface{ Len() int })
	return ok && sized.Len() == 0
}
