package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/window"
)

// Windows on keyed streams (Flink's WindowedStream): Window groups a keyed
// stream's records, per key, into windows an assigner chooses, and an
// aggregation (WindowReduce, WindowAggregate, WindowCount, WindowProcess)
// emits one result per key and window when the window fires. Windows are
// built on the keyed operator: their contents are keyed state and their
// ends are timers, so they are checkpointed, restored, rescaled and kept on
// either state backend like any keyed state (windowop.go).

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
// updated result (window.Late); a record later than that is dropped and
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
// interval of processing time (window.Early), from its first record until
// it fires on time: for dashboards that cannot wait for the watermark.
// The periods are aligned to the epoch, so every key of a subtask fires
// at the same instants. Default: no early results.
func WithEarlyFiring(interval time.Duration) WindowOption {
	return windowOptionFunc(func(o *windowOptions) {
		if interval <= 0 || interval%time.Millisecond != 0 {
			o.errs = append(o.errs, fmt.Errorf("window early firing interval %v: must be a positive whole number of milliseconds", interval))
			return
		}
		o.early = interval.Milliseconds()
	})
}

// WindowedStream is a keyed stream with windows, to be aggregated by
// WindowReduce, WindowAggregate, WindowCount or WindowProcess.
type WindowedStream[K comparable, T any] struct {
	keyed    KeyedStream[K, T]
	assigner window.Assigner
	opts     windowOptions
	// late is the tag of WithSideOutputLateRecords, if lateSet.
	late    OutputTag[T]
	lateSet bool
}

// Window groups the records of each key into the windows assigner
// chooses. Invalid assigners and options fail the job's Execute with
// ErrInvalidGraph, naming what is wrong.
func Window[K comparable, T any](ks KeyedStream[K, T], assigner window.Assigner, opts ...WindowOption) WindowedStream[K, T] {
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
	case a.IsZero():
		ws.opts.errs = append(ws.opts.errs, errors.New("window assigner is the zero window.Assigner; make one with window.Tumbling, Sliding, Session or Count"))
	case a.Err() != nil:
		ws.opts.errs = append(ws.opts.errs, a.Err())
	}
	if ws.opts.lateness > 0 && !a.IsEventTime() {
		ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithAllowedLateness applies to event-time windows; %s has none", a))
	}
	if ws.opts.late != nil {
		if tag, ok := ws.opts.late.(OutputTag[T]); ok {
			ws.late, ws.lateSet = tag, true
		} else {
			ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithSideOutputLateRecords: the tag carries %s, but the window's records are %s: make the tag with NewOutputTag[%s]", ws.opts.lateType, typeName[T](), typeName[T]()))
		}
	}
	if ws.opts.early > 0 && !a.IsEventTime() {
		ws.opts.errs = append(ws.opts.errs, fmt.Errorf("WithEarlyFiring applies to event-time windows, not to %s", a))
	}
	return ws
}

// WindowReduce combines each window's records with fn, pairwise in their
// order of arrival, and emits the combination: a window of one record
// emits that record.
func WindowReduce[K comparable, T any](ws WindowedStream[K, T], fn func(a, b T) (T, error)) DataStream[window.Result[K, T]] {
	var errs []error
	if fn == nil {
		errs = append(errs, errNilFunction("reduce function"))
	}
	// The accumulator is the value so far and whether there is one, so
	// that the first record is kept as it is.
	spec := windowSpec[K, T, reduceAcc[T], window.Result[K, T]]{
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
		emit: func(ctx *KeyedContext[K, window.Result[K, T]], w window.Info[K], acc reduceAcc[T], ts int64) error {
			ctx.CollectWithTimestamp(window.Result[K, T]{Key: w.Key, Window: w.Window, Value: acc.V, Firing: w.Firing}, ts)
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
func WindowAggregate[K comparable, T, A, R any](ws WindowedStream[K, T], agg state.Aggregator[T, A, R]) DataStream[window.Result[K, R]] {
	var errs []error
	for _, name := range agg.Missing() {
		errs = append(errs, errNilFunction("aggregator's "+name))
	}
	if agg.Merge == nil && ws.assigner.IsSession() {
		errs = append(errs, errors.New("session windows merge accumulators: the aggregator needs a Merge function"))
	}
	spec := windowSpec[K, T, A, window.Result[K, R]]{
		kind:   "aggregate",
		create: agg.Create,
		add:    func(acc A, v T) (A, error) { return agg.Add(acc, v), nil },
		merge:  func(a, b A) (A, error) { return agg.Merge(a, b), nil },
		emit: func(ctx *KeyedContext[K, window.Result[K, R]], w window.Info[K], acc A, ts int64) error {
			ctx.CollectWithTimestamp(window.Result[K, R]{Key: w.Key, Window: w.Window, Value: agg.Result(acc), Firing: w.Firing}, ts)
			return nil
		},
	}
	return windowed(ws, spec, errs...)
}

// WindowCount emits the number of records in each window.
func WindowCount[K comparable, T any](ws WindowedStream[K, T]) DataStream[window.Result[K, int64]] {
	spec := windowSpec[K, T, int64, window.Result[K, int64]]{
		kind:   "count",
		create: func() int64 { return 0 },
		add:    func(n int64, _ T) (int64, error) { return n + 1, nil },
		merge:  func(a, b int64) (int64, error) { return a + b, nil },
		emit: func(ctx *KeyedContext[K, window.Result[K, int64]], w window.Info[K], n int64, ts int64) error {
			ctx.CollectWithTimestamp(window.Result[K, int64]{Key: w.Key, Window: w.Window, Value: n, Firing: w.Firing}, ts)
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
// window checkpointed in the encoding state.DefaultSerde gives []T: for
// results that need only a fold of the records, WindowAggregate keeps far
// less.
func WindowProcess[K comparable, T, O any](ws WindowedStream[K, T], fn func(w window.Info[K], records []T, out Collector[O]) error) DataStream[O] {
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
		emitList: func(ctx *KeyedContext[K, O], w window.Info[K], l []T, ts int64) error {
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
