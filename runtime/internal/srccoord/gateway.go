package srccoord

import (
	"maps"
	"slices"
	"sync"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// GateOptions are the test knobs of the gateways: the gate switched off,
// and a delay before each event is delivered.
type GateOptions struct {
	Off   bool
	Delay func()
}

// Reader is the reader side of a source subtask, the source operator
// (runtime/internal/sourceop): what the coordinator's events do once
// they reach its task goroutine.
type Reader[S connector.Split] interface {
	// AddSplits gives the reader splits the enumerator assigned to it.
	AddSplits(splits []S) error
	// NoMoreSplits tells the reader that no split will follow.
	NoMoreSplits() error
	// HandleSourceEvent passes on an event the enumerator sent.
	HandleSourceEvent(ev connector.SourceEvent) error
}

// Gateway carries a coordinator's events to one subtask (Flink's
// SubtaskGatewayImpl inside its OperatorCoordinatorHolder) and keeps the
// gate (DESIGN.md's invariant of that name):
//
//   - close(N), on the coordinator goroutine right after the coordinator
//     snapshotted N: later events are held back. It returns a channel that
//     closes once every event sent before has run on the subtask's task
//     goroutine, and the checkpoint driver waits for it before barrier N
//     is injected. Without that wait barrier N, an urgent mail, could run
//     before an assignment the enumerator no longer holds in its snapshot,
//     and the split would be in no state of checkpoint N.
//   - Open(N), on the task goroutine right after the subtask snapshotted N
//     (or when N is aborted): held events are sent, in order; they run
//     after the snapshot, so their splits are "after N" assignments.
//   - failed, when the subtask's task is gone: held and in-flight events
//     are dropped (the splitAssignmentTracker gives their splits back) and
//     whoever waits for their delivery is released. The gateway stays
//     detached, dropping events, until the coordinator goroutine activates
//     the restarted subtask's binding.
//
// The mutex orders sends, holds and releases; it is never held while user
// code runs.
type Gateway[S connector.Split] struct {
	mu       sync.Mutex
	gateOff  bool
	mb       *engine.Mailbox
	op       Reader[S]
	next     Reader[S] // binding waiting for activate
	nextMb   *engine.Mailbox
	detached bool
	// gen counts failures; a reset activates only the binding made after
	// the newest one.
	gen      int
	closedAt int64 // checkpoint the gate is closed for; 0 when open
	held     []func(Reader[S]) error
	heldName []string
	inflight int
	waiters  []chan struct{}
	// delay, when set (tests), delivers each event from a goroutine
	// after the function returns: a slow network between coordinator and
	// subtask.
	delay func()
}

// Bind attaches a subtask's task, whose mailbox is mb and whose reader
// is op: directly before the job runs, or, after failed, as the binding
// that activate makes current.
func (g *Gateway[S]) Bind(mb *engine.Mailbox, op Reader[S]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.detached {
		g.nextMb, g.next = mb, op
		return
	}
	g.mb, g.op = mb, op
}

// generation is the number of failures so far.
func (g *Gateway[S]) generation() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

// activate makes the pending binding current, unless the subtask failed
// again since generation gen (a later reset will activate the later
// binding). Coordinator goroutine, after the failed subtask's splits were
// taken back.
func (g *Gateway[S]) activate(gen int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen != g.gen || !g.detached {
		return
	}
	g.detached = false
	g.closedAt = 0
	g.held, g.heldName = nil, nil
	g.mb, g.op = g.nextMb, g.next
	g.nextMb, g.next = nil, nil
}

// failed drops everything addressed to the subtask's old task.
func (g *Gateway[S]) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.detached = true
	g.gen++
	g.mb, g.op = nil, nil
	g.held, g.heldName = nil, nil
	g.closedAt = 0
	g.inflight = 0
	g.release()
}

func (g *Gateway[S]) release() {
	for _, w := range g.waiters {
		close(w)
	}
	g.waiters = nil
}

// send delivers or holds an event. Coordinator goroutine.
func (g *Gateway[S]) send(name string, fn func(Reader[S]) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.detached {
		return // the task is gone; the tracker hands the splits back
	}
	if g.closedAt != 0 && !g.gateOff {
		g.held = append(g.held, fn)
		g.heldName = append(g.heldName, name)
		return
	}
	g.deliver(name, fn)
}

func (g *Gateway[S]) deliver(name string, fn func(Reader[S]) error) {
	if g.mb == nil {
		return // detached: the task is gone
	}
	mb, op := g.mb, g.op
	g.inflight++
	m := engine.Mail{Name: name, Run: func() error {
		err := fn(op)
		g.delivered(mb)
		return err
	}}
	if g.delay != nil {
		delay := g.delay
		go func() {
			delay()
			if !mb.Put(engine.PriorityDefault, m) {
				g.delivered(mb)
			}
		}()
		return
	}
	if !mb.Put(engine.PriorityDefault, m) {
		g.inflight--
		g.maybeRelease()
	}
}

