package runtime

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/state"
)

// The event-time table join (Flink's event-time temporal table join,
// Kafka Streams' stream-table join over a versioned table), built on
// Connect's tagged inputs (connect.go) as the interval join is: a keyed
// function that buffers the stream's records and the table's versions by
// timestamp in map state and joins them when event-time timers say the
// watermark has passed. See DESIGN.md, "Two-input operators".

const (
	tableJoinRecordsState  = "table-join-records"
	tableJoinVersionsState = "table-join-versions"
)

// TableUpdate is one change of a table's row, the record type of a table
// joined by TableJoin or LeftTableJoin: Key's row becomes Value, or, if
// Deleted, is removed (Value is then ignored). A changelog such as a
// compacted Kafka topic maps onto it record by record: a record with a
// nil value (a tombstone) is a deletion, as the Kafka source's
// TableUpdates deserializer reads it.
type TableUpdate[K comparable, V any] struct {
	Key     K
	Value   V
	Deleted bool
}

// TableJoinOption configures TableJoin and LeftTableJoin.
type TableJoinOption interface {
	applyTableJoin(*tableJoinOptions)
}

type tableJoinOptions struct {
	// late is the OutputTag[A] of WithSideOutputLateRecords, nil if none;
	// the join checks its type against the stream's records.
	late     any
	lateType string
}

type tableJoinOptionFunc func(*tableJoinOptions)

func (f tableJoinOptionFunc) applyTableJoin(o *tableJoinOptions) { f(o) }

// TableJoin joins each record of stream with the value its key had in
// table at the record's event time (an inner join): a record x at time t
// is joined with the value of the latest update of its key with a
// timestamp at or before t (an update at exactly t counts), and fn(x, v)
// is emitted with timestamp t once the operator's watermark, the minimum
// of both inputs', reaches t. A record whose key has no value at t (never
// set yet, or deleted) emits nothing; LeftTableJoin emits those too.
//
// The table is the stream of its changes: read a compacted topic from
// its earliest offsets into TableUpdates, a tombstone as a deletion. The
// join keeps per key the table's value as of the watermark and the
// versions and records that the watermark has not reached yet, in keyed
// state, so it is checkpointed, restored and rescaled as any keyed state
// on either backend, and its output does not depend on how the two
// inputs interleave: at startup, while the table's topic is still being
// read from the beginning, stream records wait for the table's watermark
// instead of joining a table that is not loaded yet. The state holds one
// value per live key plus what lies within the watermark's lag.
//
// Because the watermark is the minimum of both inputs, a table side that
// goes quiet (a compacted topic often does) holds every join back unless
// its source has idleness (watermark.Strategy.WithIdleness): an idle input
// does not hold the watermark back, and the join goes on at the stream's
// pace with the table as it stands.
//
// A stream record at or behind the operator's watermark is late: its
// table value as of its time may already be gone, so it is dropped,
// counted in the metric splitflow_table_join_late_records_dropped_total
// and sent to the side output of WithSideOutputLateRecords, if given (the
// rule of the interval join and of windows). A table update at or behind
// the watermark (its input was idle, say) still updates the table: it
// replaces the key's current value unless that value is newer, and it is
// seen by every stream record not yet joined.
//
// Records of both sides need timestamps: one without fails the job. The
// table is keyed by TableUpdate.Key with the stream's key hash (KeyBy's,
// or the function of KeyByHashed). The operator's default name (and so
// its default UID) is "TableJoin"; its records and values are kept in
// the encoding state.DefaultSerde gives A and V, so they must follow its
// rule.
func TableJoin[K comparable, A, V, O any](stream KeyedStream[K, A], table DataStream[TableUpdate[K, V]], fn func(x A, v V) (O, error), opts ...TableJoinOption) DataStream[O] {
	var join func(A, V, bool) (O, error)
	if fn != nil {
		join = func(x A, v V, _ bool) (O, error) { return fn(x, v) }
	}
	return tableJoin(stream, table, "TableJoin", false, join, opts)
}

