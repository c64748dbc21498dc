package runtime

import (
	"time"

	"github.com/splitflow/splitflow/connector"
)

// WatermarkOutput is where a WatermarkGenerator reports progress. It is
// valid only during the call it was passed to.
type WatermarkOutput interface {
	// EmitWatermark declares that no more events with a timestamp at or
	// before ts are expected. Watermarks that do not advance are ignored.
	EmitWatermark(ts int64)
	// MarkIdle declares that no events are coming for a while, so this
	// output must not hold back the combined watermark.
	MarkIdle()
	// MarkActive reverses MarkIdle; an event does so as well.
	MarkActive()
}

// WatermarkGenerator turns the event timestamps a source sees into
// watermarks, as Flink's WatermarkGenerator does. Each split of a source
// reader gets its own generator (see WatermarkStrategy), and the reader's
// watermark is the minimum over its active splits.
//
// Both methods run on the source's task goroutine.
type WatermarkGenerator[T any] interface {
	// OnEvent sees every record with its timestamp. A generator that
	// derives watermarks from special records (punctuated) emits here.
	OnEvent(event T, timestamp int64, out WatermarkOutput)
	// OnPeriodicEmit is called every auto-watermark interval (see
	// WithAutoWatermarkInterval). Most generators emit here: emitting per
	// record would flush network buffers per record.
	OnPeriodicEmit(out WatermarkOutput)
}

// WatermarkStrategy says how a source assigns event timestamps and
// generates watermarks; pass it to FromSource as an option. The zero
// value is NoWatermarks, FromSource's default: records keep the timestamps
// the reader gives them and no watermark is generated (a bounded source
// still emits MaxWatermark when it ends).
type WatermarkStrategy[T any] struct {
	newGenerator func() WatermarkGenerator[T]
	assigner     func(event T, recordTimestamp int64) int64
	idleness     time.Duration
}

// applySource makes a strategy an option of FromSource.
func (s WatermarkStrategy[T]) applySource(o *sourceOptions[T]) {
	o.strategy = s
	o.strategies++
}

// NoWatermarks generates no watermarks: for jobs that use processing time
// only.
func NoWatermarks[T any]() WatermarkStrategy[T] { return WatermarkStrategy[T]{} }

// ForBoundedOutOfOrderness emits, periodically, the largest timestamp seen
// minus maxOutOfOrderness minus one millisecond: events may arrive up to
// maxOutOfOrderness late (Flink's BoundedOutOfOrdernessWatermarks).
func ForBoundedOutOfOrderness[T any](maxOutOfOrderness time.Duration) WatermarkStrategy[T] {
	delay := maxOutOfOrderness.Milliseconds()
	return WatermarkStrategy[T]{newGenerator: func() WatermarkGenerator[T] {
		return &boundedOutOfOrderness[T]{delay: delay}
	}}
}

// ForMonotonousTimestamps is ForBoundedOutOfOrderness(0): timestamps never
// decrease within a split.
func ForMonotonousTimestamps[T any]() WatermarkStrategy[T] {
	return ForBoundedOutOfOrderness[T](0)
}

// ForGenerator uses a custom generator; newGenerator is called once per
// split (and once for records emitted on the reader-wide output).
func ForGenerator[T any](newGenerator func() WatermarkGenerator[T]) WatermarkStrategy[T] {
	return WatermarkStrategy[T]{newGenerator: newGenerator}
}

// WithTimestampAssigner sets the function that gives each record its event
// timestamp; recordTimestamp is the one the reader attached
// (connector.NoTimestamp if none).
func (s WatermarkStrategy[T]) WithTimestampAssigner(assign func(event T, recordTimestamp int64) int64) WatermarkStrategy[T] {
	s.assigner = assign
	return s
}

// WithIdleness marks a split idle when it has seen no record for timeout,
// so a quiet split does not hold back event time (Flink's
// WatermarkStrategy.withIdleness). Idleness is checked at each periodic
// emit, so it is detected within timeout plus one auto-watermark interval.
// The timeout counts only time in which the source could read: while the
// source task's output is full (backpressure) the clock stands still, so a
// slow downstream never makes a source that has records idle.
func (s WatermarkStrategy[T]) WithIdleness(timeout time.Duration) WatermarkStrategy[T] {
	s.idleness = timeout
	return s
}

// generator makes a split's generator; clock (nil: the wall clock) is what
// idleness is measured on.
func (s WatermarkStrategy[T]) generator(clock func() time.Time) WatermarkGenerator[T] {
	if s.newGenerator == nil {
		return nil
	}
	g := s.newGenerator()
	if g != nil && s.idleness > 0 {
		if clock == nil {
			clock = time.Now
		}
		g = &idlenessGenerator[T]{inner: g, timeout: s.idleness, clock: clock}
	}
	return g
}

type boundedOutOfOrderness[T any] struct {
	delay int64
	max   int64
	seen  bool
}

func (g *boundedOutOfOrderness[T]) OnEvent(_ T, ts int64, _ WatermarkOutput) {
	if ts == connector.NoTimestamp {
		return
	}
	if !g.seen || ts > g.max {
		g.max, g.seen = ts, true
	}
}

func (g *boundedOutOfOrderness[T]) OnPeriodicEmit(out WatermarkOutput) {
	if g.seen {
		out.EmitWatermark(g.max - g.delay - 1)
	}
}

