package engine

import (
	"sync"
	"sync/atomic"
)

// mailPriority orders mails. Urgent mails (checkpoint actions, stop) run
// before every default mail queued before them; mails of one priority run
// in the order they were put.
type mailPriority uint8

const (
	PriorityDefault mailPriority = iota
	PriorityUrgent
)

// Mail is an action that must run on the task goroutine: a timer firing, a
// split assignment from the source coordinator, a flush, a stop request,
// and checkpoint triggers and notifications.
type Mail struct {
	Name string
	Run  func() error
}

// Mailbox is the one way other goroutines reach a task: they put mails; the
// task goroutine runs them between two steps of its default action, so
// operator state is only ever touched by the task goroutine (the
// task-goroutine rule).
//
// It is Flink's TaskMailbox reduced to what a Go task needs: put never
// blocks (the queue is unbounded, but producers are few and bounded by
// design: one coordinator, the task's own timers), and a one-token channel
// wakes the task when it waits on mail or availability.
type Mailbox struct {
	mu     sync.Mutex
	urgent []Mail
	normal []Mail
	closed bool
	// pending counts queued mails so the task's hot loop checks for mail
	// with one atomic load instead of a lock.
	pending atomic.Int32
	// Ready holds a token whenever a mail was put since the task last
	// looked. Spurious tokens are harmless: the task re-checks pending.
	Ready chan struct{}
}

func NewMailbox() *Mailbox {
	return &Mailbox{Ready: make(chan struct{}, 1)}
}

// Put queues m and wakes the task. It returns false, dropping m, once the
// task has finished and closed its mailbox. Safe from any goroutine.
func (mb *Mailbox) Put(p mailPriority, m Mail) bool {
	mb.mu.Lock()
	if mb.closed {
		mb.mu.Unlock()
		return false
	}
	if p == PriorityUrgent {
		mb.urgent = append(mb.urgent, m)
	} else {
		mb.normal = append(mb.normal, m)
	}
	mb.pending.Add(1)
	mb.mu.Unlock()
	select {
	case mb.Ready <- struct{}{}:
	default:
	}
	return true
}

func (mb *Mailbox) HasMail() bool { return mb.pending.Load() > 0 }

// Take removes the next mail, urgent first. Task goroutine only.
func (mb *Mailbox) Take() (Mail, bool) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	var m Mail
	switch {
	case len(mb.urgent) > 0:
		m = mb.urgent[0]
		mb.urgent[0] = Mail{}
		mb.urgent = mb.urgent[1:]
	case len(mb.normal) > 0:
		m = mb.normal[0]
		mb.normal[0] = Mail{}
		mb.normal = mb.normal[1:]
	default:
		return Mail{}, false
	}
	mb.pending.Add(-1)
	return m, true
}

// Close makes later puts fail and drops what is queued: the task that owned
// the mailbox is gone, and the mails were addressed to its state.
func (mb *Mailbox) Close() {
	mb.mu.Lock()
	mb.closed = true
	mb.urgent, mb.normal = nil, nil
	mb.pending.Store(0)
	mb.mu.Unlock()
}
