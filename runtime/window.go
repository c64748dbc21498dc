package runtime

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Windows on keyed streams (Flink's WindowedStream): Window groups a keyed
// stream's records, per key, into windows an assigner chooses, and an
// aggregation (WindowReduce, WindowAggregate, WindowCount, WindowProcess)
// emits one result per key and window when the window fires. Windows are
// built on the keyed operator: their contents are keyed state and their
// ends are timers, so they are checkpointed, restored, rescaled and kept on
// either state backend like any keyed state (windowop.go).

// TimeWindow is the interval [Start, End) of a window, in milliseconds of
// the assigner's time domain. The global window of CountWindow is
// [math.MinInt64, math.MaxInt64).
type TimeWindow struct {
	Start, End int64
}

// MaxTimestamp is the largest timestamp in the window, End-1: the
// timestamp of the window's results, so that a downstream window of the
// same size and offset puts a result in the window it came from.
func (w TimeWindow) MaxTimestamp() int64 { return w.End - 1 }

func (w TimeWindow) String() string { return fmt.Sprintf("[%d,%d)", w.Start, w.End) }

// WindowFiring says why a window emitted a result.
type WindowFiring uint8

const (
	// WindowOnTime: the watermark (the clock, for processing time) passed
	// the window's end, or a count window reached its count. A window
	// fires on time once.
	WindowOnTime WindowFiring = iota + 1
	// WindowLate: a late record, within the allowed lateness, updated a
	// window that had fired; the result replaces the earlier one.
	WindowLate
	// WindowEarly: a periodic partial result before the window's end
	// (WithEarlyFiring).
	WindowEarly
)

func (f WindowFiring) String() string {
	switch f {
	case WindowOnTime:
		return "on-time"
	case WindowLate:
		return "late"
	case WindowEarly:
		return "early"
	default:
		return "unknown-firing"
	}
}

type windowShape uint8

const (
	shapeTumbling windowShape = iota + 1
	shapeSliding
	shapeSession
	shapeGlobal
)

// WindowAssigner chooses the windows of a record: Tumbling, Sliding,
// Session or CountWindow. Time windows follow event time (the records'
// timestamps and the watermark) unless ProcessingTime says otherwise. The
// zero value is invalid.
type WindowAssigner struct {
	shape  windowShape
	domain TimeDomain
	// size, slide, offset and gap in milliseconds; count for CountWindow.
	size, slide, offset, gap int64
	count                    int64
	err                      error
}

// wholeMillis converts d for an assigner's what, which must be positive
// and a whole number of milliseconds, the unit of timestamps.
func wholeMillis(what string, d time.Duration) (int64, error) {
	if d <= 0 || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("window %s %v: must be a positive whole number of milliseconds", what, d)
	}
	return d.Milliseconds(), nil
}

// Tumbling assigns each record to the one window of the given size that
// holds its timestamp: windows [k*size, (k+1)*size), aligned to the Unix
// epoch (WithOffset shifts them). Event time.
func Tumbling(size time.Duration) WindowAssigner {
	ms, err := wholeMillis("size", size)
	return WindowAssigner{shape: shapeTumbling, domain: EventTime, size: ms, slide: ms, err: err}
}

// Sliding assigns each record to every window of the given size that holds
// it, one starting every slide (Kafka Streams' hopping windows): a record
// is in ceil(size/slide) windows. A slide larger than the size leaves
// gaps whose records belong to no window and are dropped without being
// counted as late. Event time.
func Sliding(size, slide time.Duration) WindowAssigner {
	ms, err := wholeMillis("size", size)
	sl, err2 := wholeMillis("slide", slide)
	return WindowAssigner{shape: shapeSliding, domain: EventTime, size: ms, slide: sl, err: errors.Join(err, err2)}
}

// Session assigns each record to a session of its key: [ts, ts+gap),
// merged with every session of the key it overlaps or touches, so a
// session ends once its key has been quiet for gap. A record that falls
// between two sessions and reaches both merges them into one. Event time.
func Session(gap time.Duration) WindowAssigner {
	ms, err := wholeMillis("gap", gap)
	return WindowAssigner{shape: shapeSession, domain: EventTime, gap: ms, err: err}
}

// CountWindow puts all the records of a key in one window that fires every
// n records and then starts empty (Flink's countWindow(n), a tumbling
// count window over Flink's GlobalWindows): a key's last
// records, fewer than n, are never emitted, also not at the end of input.
// Its results carry the timestamp of the record that completed the count;
// their window is [math.MinInt64, math.MaxInt64).
func CountWindow(n int) WindowAssigner {
	a := WindowAssigner{shape: shapeGlobal, count: int64(n)}
	if n < 1 {
		a.err = fmt.Errorf("window count %d: must be at least 1", n)
	}
	return a
}