// idlenessGenerator wraps a generator and marks its output idle after a
// quiet period. It counts events rather than reading the clock per event,
// and looks at the clock only at periodic emits. The clock is the source
// task's activity clock, which stands still while the task is
// backpressured (Flink's PausableRelativeClock): a quiet period is one in
// which the source could have read.
type idlenessGenerator[T any] struct {
	inner     WatermarkGenerator[T]
	timeout   time.Duration
	clock     func() time.Time
	events    uint64
	lastSeen  uint64
	quietFrom time.Time
	idle      bool
}

func (g *idlenessGenerator[T]) OnEvent(e T, ts int64, out WatermarkOutput) {
	g.events++
	if g.idle {
		g.idle = false
		out.MarkActive()
	}
	g.inner.OnEvent(e, ts, out)
}

func (g *idlenessGenerator[T]) OnPeriodicEmit(out WatermarkOutput) {
	now := g.clock()
	if g.events != g.lastSeen || g.quietFrom.IsZero() {
		g.lastSeen = g.events
		g.quietFrom = now
	}
	if now.Sub(g.quietFrom) >= g.timeout {
		if !g.idle {
			g.idle = true
			out.MarkIdle()
		}
		return
	}
	g.inner.OnPeriodicEmit(out)
}

// watermarkMux combines the watermarks of a reader's outputs (one per
// split, plus the reader-wide one once used) into the reader's watermark:
// the minimum over active outputs, never going back (Flink's
// WatermarkOutputMultiplexer and CombinedWatermarkStatus).
//
// When no output is active (all idle, or all splits finished and released)
// the reader is idle, so that it does not hold back event time downstream,
// and its watermark stays where the active outputs last put it: it does
// not jump to the fastest split's, so a lagging split that comes back in
// order is not late (Flink's CombinedWatermarkStatus marks the combined
// output idle the same way). A reader that has not
// received its first split yet is different: it holds time back (it is
// active without a watermark), because its first split may start behind
// the other readers and its records would otherwise all be late. It stops
// waiting when a split arrives, when it is told there will be none, or
// after the idleness timeout if the strategy has one. Likewise a split that
// was assigned but whose output the reader has not created yet holds time
// back, so that a reader creating outputs lazily (on its first record)
// cannot look idle in between.
type watermarkMux struct {
	outs    []*muxOutput
	last    int64
	idle    bool
	started bool
	// awaitingSplits: no split was ever assigned and no-more-splits has
	// not been signalled.
	awaitingSplits bool
	// pendingSplits are assigned splits without an output yet.
	pendingSplits map[string]struct{}
	emitWM        func(int64) error
	emitIdle      func(bool) error
	err           error
	// deferred: a periodic emit is under way, and the outputs' changes are
	// combined once it is over (Flink's deferred outputs): splits that go
	// idle in one pass go idle together, so none of them takes the reader
	// to a faster one's watermark in between, whatever order they are
	// asked in.
	deferred bool
}

type muxOutput struct {
	mux  *watermarkMux
	wm   int64
	idle bool
}

func (o *muxOutput) EmitWatermark(ts int64) {
	changed := o.idle || ts > o.wm
	o.idle = false
	if ts > o.wm {
		o.wm = ts
	}
	if changed {
		o.mux.update()
	}
}

func (o *muxOutput) MarkIdle() {
	if !o.idle {
		o.idle = true
		o.mux.update()
	}
}

func (o *muxOutput) MarkActive() {
	if o.idle {
		o.idle = false
		o.mux.update()
	}
}

// splitsAssigned records splits handed to the reader, before the reader
// creates their outputs.
func (m *watermarkMux) splitsAssigned(ids []string) {
	if m.pendingSplits == nil {
		m.pendingSplits = map[string]struct{}{}
	}
	for _, id := range ids {
		m.pendingSplits[id] = struct{}{}
	}
	m.awaitingSplits = false
}

// splitOutputCreated ends the wait for id's output.
func (m *watermarkMux) splitOutputCreated(id string) {
	delete(m.pendingSplits, id)
}

// mainOutputUsed tells that the reader emits on its reader-wide output:
// it does not use split outputs, so none is awaited.
func (m *watermarkMux) mainOutputUsed() {
	clear(m.pendingSplits)
}

func (m *watermarkMux) register() *muxOutput {
	m.awaitingSplits = false
	o := &muxOutput{mux: m, wm: noWatermark}
	m.outs = append(m.outs, o)
	m.update()
	return o
}

// stopAwaitingSplits ends the wait for a first split.
func (m *watermarkMux) stopAwaitingSplits() {
	if m.awaitingSplits {
		m.awaitingSplits = false
		m.update()
	}
}

func (m *watermarkMux) release(o *muxOutput) {
	for i, x := range m.outs {
		if x == o {
			m.outs = append(m.outs[:i], m.outs[i+1:]...)
			m.update()
			return
		}
	}
}

func (m *watermarkMux) update() {
	if m.err != nil || !m.started || m.deferred {
		return
	}
	min, active := noWatermark, m.awaitingSplits || len(m.pendingSplits) > 0
	for _, o := range m.outs {
		if o.idle {
			continue
		}
		if !active || o.wm < min {
			min = o.wm
		}
		active = true
	}
	if !active {
		// The reader goes idle where it stands. Taking time on to the
		// fastest split's watermark first would make late everything the
		// slower splits still hold: a lagging partition that goes quiet and
		// comes back with records in its own order would have them dropped
		// downstream. Downstream, an idle reader holds nothing back.
		if !m.idle {
			m.idle = true
			m.err = m.emitIdle(true)
		}
		return
	}
	if m.idle {
		m.idle = false
		if m.err = m.emitIdle(false); m.err != nil {
			return
		}
	}
	if min > m.last {
		m.last = min
		m.err = m.emitWM(min)
	}
}