// LeftTableJoin is TableJoin that also emits the records whose key has
// no value in the table at their time (Kafka Streams' leftJoin of a
// stream with a table): fn gets ok false and the zero V for them. Its
// state is TableJoin's, so a job can move from one to the other keeping
// its state under the same UID. The operator's default name (and so its
// default UID) is "LeftTableJoin".
func LeftTableJoin[K comparable, A, V, O any](stream KeyedStream[K, A], table DataStream[TableUpdate[K, V]], fn func(x A, v V, ok bool) (O, error), opts ...TableJoinOption) DataStream[O] {
	return tableJoin(stream, table, "LeftTableJoin", true, fn, opts)
}

func tableJoin[K comparable, A, V, O any](stream KeyedStream[K, A], table DataStream[TableUpdate[K, V]], name string, outer bool, fn func(A, V, bool) (O, error), opts []TableJoinOption) DataStream[O] {
	var errs []error
	if fn == nil {
		errs = append(errs, errNilFunction("join function"))
	}
	var o tableJoinOptions
	for _, opt := range opts {
		if opt == nil {
			errs = append(errs, errNilFunction("table join option"))
			continue
		}
		opt.applyTableJoin(&o)
	}
	var late OutputTag[A]
	lateSet := false
	if o.late != nil {
		if tag, ok := o.late.(OutputTag[A]); ok {
			late, lateSet = tag, true
		} else {
			errs = append(errs, fmt.Errorf("WithSideOutputLateRecords: the tag carries %s, but the stream's records are %s: make the tag with NewOutputTag[%s]", o.lateType, typeName[A](), typeName[A]()))
		}
	}
	// The table is keyed as the stream is, so that a key meets its row
	// in the same key group whichever way the stream was keyed.
	rows := KeyedStream[K, TableUpdate[K, V]]{stream: table, keyFn: func(u TableUpdate[K, V]) K { return u.Key },
		hash: stream.hash, hashed: stream.hashed}
	ds := connected(Connect(stream, rows), name, func() KeyedProcessFunction[K, either[A, TableUpdate[K, V]], O] { return nil })
	n := ds.node
	n.errs = append(n.errs, errs...)
	if lateSet {
		n.sideTags = append(n.sideTags, late.sideTag())
	}
	// Inner and left joins keep the same state, so they share the
	// signature: a job may switch between them and keep its table.
	n.state = fmt.Sprintf("KeyedProcess[key=%s] TableJoin[%s, %s]", typeName[K](), typeName[A](), typeName[V]())
	build := n.build
	n.build = func(info engine.OpInfo, par int, out any) (engine.Lifecycle, any) {
		l, in := build(info, par, out)
		op := l.(*keyedProcessOperator[K, either[A, TableUpdate[K, V]], O])
		op.newFn = func() KeyedProcessFunction[K, either[A, TableUpdate[K, V]], O] {
			return &tableJoinFn[K, A, V, O]{op: op, outer: outer, fn: fn, late: late, lateSet: lateSet}
		}
		return l, in
	}
	return ds
}

// tableJoinFn is the table join of one operator subtask.
//
// Per key it keeps records, timestamp -> the stream's records at that
// timestamp still to join, in their order of arrival, and versions,
// timestamp -> the table's row as of that timestamp: a list of one value,
// or of none for a deletion. Every entry of either map has an event-time
// timer at its timestamp T; when it fires (the watermark has reached T)
// the records at T are joined with the latest version at or before T,
// and the versions at or before T collapse into that one, which goes too
// if it is a deletion. So between watermarks versions holds at most one
// entry at or behind the watermark (the key's current value), and the
// entries ahead of it.
type tableJoinFn[K comparable, A, V, O any] struct {
	op      *keyedProcessOperator[K, either[A, TableUpdate[K, V]], O]
	outer   bool
	fn      func(A, V, bool) (O, error)
	late    OutputTag[A]
	lateSet bool

	records  state.MapState[int64, []A]
	versions state.MapState[int64, []V]

	// stale collects the version timestamps a collapse removes, kept
	// between calls so that a collapse allocates nothing.
	stale []int64

	dropped     prometheus.Counter
	droppedLate int64
}

