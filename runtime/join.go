package runtime

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/state"
)

// The interval join of two keyed streams, built on Connect's tagged
// inputs (connect.go): a keyed function that buffers each side by
// timestamp in map state and cleans the buffers with event-time timers
// (Flink's IntervalJoinOperator).

const (
	intervalLeftState  = "interval-join-left"
	intervalRightState = "interval-join-right"
)

// IntervalJoin joins two keyed streams of one key type on event time:
// for every pair of records x of first and y of second with the same key
// and y's timestamp in [x's + lower, x's + upper] (both bounds
// inclusive), it emits fn(x, y), with the larger of the two timestamps
// (Flink's interval join). Each pair is emitted once, by the second of
// the two to arrive.
//
// Both sides are buffered in keyed state by timestamp until the
// watermark passes what can still match them: a record x of first at
// time t is kept until the watermark reaches t + max(upper, 0), a record
// y of second at time t until it reaches t + max(-lower, 0); event-time
// timers then remove them, so the state holds only what a later record
// can still join. A record at or behind the operator's watermark is late
// (the watermark says none follows) and is dropped and counted in the
// metric splitflow_interval_join_late_records_dropped_total: with that
// rule every pair of records that are not late is joined, whatever order
// they arrive in. Records need timestamps: a record without one fails
// the job. There is no processing-time interval join.
//
// lower and upper must be whole milliseconds with lower <= upper; either
// may be negative. Other values fail the job's Execute with
// ErrInvalidGraph. The operator's default name (and so its default UID)
// is "IntervalJoin"; its records are kept in the encoding state.DefaultSerde
// gives A and B, so they must follow its rule.
func IntervalJoin[K comparable, A, B, O any](first KeyedStream[K, A], second KeyedStream[K, B], lower, upper time.Duration, fn func(x A, y B) (O, error)) DataStream[O] {
	var errs []error
	if fn == nil {
		errs = append(errs, errNilFunction("join function"))
	}
	if lower%time.Millisecond != 0 || upper%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("interval join bounds [%v, %v]: must be whole numbers of milliseconds, the unit of timestamps", lower, upper))
	}
	if lower > upper {
		errs = append(errs, fmt.Errorf("interval join bounds [%v, %v]: the lower bound is above the upper bound, so no pair would ever match", lower, upper))
	}
	lo, up := lower.Milliseconds(), upper.Milliseconds()
	ds := connected(Connect(first, second), "IntervalJoin", func() KeyedProcessFunction[K, either[A, B], O] { return nil })
	n := ds.node
	n.errs = append(n.errs, errs...)
	// The bounds are in the signature: a cleanup timer finds its entry
	// through them, so records buffered under other bounds would never
	// be removed; a restore with other bounds is refused instead.
	n.state = fmt.Sprintf("KeyedProcess[key=%s] IntervalJoin[%s, %s, %dms, %dms]", typeName[K](), typeName[A](), typeName[B](), lo, up)
	build := n.build
	n.build = func(info engine.OpInfo, par int, out any) (engine.Lifecycle, any) {
		l, in := build(info, par, out)
		op := l.(*keyedProcessOperator[K, either[A, B], O])
		op.newFn = func() KeyedProcessFunction[K, either[A, B], O] {
			return &intervalJoinFn[K, A, B, O]{op: op, lower: lo, upper: up, fn: fn}
		}
		return l, in
	}
	return ds
}

// intervalJoinFn is the interval join of one operator subtask.
type intervalJoinFn[K comparable, A, B, O any] struct {
	op           *keyedProcessOperator[K, either[A, B], O]
	lower, upper int64
	fn           func(A, B) (O, error)

	// left and right: per key, timestamp -> the records of that side at
	// that timestamp, in their order of arrival.
	left  state.MapState[int64, []A]
	right state.MapState[int64, []B]

	dropped     prometheus.Counter
	droppedLate int64
}

// declareBuffer declares a side's buffer: a map from timestamp to a
// list in the element's own codec (a built-in binary one for basic
// types), rather than gob of the whole slice.
func declareBuffer[T any, K comparable](ks *keyed.State[K], name string) (state.MapState[int64, []T], error) {
	elems := statecodec.For[T]()
	if elems.Bin == nil && elems.Ext == nil {
		if err := keyed.CheckStateTypes(name, keyed.StateType{Role: "record type", Type: reflect.TypeFor[T]()}); err != nil {
			return nil, err
		}
	}
	return keyed.DeclareMapNoTTL(ks, name, statecodec.For[int64](), keyed.ListCodec(elems))
}

func (f *intervalJoinFn[K, A, B, O]) Open(ctx *KeyedContext[K, O]) error {
	var err error
	if f.left, err = declareBuffer[A](ctx.op, intervalLeftState); err != nil {
		return err
	}
	if f.right, err = declareBuffer[B](ctx.op, intervalRightState); err != nil {
		return err
	}
	var t *task
	if f.op != nil {
		t = f.op.t
	}
	f.dropped = t.metricGroup(*ctx.info).Counter("interval_join_late_records_dropped_total",
		"Records an interval join dropped as late: at or behind its watermark.")
	return nil
}

func (f *intervalJoinFn[K, A, B, O]) ProcessElement(ctx *KeyedContext[K, O], e either[A, B]) error {
	ts := ctx.Timestamp()
	if ts == connector.NoTimestamp {
		return &unrecoverableError{Err: errors.New("interval join: a record without a timestamp; give the source a watermark.Strategy with a timestamp assigner")}
	}
	if ts <= ctx.CurrentWatermark() {
		f.droppedLate++
		f.dropped.Inc()
		return nil
	}
	if !e.Second {
		buf, _ := f.left.Get(ts)
		f.left.Put(ts, append(buf, e.L))
		for tb, ys := range f.right.All() {
			if tb < ts+f.lower || tb > ts+f.upper {
				continue
			}
			for _, y := range ys {
				if err := f.emit(ctx, e.L, y, max(ts, tb)); err != nil {
					return err
				}
			}
		}
		ctx.RegisterEventTimeTimer(ts + max(f.upper, 0))
		return nil
	}
	buf, _ := f.right.Get(ts)
	f.right.Put(ts, append(buf, e.R))
	for ta, xs := range f.left.All() {
		if ts < ta+f.lower || ts > ta+f.upper {
			continue
		}
		for _, x := range xs {
			if err := f.emit(ctx, x, e.R, max(ts, ta)); err != nil {
				return err
			}
		}
	}
	ctx.RegisterEventTimeTimer(ts + max(-f.lower, 0))
	return nil
}

func (f *intervalJoinFn[K, A, B, O]) emit(ctx *KeyedContext[K, O], x A, y B, ts int64) error {
	o, err := f.fn(x, y)
	if err != nil {
		return err
	}
	ctx.CollectWithTimestamp(o, ts)
	return nil
}

// OnTimer removes what the watermark, now at t or past it, leaves no
// partner for: the first side's records at t - max(upper, 0) and the
// second's at t - max(-lower, 0). One timer serves both sides when their
// cleanup times meet, as timers of one key and time fire once.
func (f *intervalJoinFn[K, A, B, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	f.left.Remove(t.Timestamp - max(f.upper, 0))
	f.right.Remove(t.Timestamp - max(-f.lower, 0))
	return nil
}