// WithOffset shifts tumbling and sliding windows by offset from the epoch:
// Tumbling(24*time.Hour).WithOffset(-8*time.Hour) has days that start at
// 08:00 UTC. The offset may be negative; its magnitude must be below the
// size (tumbling) or the slide (sliding).
func (a WindowAssigner) WithOffset(offset time.Duration) WindowAssigner {
	if a.shape != shapeTumbling && a.shape != shapeSliding {
		a.err = errors.Join(a.err, errors.New("WithOffset applies to tumbling and sliding windows"))
		return a
	}
	ms := offset.Milliseconds()
	switch {
	case offset%time.Millisecond != 0:
		a.err = errors.Join(a.err, fmt.Errorf("window offset %v: must be a whole number of milliseconds", offset))
	case a.slide > 0 && (ms >= a.slide || ms <= -a.slide):
		a.err = errors.Join(a.err, fmt.Errorf("window offset %v: its magnitude must be below the window's slide (%dms)", offset, a.slide))
	}
	a.offset = ms
	return a
}

// ProcessingTime makes a time window follow the wall clock of the subtask
// instead of event time: records are assigned by the time they arrive and
// windows fire when the clock passes their end, whatever the watermark.
// Results are then not reproducible: a replay after a failure, or a
// rescaled restore, assigns records by the time of the replay.
// Processing-time windows have no lateness; their windows that are still
// open when a bounded input ends are not emitted, as processing-time
// timers do not fire after the end of input.
func (a WindowAssigner) ProcessingTime() WindowAssigner {
	if a.shape == shapeGlobal {
		a.err = errors.Join(a.err, errors.New("ProcessingTime applies to time windows, not to CountWindow"))
		return a
	}
	a.domain = ProcessingTime
	return a
}

func (a WindowAssigner) String() string {
	var s string
	switch a.shape {
	case shapeTumbling:
		s = fmt.Sprintf("tumbling %dms", a.size)
	case shapeSliding:
		s = fmt.Sprintf("sliding %dms every %dms", a.size, a.slide)
	case shapeSession:
		s = fmt.Sprintf("session gap %dms", a.gap)
	case shapeGlobal:
		// "global count": the signature of the operator's state holds
		// this string, so it stays what checkpoints already name.
		return fmt.Sprintf("global count %d", a.count)
	default:
		return "invalid assigner"
	}
	if a.offset != 0 {
		s += fmt.Sprintf(" offset %dms", a.offset)
	}
	return s + " " + a.domain.String()
}

// windowStart is the start of the window of size and offset that holds ts;
// ok is false when that start lies below math.MinInt64. It never computes
// ts - offset, which wraps around near the limits: |offset| < size, so
// the two remainders differ by less than 2*size.
func windowStart(ts, offset, size int64) (start int64, ok bool) {
	r := (ts%size - offset%size) % size
	if r < 0 {
		r += size
	}
	if ts < math.MinInt64+r {
		return 0, false
	}
	return ts - r, true
}

// windowAt is the window starting at start of the assigner's size, its end
// saturated at math.MaxInt64.
func (a *WindowAssigner) windowAt(start int64) TimeWindow {
	end := start + a.size
	if end < start {
		end = math.MaxInt64
	}
	return TimeWindow{Start: start, End: end}
}

// assign appends the tumbling or sliding windows of ts to buf. It fails
// when one of them would start before math.MinInt64 or end after
// math.MaxInt64: such a window has no bounds to name it by, and one cut
// short at the limit would be another window than its assigner's.
func (a *WindowAssigner) assign(ts int64, buf []TimeWindow) ([]TimeWindow, error) {
	s, ok := windowStart(ts, a.offset, a.slide)
	if !ok {
		return buf, a.outOfRange(ts)
	}
	// A window starting at s holds ts while ts - s < size (ts - s stays
	// below size + slide, so it does not overflow where ts - size would).
	for ts-s < a.size {
		if s > math.MaxInt64-a.size {
			return buf, a.outOfRange(ts)
		}
		buf = append(buf, TimeWindow{Start: s, End: s + a.size})
		if s < math.MinInt64+a.slide {
			if ts-s+a.slide < a.size {
				return buf, a.outOfRange(ts) // the next one starts below the limit
			}
			break
		}
		s -= a.slide
	}
	return buf, nil
}

// outOfRange is the error of a record at ts whose window does not fit in
// int64 milliseconds. The record fails again when replayed, so the job
// fails rather than restarts.
func (a *WindowAssigner) outOfRange(ts int64) error {
	return &unrecoverableError{fmt.Errorf("window (%s): the record at %d belongs to a window that would start before math.MinInt64 or end after math.MaxInt64; timestamps are milliseconds since the Unix epoch: check the source's timestamp assigner, or filter such records out before the window", a, ts)}
}