func (f *tableJoinFn[K, A, V, O]) Open(ctx *KeyedContext[K, O]) error {
	var err error
	if f.records, err = declareBuffer[A](ctx.op, tableJoinRecordsState); err != nil {
		return err
	}
	if f.versions, err = declareBuffer[V](ctx.op, tableJoinVersionsState); err != nil {
		return err
	}
	var t *task
	if f.op != nil {
		t = f.op.t
	}
	f.dropped = t.metricGroup(*ctx.info).Counter("table_join_late_records_dropped_total",
		"Stream records a table join dropped as late: at or behind its watermark.")
	return nil
}

func (f *tableJoinFn[K, A, V, O]) ProcessElement(ctx *KeyedContext[K, O], e either[A, TableUpdate[K, V]]) error {
	ts := ctx.Timestamp()
	if ts == connector.NoTimestamp {
		side := "stream"
		if e.Second {
			side = "table"
		}
		return &unrecoverableError{Err: fmt.Errorf("table join: a %s record without a timestamp; give its source a watermark.Strategy with a timestamp assigner", side)}
	}
	wm := ctx.CurrentWatermark()
	if !e.Second {
		if ts <= wm {
			f.droppedLate++
			f.dropped.Inc()
			if f.lateSet {
				Output(ctx, f.late, e.L)
			}
			return nil
		}
		buf, _ := f.records.Get(ts)
		f.records.Put(ts, append(buf, e.L))
		ctx.RegisterEventTimeTimer(ts)
		return nil
	}
	var row []V
	if !e.R.Deleted {
		row = []V{e.R.Value}
	}
	if ts > wm {
		// A later update at the same timestamp wins, as in the topic.
		f.versions.Put(ts, row)
		ctx.RegisterEventTimeTimer(ts)
		return nil
	}
	// Behind the watermark: every record it could still meet is ahead of
	// the watermark, so it is the key's current value if it is not older
	// than the one it would replace. A deletion that was collapsed away
	// is forgotten, so an update older than it is taken (see DESIGN.md).
	cur, _, has := f.collapse(wm)
	if has && cur > ts {
		return nil
	}
	if has {
		f.versions.Remove(cur)
	}
	if row != nil {
		f.versions.Put(ts, row)
	}
	return nil
}

// collapse removes the versions at or before t but the latest of them,
// and that one too if it is a deletion. It returns the latest's
// timestamp and value if it is kept.
func (f *tableJoinFn[K, A, V, O]) collapse(t int64) (int64, V, bool) {
	latest, found := int64(math.MinInt64), false
	var row []V
	f.stale = f.stale[:0]
	for ts, r := range f.versions.All() {
		if ts > t {
			continue
		}
		if found {
			if ts < latest {
				f.stale = append(f.stale, ts)
				continue
			}
			f.stale = append(f.stale, latest)
		}
		latest, row, found = ts, r, true
	}
	for _, ts := range f.stale {
		f.versions.Remove(ts)
	}
	var v V
	if !found {
		return 0, v, false
	}
	if len(row) == 0 {
		f.versions.Remove(latest)
		return 0, v, false
	}
	return latest, row[0], true
}

// OnTimer joins the records at the timer's time T with the table as of
// T, then collapses the versions at or before T: the watermark has
// reached T, so no record at or before T is still to come, and every
// later record sees the latest of them or a newer one.
func (f *tableJoinFn[K, A, V, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	_, v, ok := f.collapse(t.Timestamp)
	xs, has := f.records.Get(t.Timestamp)
	if !has {
		return nil
	}
	f.records.Remove(t.Timestamp)
	if !ok && !f.outer {
		return nil
	}
	for _, x := range xs {
		o, err := f.fn(x, v, ok)
		if err != nil {
			return err
		}
		ctx.CollectWithTimestamp(o, t.Timestamp)
	}
	return nil
}
