package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"time"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/internal/timers"
)

// TimeDomain says which clock a timer follows.
type TimeDomain uint8

const (
	// EventTime timers fire when the operator's input watermark passes
	// their timestamp.
	EventTime TimeDomain = iota + 1
	// ProcessingTime timers fire when the wall clock passes their
	// timestamp.
	ProcessingTime
)

func (d TimeDomain) String() string {
	switch d {
	case EventTime:
		return "event-time"
	case ProcessingTime:
		return "processing-time"
	default:
		return "unknown-time-domain"
	}
}

// Timer is a timer that fired, handed to OnTimer.
type Timer struct {
	Timestamp int64
	Domain    TimeDomain
}

// KeyedProcessFunction processes a keyed stream one record at a time with
// per-key state and timers (Flink's KeyedProcessFunction). All methods run
// on the subtask's task goroutine, never concurrently; the context passed
// to them is only valid during the call.
//
// A function may also implement Open(*KeyedContext[K, O]) error, called
// once before the first record: the place to create state handles.
type KeyedProcessFunction[K comparable, I, O any] interface {
	// ProcessElement handles one record; ctx.Key() is its key.
	ProcessElement(ctx *KeyedContext[K, O], value I) error
	// OnTimer handles a timer that fired for key ctx.Key().
	OnTimer(ctx *KeyedContext[K, O], timer Timer) error
}

// keyedOpener is the optional Open of a KeyedProcessFunction.
type keyedOpener[K comparable, O any] interface {
	Open(ctx *KeyedContext[K, O]) error
}

// KeyedProcessFuncs adapts plain functions to KeyedProcessFunction. Element
// is required; Setup and Timer may be nil. Setup is called by Open, once per
// subtask: state handles it keeps in variables shared by all subtasks would
// be shared too, so a function with per-subtask handles belongs in
// KeyedProcessPerSubtask, which builds one KeyedProcessFuncs per subtask.
type KeyedProcessFuncs[K comparable, I, O any] struct {
	Setup   func(ctx *KeyedContext[K, O]) error
	Element func(ctx *KeyedContext[K, O], value I) error
	Timer   func(ctx *KeyedContext[K, O], timer Timer) error
}

// Open calls Setup, if any.
func (f KeyedProcessFuncs[K, I, O]) Open(ctx *KeyedContext[K, O]) error {
	if f.Setup == nil {
		return nil
	}
	return f.Setup(ctx)
}

func (f KeyedProcessFuncs[K, I, O]) ProcessElement(ctx *KeyedContext[K, O], v I) error {
	return f.Element(ctx, v)
}

