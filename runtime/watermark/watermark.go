// Package watermark says how a source assigns event timestamps and tracks
// event time: a Strategy, given to runtime.FromSource with
// runtime.WithWatermarks, makes a Generator per split that turns the
// timestamps it sees into watermarks, as Flink's WatermarkStrategy does.
//
//	clicks := runtime.FromSource(env, src, "clicks", runtime.WithWatermarks(
//		watermark.ForBoundedOutOfOrderness[Click](5*time.Second).
//			WithTimestampAssigner(func(c Click, _ int64) int64 { return c.At }).
//			WithIdleness(time.Minute)))
//
// A watermark t declares that no more events with a timestamp at or
// before t are expected; windows and event-time timers fire on it. A
// reader's watermark is the minimum over its active splits, and an
// operator's the minimum over its active inputs.
package watermark

import (
	"math"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// Max is the watermark a source emits when its input ends: event time has
// reached the end of time, so every pending event-time timer fires. It
// matches Flink's Watermark.MAX_WATERMARK.
const Max int64 = math.MaxInt64

// Output is where a Generator reports progress. It is valid only during
// the call it was passed to.
type Output interface {
	// EmitWatermark declares that no more events with a timestamp at or
	// before ts are expected. Watermarks that do not advance are ignored.
	EmitWatermark(ts int64)
	// MarkIdle declares that no events are coming for a while, so this
	// output must not hold back the combined watermark.
	MarkIdle()
	// MarkActive reverses MarkIdle; an event does so as well.
	MarkActive()
}

// Generator turns the event timestamps a source sees into watermarks, as
// Flink's WatermarkGenerator does. Each split of a source reader gets its
// own generator (see Strategy), and the reader's watermark is the minimum
// over its active splits.
//
// Both methods run on the source's task goroutine.
type Generator[T any] interface {
	// OnEvent sees every record with its timestamp. A generator that
	// derives watermarks from special records (punctuated) emits here.
	OnEvent(event T, timestamp int64, out Output)
	// OnPeriodicEmit is called every auto-watermark interval (see
	// runtime.WithAutoWatermarkInterval). Most generators emit here:
	// emitting per record would flush network buffers per record.
	OnPeriodicEmit(out Output)
}

// Strategy says how a source assigns event timestamps and generates
// watermarks; give it to runtime.FromSource with runtime.WithWatermarks.
// The zero value is None, FromSource's default: records keep the
// timestamps the reader gives them and no watermark is generated (a
// bounded source still emits Max when it ends).
type Strategy[T any] struct {
	newGenerator func() Generator[T]
	assigner     func(event T, recordTimestamp int64) int64
	idleness     time.Duration
}

// None generates no watermarks: for jobs that use processing time only.
func None[T any]() Strategy[T] { return Strategy[T]{} }

// ForBoundedOutOfOrderness emits, periodically, the largest timestamp seen
// minus maxOutOfOrderness minus one millisecond: events may arrive up to
// maxOutOfOrderness late (Flink's BoundedOutOfOrdernessWatermarks).
func ForBoundedOutOfOrderness[T any](maxOutOfOrderness time.Duration) Strategy[T] {
	delay := maxOutOfOrderness.Milliseconds()
	return Strategy[T]{newGenerator: func() Generator[T] {
		return &boundedOutOfOrderness[T]{delay: delay}
	}}
}

// ForMonotonousTimestamps is ForBoundedOutOfOrderness(0): timestamps never
// decrease within a split.
func ForMonotonousTimestamps[T any]() Strategy[T] {
	return ForBoundedOutOfOrderness[T](0)
}

// ForGenerator uses a custom generator; newGenerator is called once per
// split (and once for records emitted on the reader-wide output).
func ForGenerator[T any](newGenerator func() Generator[T]) Strategy[T] {
	return Strategy[T]{newGenerator: newGenerator}
}

// WithTimestampAssigner sets the function that gives each record its event
// timestamp; recordTimestamp is the one the reader attached
// (connector.NoTimestamp if none).
func (s Strategy[T]) WithTimestampAssigner(assign func(event T, recordTimestamp int64) int64) Strategy[T] {
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
func (s Strategy[T]) WithIdleness(timeout time.Duration) Strategy[T] {
	s.idleness = timeout
	return s
}

// TimestampAssigner is the function WithTimestampAssigner set, nil if none:
// the source then keeps the reader's timestamps.
func (s Strategy[T]) TimestampAssigner() func(event T, recordTimestamp int64) int64 {
	return s.assigner
}

// Generates reports whether the strategy makes generators: every strategy
// but None does.
func (s Strategy[T]) Generates() bool { return s.newGenerator != nil }

// Idleness is the timeout WithIdleness set, 0 if none.
func (s Strategy[T]) Idleness() time.Duration { return s.idleness }

// Generator makes a split's generator, nil for None. clock is what
// idleness is measured on; nil means the wall clock. The source passes
// its task's activity clock, which stands still while the task is
// backpressured.
func (s Strategy[T]) Generator(clock func() time.Time) Generator[T] {
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

func (g *boundedOutOfOrderness[T]) OnEvent(_ T, ts int64, _ Output) {
	if ts == connector.NoTimestamp {
		return
	}
	if !g.seen || ts > g.max {
		g.max, g.seen = ts, true
	}
}

func (g *boundedOutOfOrderness[T]) OnPeriodicEmit(out Output) {
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
	inner     Generator[T]
	timeout   time.Duration
	clock     func() time.Time
	events    uint64
	lastSeen  uint64
	quietFrom time.Time
	idle      bool
}

func (g *idlenessGenerator[T]) OnEvent(e T, ts int64, out Output) {
	g.events++
	if g.idle {
		g.idle = false
		out.MarkActive()
	}
	g.inner.OnEvent(e, ts, out)
}

func (g *idlenessGenerator[T]) OnPeriodicEmit(out Output) {
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
