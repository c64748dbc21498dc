package base

import (
	"sync"
	"time"
)

// elementsQueue is the bounded hand-off between fetcher goroutines and the
// task goroutine. It holds at most Cap() batches; a fetcher that finds it
// full blocks in Put and therefore stops calling Fetch, which is how a slow
// consumer slows the external system down (the backpressure rule of
// DESIGN.md).
//
// Put may be called from any goroutine; each caller identifies itself with a
// putter ID so that it alone can be woken. Poll, Available and the other
// methods may be called from any goroutine too, but the design has one
// consumer, the task goroutine.
type elementsQueue[B any] struct {
	mu      sync.Mutex
	notFull sync.Cond // signalled when space frees up, on wake-ups and on close
	buf     []B       // ring buffer; len(buf) is the capacity
	head    int       // index of the oldest batch
	n       int       // number of batches held
	woken   map[int]struct{}
	closed  bool

	// avail carries at most one "poll again" token; see Available.
	avail chan struct{}

	// Time putters spent blocked on a full queue: blockedNs for waits
	// that ended; waiting putters and the sum of their start times (as
	// offsets from born, monotonic) for the ones under way, so that a
	// fetcher stuck behind a stalled consumer shows up while it waits.
	born      time.Time
	blockedNs int64
	waiting   int64
	waitSum   int64
}

// newElementsQueue returns an empty queue that holds up to capacity batches.
// It panics if capacity < 1, like make does for a negative size: a queue
// that can hold nothing would block every fetcher forever.
func newElementsQueue[B any](capacity int) *elementsQueue[B] {
	if capacity < 1 {
		panic("base: elements queue capacity must be at least 1")
	}
	q := &elementsQueue[B]{
		buf:   make([]B, capacity),
		woken: make(map[int]struct{}),
		avail: make(chan struct{}, 1),
		born:  time.Now(),
	}
	q.notFull.L = &q.mu
	return q
}

// Put appends batch, blocking while the queue is full. It reports whether the
// batch was taken: false means the queue was closed or WakeUpPutter(putter)
// was called, in which case the caller still owns batch and may retry.
//
// A wake-up that arrives while putter is not blocked in Put is remembered
// and makes its next Put return false at once. That is what lets a fetcher
// decide to put, release its lock, and call Put without a window in which a
// wake-up could be lost.
func (q *elementsQueue[B]) Put(putter int, batch B) bool {
	q.mu.Lock()
	var since int64 = -1 // offset from born when this Put started to wait
	for {
		if q.closed {
			q.endWait(since)
			q.mu.Unlock()
			return false
		}
		if _, ok := q.woken[putter]; ok {
			delete(q.woken, putter)
			q.endWait(since)
			q.mu.Unlock()
			return false
		}
		if q.n < len(q.buf) {
			break
		}
		if since < 0 {
			since = int64(time.Since(q.born))
			q.waiting++
			q.waitSum += since
		}
		q.notFull.Wait()
	}
	q.endWait(since)
	q.buf[(q.head+q.n)%len(q.buf)] = batch
	q.n++
	q.mu.Unlock()
	q.NotifyAvailable()
	return true
}

// Poll removes and returns the oldest batch without blocking. It returns
// false when the queue is empty.
func (q *elementsQueue[B]) Poll() (B, bool) {
	var zero B
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return zero, false
	}
	b := q.buf[q.head]
	q.buf[q.head] = zero // drop the reference so a recycled batch is not pinned here
	q.head = (q.head + 1) % len(q.buf)
	wasFull := q.n == len(q.buf)
	q.n--
	q.mu.Unlock()
	if wasFull {
		// Broadcast, not Signal: a waiter may be leaving because it was
		// woken, and must not swallow the signal another putter needs.
		q.notFull.Broadcast()
	}
	return b, true
}

// Available returns a channel that holds a token whenever the consumer should
// poll again: after a Put, a NotifyAvailable or Close. There is at most one
// token; notifications that find one already waiting are merged into it.
// A token may be stale (the batch it announced was already polled), so a
// consumer that receives one polls and, finding nothing, waits again. What
// cannot happen is a missed notification: a token is only consumed by a
// receive, so whatever happened after the consumer's last poll is still
// announced when it next waits.
//
// The channel is the same for the life of the queue, and sending a token
// allocates nothing.
func (q *elementsQueue[B]) Available() <-chan struct{} {
	return q.avail
}

// NotifyAvailable makes the consumer poll again although nothing was put,
// for example because a fetcher failed or finished its last split.
func (q *elementsQueue[B]) NotifyAvailable() {
	select {
	case q.avail <- struct{}{}:
	default:
	}
}

// WakeUpPutter makes a Put by putter that is blocked now, or the next one it
// makes, return false.
func (q *elementsQueue[B]) WakeUpPutter(putter int) {
	q.mu.Lock()
	q.woken[putter] = struct{}{}
	q.mu.Unlock()
	q.notFull.Broadcast()
}

// forgetPutter drops a pending wake-up of a putter that will not put again,
// so the set of wake-ups stays as small as the set of live fetchers.
func (q *elementsQueue[B]) forgetPutter(putter int) {
	q.mu.Lock()
	delete(q.woken, putter)
	q.mu.Unlock()
}

// Close makes every blocked and future Put return false, and notifies the
// consumer. Batches already queued can still be polled.
func (q *elementsQueue[B]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.notFull.Broadcast()
	q.NotifyAvailable()
}

// Len is the number of batches in the queue.
func (q *elementsQueue[B]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// endWait books the wait of a Put that started waiting at since (-1: it
// did not wait). Called with mu held.
func (q *elementsQueue[B]) endWait(since int64) {
	if since < 0 {
		return
	}
	q.waiting--
	q.waitSum -= since
	q.blockedNs += int64(time.Since(q.born)) - since
}

// BlockedTime is the total time putters spent blocked in Put on a full
// queue, waits under way included: how long the fetchers were held back
// by backpressure.
func (q *elementsQueue[B]) BlockedTime() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := int64(time.Since(q.born))
	return time.Duration(q.blockedNs + q.waiting*now - q.waitSum)
}

// Cap is the number of batches the queue holds before Put blocks.
func (q *elementsQueue[B]) Cap() int {
	return len(q.buf)
}