func (f KeyedProcessFuncs[K, I, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	if f.Timer == nil {
		return nil
	}
	return f.Timer(ctx, t)
}

// KeyedContext is what a KeyedProcessFunction sees: the current key and
// timestamp, an output, state, and timers.
type KeyedContext[K comparable, O any] struct {
	scope     // makes it a state.Context
	op        *keyed.State[K]
	out       engine.Output[O]
	ts        int64
	err       error
	info      *engine.OpInfo
	watermark int64
	timers    *timerService[K]
}

// Key is the key of the record or timer being handled.
func (c *KeyedContext[K, O]) Key() K { return c.op.Key }

// Timestamp is the current record's event timestamp, or the timer's
// timestamp in OnTimer for an event-time timer (connector.NoTimestamp if
// none).
func (c *KeyedContext[K, O]) Timestamp() int64 { return c.ts }

// SubtaskIndex is the subtask running the function.
func (c *KeyedContext[K, O]) SubtaskIndex() int { return c.info.Subtask }

// Collect emits v with the current timestamp.
func (c *KeyedContext[K, O]) Collect(v O) { c.CollectWithTimestamp(v, c.ts) }

// CollectWithTimestamp emits v with timestamp ts.
func (c *KeyedContext[K, O]) CollectWithTimestamp(v O, ts int64) {
	if c.err == nil {
		c.err = c.out.Collect(v, ts)
	}
}

// CurrentWatermark is the operator's input watermark (math.MinInt64 before
// the first one).
func (c *KeyedContext[K, O]) CurrentWatermark() int64 { return c.watermark }

// sideOutputs makes the context a SideOutputContext: Output emits to the
// operator's side outputs.
func (c *KeyedContext[K, O]) sideOutputs() (*sideOutputs, int64, *error) {
	return sidesOf(c.info), c.ts, &c.err
}

// CurrentProcessingTime is the processing time, the wall clock in
// milliseconds since the Unix epoch: the time processing-time timers fire
// by and state TTL expires by.
func (c *KeyedContext[K, O]) CurrentProcessingTime() int64 { return c.op.Now() }

// RegisterEventTimeTimer asks for OnTimer once the watermark reaches ts,
// for the current key. Registering the same (key, ts) twice fires once.
// Timers are checkpointed with their keys, so the key type must follow
// state.DefaultSerde's rule; the first registration checks it, and a key type
// that does not fails the job. With the pebble backend the key type must
// also have a binary encoding (see state.Pebble); a KeyedProcessFuncs
// with a Timer (KeyedProcess with OnTimer) over one without is refused when its
// operator opens, and any other function fails at its first registration.
//
// At the end of event time (the final watermark, maxWatermark, which a
// bounded input sends when it ends) every pending timer fires, and so does
// every timer registered while they fire; a timer registered by one of
// those is dropped, so that a timer that registers itself again lets the
// input end (see timerService.final).
func (c *KeyedContext[K, O]) RegisterEventTimeTimer(ts int64) {
	c.checkTimerKey(timers.EventName)
	if s := c.timers; s.final {
		if s.firingFinal {
			s.droppedFinal++
			return
		}
		s.registeredFinal[timers.Entry[K]{Ts: ts, Key: c.op.Key}] = struct{}{}
	}
	c.timers.event.Add(c.op.Key, ts)
}

// checkTimerKey fails the current call once the key type is known not to
// survive a checkpoint of the timers.
func (c *KeyedContext[K, O]) checkTimerKey(name string) {
	if !c.timers.keyChecked {
		c.timers.keyChecked = true
		c.timers.keyErr = keyed.CheckStateTypes(name, keyed.StateType{Role: "key type", Type: reflect.TypeFor[K]()})
		if c.timers.keyErr == nil && c.op.Pebble != nil {
			c.timers.keyErr = c.op.PebbleKeysErr // the DB holds timers by their keys' bytes
		}
	}
	if c.timers.keyErr != nil && c.err == nil {
		c.err = c.timers.keyErr
	}
}

// DeleteEventTimeTimer cancels a timer registered for the current key.
func (c *KeyedContext[K, O]) DeleteEventTimeTimer(ts int64) { c.timers.event.Remove(c.op.Key, ts) }

// RegisterProcessingTimeTimer asks for OnTimer once the wall clock reaches
// ts (milliseconds since the Unix epoch), for the current key.
func (c *KeyedContext[K, O]) RegisterProcessingTimeTimer(ts int64) {
	c.checkTimerKey(timers.ProcessingName)
	c.timers.processing.Add(c.op.Key, ts)
	c.timers.scheduleProcessing()
}

// DeleteProcessingTimeTimer cancels a timer registered for the current key.
func (c *KeyedContext[K, O]) DeleteProcessingTimeTimer(ts int64) {
	c.timers.processing.Remove(c.op.Key, ts)
}

// timerService holds an operator's event-time and processing-time timers
// (Flink's InternalTimerService). Processing-time timers are driven by one
// task timer set to the earliest of them; when it expires a mail fires the
// due ones on the task goroutine.
type timerService[K comparable] struct {
	event      timers.Queue[K]
	processing timers.Queue[K]
	wake       *time.Timer
	wakeAt     int64
	now        func() int64 // the operator's processing time
	ended      bool
	// final: the final watermark (maxWatermark) came. Every timer is due
	// then, so a timer whose OnTimer registers one at a later time (a
	// periodic timer) would keep the firing going forever and the input
	// would never end. The firing at the end goes one step past the
	// timers pending when it begins: those fire, then the timers they
	// register (registeredFinal), and what those register is dropped
	// (firingFinal while one of them fires; droppedFinal counts them).
	final           bool
	registeredFinal map[timers.Entry[K]]struct{}
	firingFinal     bool
	droppedFinal    int64
	// keyChecked: the key type was checked at the first registration;
	// keyErr is the verdict.
	keyChecked bool
	keyErr     error
}

func (s *timerService[K]) scheduleProcessing() {
	next, ok := s.processing.Peek()
	if !ok || s.ended {
		return
	}
	if s.wakeAt != 0 && s.wakeAt <= next.Ts {
		return
	}
	s.wakeAt = next.Ts
	// A wait on the wall clock for the time left by the processing-time
	// clock: the same with the wall clock; with a clock a test moves, a
	// timer not due when the wait ends is waited for again.
	s.wake.Reset(time.Duration(next.Ts-s.now()) * time.Millisecond)
}

// keyedProcessOperator runs a KeyedProcessFunction.
type keyedProcessOperator[K comparable, I, O any] struct {
	info   engine.OpInfo
	keyFn  func(I) K
	hash   func(K) uint32
	par    int
	maxPar int
	newFn  func() KeyedProcessFunction[K, I, O]
	fn     KeyedProcessFunction[K, I, O]
	out    engine.Output[O]
	state  keyed.State[K]
	timers timerService[K]
	ctx    KeyedContext[K, O]

	// Timer firing is resumable (the backpressure rule): it stops while the
	// task's output is unavailable and the task resumes it, before any
	// further input, once the output has room again.
	t *task
	// wmPending: event-time timers up to ctx.watermark are still due,
	// and the watermark is forwarded only after them, with the stream
	// status that arrived meanwhile (statusHeld, heldIdle).
	wmPending  bool
	statusHeld bool
	heldIdle   bool
	// procPending: due processing-time timers are left to fire.
	procPending bool
	// suspended: registered with the task for resume.
	suspended bool
	// restoredWm is the watermark the restore found (noWatermark: none).
	restoredWm int64
	// held is fn when it holds output back (heldOutput), nil otherwise;
	// heldTimer is the timer it arms.
	held      heldOutput[K, O]
	heldTimer *time.Timer
}

// heldOutput is a KeyedProcessFunction that holds output back between
// checkpoints (a rolling aggregation with EmitLatest) and emits it when
// told: flushHeld runs before every checkpoint barrier leaves the
// operator (PrepareSnapshotPreBarrier), so what the function held for
// checkpoint N goes downstream ahead of barrier N and into N's
// transactions, at the end of input, and when the timer the function
// armed with bindHeld's arm expires. bindHeld runs at open, before Open;
// all run on the task goroutine. Nothing held is checkpointed: there is
// nothing held when the state is taken.
type heldOutput[K comparable, O any] interface {
	holds() bool
	bindHeld(g *metrics.Group, arm func(time.Duration))
	flushHeld(ctx *KeyedContext[K, O]) error
}

func (p *keyedProcessOperator[K, I, O]) Info() *engine.OpInfo { return &p.info }

func (p *keyedProcessOperator[K, I, O]) bindTask(t *task) { p.t = t }

func (p *keyedProcessOperator[K, I, O]) Open(engine.Task) error {
	t := p.t
	p.fn = p.newFn()
	if p.fn == nil {
		return p.info.Wrap(&unrecoverableError{Err: errNilFunction("process function (from the factory)")})
	}
	p.maxPar = t.cfg.maxParallelism
	p.state.Init(p.hash, p.maxPar, t.cfg.clock)
	p.timers.now = p.state.Now
	if t.cfg.state.backend == kindPebble {
		pk, err := newPebbleKeyed(t, p.info.UID, p.info.Subtask, p.par, p.maxPar)
		if err != nil {
			return p.info.Wrap(err)
		}
		if err := p.state.UsePebble(pk); err != nil && handlesTimers(p.fn) {
			// The DB holds timers by their keys' bytes: say so now, not at
			// the first registration, records into the job.
			return p.info.Wrap(fmt.Errorf("its function handles timers, which the pebble state backend keeps by their keys' bytes: %w", err))
		}
		p.timers.event = timers.NewQueue(p.maxPar, p.state.GroupOf, timers.Sets[K](timers.NewPebbleSets(&p.state, stateformat.KindEventTimers, p.maxPar)))
		p.timers.processing = timers.NewQueue(p.maxPar, p.state.GroupOf, timers.Sets[K](timers.NewPebbleSets(&p.state, stateformat.KindProcessingTimers, p.maxPar)))
	} else {
		p.timers.event = timers.NewQueue(p.maxPar, p.state.GroupOf, timers.Sets[K](timers.NewHeapSets(&p.state, p.maxPar)))
		p.timers.processing = timers.NewQueue(p.maxPar, p.state.GroupOf, timers.Sets[K](timers.NewHeapSets(&p.state, p.maxPar)))
	}
	if err := p.restoreState(t); err != nil {
		var ue *unrecoverableError
		var io *restoreIOError
		if errors.As(err, &io) && !errors.As(err, &ue) {
			// Reading files and opening a DB may go through on a retry.
			return p.info.Wrap(err)
		}
		// Decoding the same checkpoint again fails again.
		return p.info.Wrap(&unrecoverableError{Err: err})
	}
	// The restored watermark, not none: event-time timers up to it have
	// fired before the checkpoint, so what they did (a window fired, its
	// state removed) stays done; a record of a fired window that arrives
	// before the upstream's first watermark after the restore is late, as
	// it was in the run before the failure, rather than opening the window
	// again.
	p.ctx = KeyedContext[K, O]{scope: keyed.NewScope(&p.state), op: &p.state, out: p.out, info: &p.info, watermark: p.restoredWm, timers: &p.timers}
	p.timers.wake = t.newTimer("processing-time timers", p.fireProcessingTimers)
	// Restored processing-time timers: one already due fires at once.
	p.timers.scheduleProcessing()
	if h, ok := p.fn.(heldOutput[K, O]); ok && h.holds() {
		p.held = h
		p.heldTimer = t.newTimer("held output", p.flushHeld)
		h.bindHeld(t.metricGroup(p.info), func(d time.Duration) { p.heldTimer.Reset(d) })
	}
	if o, ok := p.fn.(keyedOpener[K, O]); ok {
		if err := o.Open(&p.ctx); err != nil {
			return p.info.Wrap(err)
		}
	}
	return nil
}

// handlesTimers reports that fn is a KeyedProcessFuncs with a Timer
// (KeyedProcess with OnTimer): a function that says it handles timers. A
// KeyedProcessFunction of its own type has an OnTimer whether or not it
// sets timers (the interface requires one), so it is not refused at open;
// its first registration fails instead.
func handlesTimers[K comparable, I, O any](fn KeyedProcessFunction[K, I, O]) bool {
	switch f := fn.(type) {
	case KeyedProcessFuncs[K, I, O]:
		return f.Timer != nil
	case *KeyedProcessFuncs[K, I, O]:
		return f.Timer != nil
	case interface{ handlesTimers() bool }:
		return f.handlesTimers() // the adapter of KeyedCoProcess (connect.go)
	}
	return false
}

func (p *keyedProcessOperator[K, I, O]) Collect(v I, ts int64) error {
	p.info.Records++
	p.state.SetKey(p.keyFn(v))
	p.ctx.ts, p.ctx.err = ts, nil
	if err := p.fn.ProcessElement(&p.ctx, v); err != nil {
		return p.info.Wrap(err)
	}
	if p.state.Err != nil {
		return p.info.Wrap(p.state.Err)
	}
	return p.ctx.err
}

// emitWatermark fires every event-time timer at or before wm, then passes
// wm on: downstream sees the timers' output before the watermark that
// caused it, as results of a window precede the watermark closing it. A
// watermark that does not advance the operator's is ignored: watermarks
// never go back. When the task's output fills up, firing stops and the
// task resumes it (resume) before it processes more input.
func (p *keyedProcessOperator[K, I, O]) EmitWatermark(wm int64) error {
	if wm <= p.ctx.watermark {
		return nil
	}
	p.ctx.watermark = wm
	p.wmPending = true
	if wm == engine.MaxWatermark {
		p.timers.final = true
		p.timers.registeredFinal = map[timers.Entry[K]]struct{}{}
	}
	return p.fireEventTimers()
}

func (p *keyedProcessOperator[K, I, O]) fireEventTimers() error {
	for {
		e, ok := p.timers.event.Peek()
		if !ok || e.Ts > p.ctx.watermark {
			break
		}
		if p.mustYield() {
			p.yield()
			return nil
		}
		p.timers.event.Pop()
		if p.timers.final {
			_, p.timers.firingFinal = p.timers.registeredFinal[e]
			delete(p.timers.registeredFinal, e)
		}
		err := p.fire(e, EventTime, e.Ts)
		p.timers.firingFinal = false
		if err != nil {
			return err
		}
	}
	p.wmPending = false
	if p.timers.final && p.timers.droppedFinal > 0 {
		p.logger().Warn("event-time timers registered at the end of input by timers that fire there were dropped: a timer that registers another forever would never let the input end",
			"operator", p.info.Name, "subtask", p.info.Subtask, "dropped", p.timers.droppedFinal)
		p.timers.droppedFinal = 0
	}
	if err := p.out.EmitWatermark(p.ctx.watermark); err != nil {
		return err
	}
	if p.statusHeld {
		p.statusHeld = false
		return p.out.EmitStatus(p.heldIdle)
	}
	return nil
}

// logger is the job's logger (WithLogger), or slog's default.
func (p *keyedProcessOperator[K, I, O]) logger() *slog.Logger {
	if p.t != nil && p.t.cfg != nil && p.t.cfg.cp.logger != nil {
		return p.t.cfg.cp.logger
	}
	return slog.Default()
}

// mustYield reports that the task's output cannot take more now.
func (p *keyedProcessOperator[K, I, O]) mustYield() bool {
	return p.t != nil && !p.t.outputsAvailable()
}

func (p *keyedProcessOperator[K, I, O]) yield() {
	if !p.suspended {
		p.suspended = true
		p.t.suspend(p)
	}
}

// resume goes on firing the timers left due when the output filled up.
// Task goroutine, with the output available.
func (p *keyedProcessOperator[K, I, O]) resume() error {
	p.suspended = false
	if p.wmPending {
		if err := p.fireEventTimers(); err != nil {
			return err
		}
		if p.suspended {
			return nil
		}
	}
	if p.procPending {
		return p.fireDueProcessingTimers()
	}
	return nil
}

func (p *keyedProcessOperator[K, I, O]) fire(e timers.Entry[K], d TimeDomain, ts int64) error {
	p.state.SetKey(e.Key)
	p.ctx.ts, p.ctx.err = ts, nil
	if err := p.fn.OnTimer(&p.ctx, Timer{Timestamp: e.Ts, Domain: d}); err != nil {
		return p.info.Wrap(err)
	}
	if p.state.Err != nil {
		return p.info.Wrap(p.state.Err)
	}
	return p.ctx.err
}

func (p *keyedProcessOperator[K, I, O]) fireProcessingTimers() error {
	p.timers.wakeAt = 0
	if p.timers.ended {
		return nil
	}
	return p.fireDueProcessingTimers()
}

func (p *keyedProcessOperator[K, I, O]) fireDueProcessingTimers() error {
	now := p.state.Now()
	for {
		e, ok := p.timers.processing.Peek()
		if !ok || e.Ts > now {
			break
		}
		if p.mustYield() {
			p.procPending = true
			p.yield()
			return nil
		}
		p.timers.processing.Pop()
		if err := p.fire(e, ProcessingTime, engine.NoTimestampForProcessingTime); err != nil {
			return err
		}
	}
	p.procPending = false
	p.timers.scheduleProcessing()
	return nil
}

// emitStatus passes the status on, after the watermark whose timers are
// still firing, if any.
func (p *keyedProcessOperator[K, I, O]) EmitStatus(idle bool) error {
	if p.wmPending {
		p.statusHeld, p.heldIdle = true, idle
		return nil
	}
	return p.out.EmitStatus(idle)
}

// EndInput emits what the function held back (heldOutput), then drops
// pending processing-time timers: the input is over and the wall clock
// would only fire them on a job that has nothing left to do. Event-time
// timers have fired already, with the final maxWatermark.
func (p *keyedProcessOperator[K, I, O]) EndInput() error {
	if err := p.flushHeld(); err != nil {
		return err
	}
	p.timers.ended = true
	p.timers.wake.Stop()
	return nil
}

// PrepareSnapshotPreBarrier emits what the function held back before the
// barrier goes on (heldOutput), so it belongs to checkpoint id.
func (p *keyedProcessOperator[K, I, O]) PrepareSnapshotPreBarrier(int64) error {
	return p.flushHeld()
}

// flushHeld has a function that holds output back emit it; task goroutine.
// A timer that expires after a barrier emitted everything finds nothing,
// or emits early what came since.
func (p *keyedProcessOperator[K, I, O]) flushHeld() error {
	if p.held == nil {
		return nil
	}
	p.heldTimer.Stop()
	p.ctx.err = nil
	if err := p.held.flushHeld(&p.ctx); err != nil {
		return p.info.Wrap(err)
	}
	if p.state.Err != nil {
		return p.info.Wrap(p.state.Err)
	}
	return p.ctx.err
}

func (p *keyedProcessOperator[K, I, O]) Close() error {
	if p.state.Common == nil {
		return nil // never opened: an operator after it in the chain failed to open first
	}
	if p.state.Pebble == nil {
		return nil
	}
	return p.state.Pebble.Close()
}

// restoreState keeps, from every subtask's snapshot of this operator, the
// key groups this subtask owns at its current parallelism: their states,
// kept until the function asks for them, and their pending timers, put
// back in the timer queues at once.
func (p *keyedProcessOperator[K, I, O]) restoreState(t *task) error {
	old, err := t.restored.Subtasks(p.info.UID)
	if err != nil {
		return err
	}
	p.state.Restored = map[string][]keyed.Entry{}
	p.restoredWm = engine.NoWatermark
	restoredWm, hasWm := int64(math.MaxInt64), false
	defer func() {
		if hasWm {
			p.restoredWm = restoredWm
		}
	}()
	var pebbles []pebblestate.Blob
	// Timers from a heap checkpoint, or from a pebble one of layout 100,
	// which kept them in its blob: with the pebble backend they go into
	// the DB once it is open.
	var blobTimers []keyed.Entry
	for i, b := range old {
		if b == nil {
			continue
		}
		if pebblestate.IsBlob(b) {
			if p.state.Pebble == nil {
				return fmt.Errorf("restore keyed state: the checkpoint was taken with the pebble state backend and this job uses the heap backend; run it with runtime.WithStateBackend(state.Pebble(dir)) (state moves from heap to pebble, not back)")
			}
			pbl, err := pebblestate.DecodeBlob(b)
			if err != nil {
				return fmt.Errorf("restore keyed state of subtask %d: %w", i, err)
			}
			if pbl.MaxPar != p.maxPar {
				return fmt.Errorf("restore keyed state: checkpointed with max parallelism %d, the job has %d", pbl.MaxPar, p.maxPar)
			}
			if pbl.KGHi < p.state.Pebble.KGLo || pbl.KGLo > p.state.Pebble.KGHi {
				continue
			}
			pebbles = append(pebbles, pbl)
			if b = pbl.Entries; len(b) == 0 {
				continue
			}
		}
		entries, err := keyed.DecodeEntries(b)
		if err != nil {
			return fmt.Errorf("restore keyed state: %w", err)
		}
		for _, e := range entries {
			if keygroup.Subtask(e.KeyGroup, p.par, p.maxPar) != p.info.Subtask {
				continue
			}
			if e.Kind == stateformat.KindWatermark {
				wm, err := keyed.DecodeWatermark(e.Data)
				if err != nil {
					return fmt.Errorf("restore the watermark (key group %d): %w", e.KeyGroup, err)
				}
				restoredWm, hasWm = min(restoredWm, wm), true
				continue
			}
			switch e.Kind {
			case stateformat.KindEventTimers, stateformat.KindProcessingTimers:
				if p.state.Pebble != nil {
					blobTimers = append(blobTimers, e)
					continue
				}
			}
			switch e.Kind {
			case stateformat.KindEventTimers:
				err = timers.Restore(&p.timers.event, &p.state, e.Format, e.Data)
			case stateformat.KindProcessingTimers:
				err = timers.Restore(&p.timers.processing, &p.state, e.Format, e.Data)
			default:
				p.state.Restored[e.Name] = append(p.state.Restored[e.Name], e)
			}
			if err != nil {
				return fmt.Errorf("restore %s (key group %d): %w", e.Name, e.KeyGroup, err)
			}
		}
	}
	if p.state.Pebble != nil {
		if err := p.openPebble(t, pebbles); err != nil {
			return &restoreIOError{err}
		}
		return p.restorePebbleTimers(len(pebbles) > 0, blobTimers)
	}
	return nil
}

// restoreIOError is a restore that failed to lay out or open the state's
// files (storage or local disk), which a restart may get past, unlike a
// checkpoint that does not decode.
type restoreIOError struct{ err error }

func (e *restoreIOError) Error() string { return e.err.Error() }
func (e *restoreIOError) Unwrap() error { return e.err }

// FreezeState is the part of a snapshot on the task goroutine: it
// freezes the epoch (see keyedState) and returns the encoder of every
// state, the carried-over restored entries and the timers, by key group.
// Its cost follows the number of key groups and states, not the number of
// keys or timers (runtime/internal/timers); the encoder may run on another goroutine
// until ThawState.
func (p *keyedProcessOperator[K, I, O]) FreezeState(id int64) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	if p.state.Pebble != nil {
		return p.freezePebble(id)
	}
	// The timers freeze in the epoch the states' freeze began.
	parts, carried := p.state.Freeze()
	carried = append(carried, p.watermarkEntries()...)
	parts = append(parts,
		keyed.Part{Name: timers.EventName, Kind: stateformat.KindEventTimers, Enc: p.timers.event.Sets().(*timers.HeapSets[K]).Freeze()},
		keyed.Part{Name: timers.ProcessingName, Kind: stateformat.KindProcessingTimers, Enc: p.timers.processing.Sets().(*timers.HeapSets[K]).Freeze()})
	info := &p.info
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		data, err := keyed.EncodeParts(parts, carried, stop)
		if err != nil {
			return nil, nil, info.Wrap(err)
		}
		return data, nil, nil
	}, nil
}

// watermarkEntries are the entries of the operator's watermark for the
// key groups of its subtask.
func (p *keyedProcessOperator[K, I, O]) watermarkEntries() []keyed.Entry {
	lo, hi := keygroup.Range(p.info.Subtask, p.par, p.maxPar)
	return keyed.WatermarkEntries(p.ctx.watermark, lo, hi)
}

// ThawState ends the snapshot FreezeState began: its encoder returned.
func (p *keyedProcessOperator[K, I, O]) ThawState() {
	p.state.Thaw()
}

// SnapshotState is the whole snapshot on the calling goroutine.
func (p *keyedProcessOperator[K, I, O]) SnapshotState(id int64) ([]byte, error) {
	enc, err := p.FreezeState(id)
	if err != nil {
		return nil, err
	}
	defer p.ThawState()
	data, files, err := enc(func() bool { return false })
	if len(files) > 0 {
		return nil, errors.New("a pebble state snapshot has files; it is taken asynchronously, with the checkpoint storage")
	}
	return data, err
}

// scope is keyed.Scope under a name that keeps it out of KeyedContext's
// documented fields.
type scope = keyed.Scope