// WindowOption configures Window.
type WindowOption interface {
	applyWindow(*windowOptions)
}

type windowOptions struct {
	// lateness and early in milliseconds; 0: none.
	lateness, early int64
	// late is the OutputTag[T] of WithSideOutputLateRecords, nil if none;
	// Window checks its T against the stream's.
	late     any
	lateType string
	errs     []error
}

type windowOptionFunc func(*windowOptions)

func (f windowOptionFunc) applyWindow(o *windowOptions) { f(o) }

// WithAllowedLateness keeps an event-time window's contents for d after the
// watermark passed its end (default 0: none). A record that arrives in
// that time adds to the window, which fires again at once with the
// updated result (WindowLate); a record later than that is dropped and
// counted in the metric splitflow_window_late_records_dropped_total (and
// sent to the side output of WithSideOutputLateRecords, if given). The window's
// state is removed once the watermark passes end-1+d.
func WithAllowedLateness(d time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		switch {
		case d < 0 || d%time.Millisecond != 0:
			o.errs = append(o.errs, fmt.Errorf("allowed lateness %v: must be zero or a positive whole number of milliseconds", d))
		default:
			o.lateness = d.Milliseconds()
		}
	})
}

// WithEarlyFiring makes an event-time window emit its partial result every
// interval of processing time (WindowEarly), from its first record until
// it fires on time: for dashboards that cannot wait for the watermark.
// The periods are aligned to the epoch, so every key of a subtask fires
// at the same instants. Default: no early results.
func WithEarlyFiring(interval time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		ms, err := wholeMillis("early firing interval", interval)
		if err != nil {
			o.errs = append(o.errs, err)
			return
		}
		o.early = ms
	})
}

// WindowedStream is a keyed stream with windows, to be aggregated by
// WindowReduce, WindowAggregate, WindowCount or WindowProcess.
type WindowedStream[K comparable, T any] struct {
	keyed    KeyedStream[K, T]
	assigner WindowAssigner
	opts     windowOptions
	// late is the tag of WithSideOutputLateRecords, if lateSet.
	late    OutputTag[T]
	lateSet bool
}

// Window groups the records of each key into the windows assigner
// chooses. Invalid assigners and options fail the job's Execute with
// ErrInvalidGraph, naming what is wrong.
func Window[K comparable, T any](ks KeyedStream[K, T], assigner WindowAssigner, opts ...WindowOption) WindowedStream[K, T] {
	ws := WindowedStream[K, T]{keyed: ks, assigner: assigner}
	for _, o := range opts {
		if o == nil {
			ws.opts.errs = append(ws.opts.errs, errNilFunction("window option"))
			continue
		}
		o.applyWindow(&ws.opts)
	}
	a := assigner
	switch {
	case a.shape == 0:
		ws.opts.errs = append(ws.opts.errs, errors.New("window assigner is the zero WindowAssigner; make one with Tumbling, Sliding, Session or CountWindow"))
	case a.err != nil:
		ws.opts.errs = append(ws.opts.errs, a.err)
	}
	if ws.opts.lateness > 0 && a.domain != EventTime {
		ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithAllowedLateness applies to event-time windows; %s has none", a))
	}
	if ws.opts.late != nil {
		if tag, ok := ws.opts.late.(OutputTag[T]); ok {
			ws.late, ws.lateSet = tag, true
		} else {
			ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithSideOutputLateRecords: the tag carries %s, but the window's records are %s: make the tag with NewOutputTag[%s]", ws.opts.lateType, typeName[T](), typeName[T]()))
		}
	}
	if ws.opts.early > 0 && a.domain != EventTime {
		ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithEarlyFiring applies to event-time windows, not to %s", a))
	}
	return ws
}

// WindowResult is one result of a window of key Key.
type WindowResult[K comparable, R any] struct {
	Key    K
	Window TimeWindow
	Value  R
	Firing WindowFiring
}

// WindowInfo is what WindowProcess's function knows of the window it is
// called for.
type WindowInfo[K comparable] struct {
	Key    K
	Window TimeWindow
	Firing WindowFiring
}