func (g *Gateway[S]) delivered(mb *engine.Mailbox) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mb != mb || g.inflight == 0 {
		return // a gateway reset since
	}
	g.inflight--
	g.maybeRelease()
}

func (g *Gateway[S]) maybeRelease() {
	if g.inflight == 0 {
		g.release()
	}
}

// close shuts the gate for checkpoint id and returns a channel closed once
// every event sent before it has run on the subtask. Coordinator
// goroutine.
func (g *Gateway[S]) close(id int64) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := make(chan struct{})
	if g.gateOff || g.detached {
		close(w)
		return w
	}
	if g.closedAt != 0 {
		// Still closed for an older checkpoint whose barrier never
		// reached the subtask (it was aborted first): what it held was
		// sent before this close, so it goes out now and is waited for.
		g.reopen()
	}
	g.closedAt = id
	if g.inflight == 0 {
		close(w)
	} else {
		g.waiters = append(g.waiters, w)
	}
	return w
}

// Open reopens the gate closed for a checkpoint <= id and sends what it
// held. Task goroutine (after the subtask's snapshot) or driver (abort).
func (g *Gateway[S]) Open(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closedAt == 0 || g.closedAt > id {
		return
	}
	g.reopen()
}

func (g *Gateway[S]) reopen() {
	g.closedAt = 0
	held, names := g.held, g.heldName
	g.held, g.heldName = nil, nil
	for i, fn := range held {
		g.deliver(names[i], fn)
	}
}

// splitAssignmentTracker books a source coordinator's split assignments
// per subtask and checkpoint (the booking rule), as Flink's class of that
// name: assignments are recorded as uncheckpointed; the coordinator snapshot
// for checkpoint N files them under N; the completion of N forgets everything
// up to N (those splits are in readers' states of a completed checkpoint);
// when a subtask is reset to checkpoint N, everything assigned to it after N
// is handed back for AddSplitsBack. It is used on the coordinator goroutine
// only and needs no lock.
//
// Bookings are only ever read by a restart. A job that cannot restart
// (checkpoints off and no restart strategy, the default) books nothing, so
// that the tracker does not grow with every split it ever assigned. A job
// that restarts without checkpoints keeps every assignment (a region
// restart gives the failed reader all it was assigned, as Flink's tracker
// does), and one with checkpoints forgets them as checkpoints complete.
type splitAssignmentTracker[S connector.Split] struct {
	uncheckpointed map[int][]S
	byCheckpoint   map[int64]map[int][]S
	off            bool // nothing to book: see above
}

// newSplitAssignmentTracker returns an empty tracker.
func newSplitAssignmentTracker[S connector.Split]() *splitAssignmentTracker[S] {
	return &splitAssignmentTracker[S]{uncheckpointed: map[int][]S{}, byCheckpoint: map[int64]map[int][]S{}}
}

// RecordAssignment books an assignment as uncheckpointed.
func (t *splitAssignmentTracker[S]) RecordAssignment(a connector.SplitsAssignment[S]) {
	if t.off {
		return
	}
	for s, splits := range a.Assignment {
		t.uncheckpointed[s] = append(t.uncheckpointed[s], splits...)
	}
}

// OnCheckpoint files the uncheckpointed assignments under checkpoint id.
func (t *splitAssignmentTracker[S]) OnCheckpoint(id int64) {
	if len(t.uncheckpointed) == 0 {
		return
	}
	t.byCheckpoint[id] = t.uncheckpointed
	t.uncheckpointed = map[int][]S{}
}

// OnCheckpointComplete forgets the assignments of checkpoints <= id.
func (t *splitAssignmentTracker[S]) OnCheckpointComplete(id int64) {
	maps.DeleteFunc(t.byCheckpoint, func(k int64, _ map[int][]S) bool { return k <= id })
}

// TakeAssignmentsAfter removes and returns what subtask was assigned after
// checkpoint id, oldest first: the splits its reset reader no longer has.
func (t *splitAssignmentTracker[S]) TakeAssignmentsAfter(subtask int, id int64) []S {
	var out []S
	for _, k := range slices.Sorted(maps.Keys(t.byCheckpoint)) {
		if k <= id {
			continue
		}
		out = append(out, t.byCheckpoint[k][subtask]...)
		delete(t.byCheckpoint[k], subtask)
	}
	out = append(out, t.uncheckpointed[subtask]...)
	delete(t.uncheckpointed, subtask)
	return out
}