// WindowReduce combines each window's records with fn, pairwise in their
// order of arrival, and emits the combination: a window of one record
// emits that record.
func WindowReduce[K comparable, T any](ws WindowedStream[K, T], fn func(a, b T) (T, error)) DataStream[WindowResult[K, T]] {
	var errs []error
	if fn == nil {
		errs = append(errs, errNilFunction("reduce function"))
	}
	// The accumulator is the value so far and whether there is one, so
	// that the first record is kept as it is.
	spec := windowSpec[K, T, reduceAcc[T], WindowResult[K, T]]{
		kind:   "reduce",
		create: func() reduceAcc[T] { return reduceAcc[T]{} },
		add: func(acc reduceAcc[T], v T) (reduceAcc[T], error) {
			if !acc.Set {
				return reduceAcc[T]{V: v, Set: true}, nil
			}
			r, err := fn(acc.V, v)
			return reduceAcc[T]{V: r, Set: true}, err
		},
		merge: func(a, b reduceAcc[T]) (reduceAcc[T], error) {
			switch {
			case !a.Set:
				return b, nil
			case !b.Set:
				return a, nil
			}
			r, err := fn(a.V, b.V)
			return reduceAcc[T]{V: r, Set: true}, err
		},
		emit: func(ctx *KeyedContext[K, WindowResult[K, T]], w WindowInfo[K], acc reduceAcc[T], ts int64) error {
			ctx.CollectWithTimestamp(WindowResult[K, T]{Key: w.Key, Window: w.Window, Value: acc.V, Firing: w.Firing}, ts)
			return nil
		},
	}
	return windowed(ws, spec, errs...)
}

// reduceAcc is WindowReduce's accumulator.
type reduceAcc[T any] struct {
	V   T
	Set bool
}

// WindowAggregate folds each window's records with agg and emits
// agg.Result of the accumulator.
func WindowAggregate[K comparable, T, A, R any](ws WindowedStream[K, T], agg Aggregator[T, A, R]) DataStream[WindowResult[K, R]] {
	var errs []error
	for _, name := range agg.missing() {
		errs = append(errs, errNilFunction("aggregator's "+name))
	}
	if agg.Merge == nil && ws.assigner.shape == shapeSession {
		errs = append(errs, errors.New("session windows merge accumulators: the aggregator needs a Merge function"))
	}
	spec := windowSpec[K, T, A, WindowResult[K, R]]{
		kind:   "aggregate",
		create: agg.Create,
		add:    func(acc A, v T) (A, error) { return agg.Add(acc, v), nil },
		merge:  func(a, b A) (A, error) { return agg.Merge(a, b), nil },
		emit: func(ctx *KeyedContext[K, WindowResult[K, R]], w WindowInfo[K], acc A, ts int64) error {
			ctx.CollectWithTimestamp(WindowResult[K, R]{Key: w.Key, Window: w.Window, Value: agg.Result(acc), Firing: w.Firing}, ts)
			return nil
		},
	}
	return windowed(ws, spec, errs...)
}

// WindowCount emits the number of records in each window.
func WindowCount[K comparable, T any](ws WindowedStream[K, T]) DataStream[WindowResult[K, int64]] {
	spec := windowSpec[K, T, int64, WindowResult[K, int64]]{
		kind:   "count",
		create: func() int64 { return 0 },
		add:    func(n int64, _ T) (int64, error) { return n + 1, nil },
		merge:  func(a, b int64) (int64, error) { return a + b, nil },
		emit: func(ctx *KeyedContext[K, WindowResult[K, int64]], w WindowInfo[K], n int64, ts int64) error {
			ctx.CollectWithTimestamp(WindowResult[K, int64]{Key: w.Key, Window: w.Window, Value: n, Firing: w.Firing}, ts)
			return nil
		},
	}
	return windowed(ws, spec)
}

// WindowProcess calls fn with all the records of a window when it fires,
// in their order of arrival at the operator subtask, and the window's key,
// bounds and firing. A merged session's records too keep their order of
// arrival: a merge renames the window its parts' records belong to and
// moves none, so they are not grouped part by part. What fn collects carries the
// window's MaxTimestamp. The records are kept as keyed state, a list per
// window checkpointed in the encoding DefaultSerde gives []T: for
// results that need only a fold of the records, WindowAggregate keeps far
// less.
func WindowProcess[K comparable, T, O any](ws WindowedStream[K, T], fn func(w WindowInfo[K], records []T, out Collector[O]) error) DataStream[O] {
	var errs []error
	if fn == nil {
		errs = append(errs, errNilFunction("window process function"))
	}
	// The window's accumulator counts its records; the records are in
	// the operator's "window-records" list (windowop.go).
	spec := windowSpec[K, T, int64, O]{
		kind:   "process",
		create: func() int64 { return 0 },
		add:    func(n int64, _ T) (int64, error) { return n + 1, nil },
		merge:  func(a, b int64) (int64, error) { return a + b, nil },
		emitList: func(ctx *KeyedContext[K, O], w WindowInfo[K], l []T, ts int64) error {
			return fn(w, l, windowCollector[K, O]{ctx: ctx, ts: ts})
		},
	}
	return windowed(ws, spec, errs...)
}

// windowCollector emits a window function's results at the window's
// timestamp.
type windowCollector[K comparable, O any] struct {
	ctx *KeyedContext[K, O]
	ts  int64
}

func (c windowCollector[K, O]) Collect(v O) { c.ctx.CollectWithTimestamp(v, c.ts) }
