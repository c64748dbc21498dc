package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/window"
)

// The window operator is a keyed process function (windowFn) run by the
// keyed operator, so windows have nothing of their own to checkpoint,
// restore or rescale: per key,
//   - window contents: MapState "window-contents", window start ->
//     accumulator (for WindowProcess the count of records). Tumbling and
//     sliding windows of one assigner have one size, so the start names
//     the window;
//   - session ends: MapState "window-session-ends", start -> end, for
//     session windows, whose sizes vary. Sessions of a key never overlap,
//     so the start names one;
//   - the count of window.Count: ValueState "window-count";
//   - for WindowProcess, the records: ListState "window-records" of
//     (window start, record), appended to one record at a time (with the
//     pebble backend one DB entry each, where a list as one value would
//     be read and written whole by every record); a firing reads the
//     key's list and takes its window's records, a cleanup or a session
//     merge rewrites it;
//   - timers: an event-time (or, for processing-time windows,
//     processing-time) timer at each window's MaxTimestamp fires it, and
//     one at MaxTimestamp+allowed lateness removes its state (the same
//     timer when there is no lateness); processing-time timers on the
//     epoch-aligned early-firing period fire early results.
//
// Timers are never deleted: a session that grew or merged leaves timers
// at its old ends, which find no window ending there and do nothing.
// Deleting them would be wrong besides: a timer is a (key, time) pair,
// and another window of the key may need a timer at the same time (one's
// end, another's cleanup).

const (
	windowContentsState = "window-contents"
	windowEndsState     = "window-session-ends"
	windowCountState    = "window-count"
	windowRecordsState  = "window-records"
)

// windowSpec is what an aggregation gives the window operator: how to
// fold records into an accumulator A, merge two of them (sessions), and
// emit a result of type O.
type windowSpec[K comparable, T, A, O any] struct {
	kind   string // "count", ... for the operator's state signature
	create func() A
	add    func(A, T) (A, error)
	merge  func(A, A) (A, error)
	emit   func(ctx *KeyedContext[K, O], w window.Info[K], acc A, ts int64) error
	// emitList, set instead of emit, emits from the window's records,
	// which the operator then keeps in the "window-records" list.
	emitList func(ctx *KeyedContext[K, O], w window.Info[K], records []T, ts int64) error
	// emitMarked, set instead of emit and emitList, is emitList that also
	// gets, for each record, where it was when it last fired (firedIn):
	// the operator marks the window's records after each firing, so that
	// a function can tell what it emitted before (WindowJoin's pairs).
	emitMarked func(ctx *KeyedContext[K, O], w window.Info[K], records []T, fired []firedIn, ts int64) error
}

// firedIn says where a record of a window last fired: in the window that
// then started at Start, if Set. Two records that fired last in the same
// start were both in that window at that firing (see markFired), so
// whatever the function made of the two together was emitted then.
type firedIn struct {
	Start int64
	Set   bool
}

// windowed adds the window operator of ws and spec: a keyed operator
// whose function, one per subtask, is a windowFn.
func windowed[K comparable, T, A, O any](ws WindowedStream[K, T], spec windowSpec[K, T, A, O], errs ...error) DataStream[O] {
	a, opts := ws.assigner, ws.opts
	ds := KeyedProcessPerSubtask(ws.keyed, func() KeyedProcessFunction[K, T, O] { return nil })
	n := ds.node
	n.errs = append(n.errs, opts.errs...)
	n.errs = append(n.errs, errs...)
	if n.name == "KeyedProcess" {
		n.name = "Window"
	}
	late, lateSet := ws.late, ws.lateSet
	if lateSet {
		n.sideTags = append(n.sideTags, late.sideTag())
	}
	// The signature a restore compares: contents written by another
	// assigner or accumulator would be read as windows they are not.
	n.state = stateformat.WindowSignature(typeName[K](), a.String(), spec.kind, typeName[A]())
	build := n.build
	n.build = func(info engine.OpInfo, par int, out any) (engine.Lifecycle, any) {
		l, in := build(info, par, out)
		op := l.(*keyedProcessOperator[K, T, O])
		op.newFn = func() KeyedProcessFunction[K, T, O] {
			return &windowFn[K, T, A, O]{op: op, a: a, lateness: opts.lateness, early: opts.early, spec: spec, now: func() int64 { return op.state.Now() },
				late: late, lateSet: lateSet}
		}
		return l, in
	}
	return ds
}

// wallClock is the processing time of a job without a clock of its own
// (config.clock).
func wallClock() int64 { return time.Now().UnixMilli() }

// windowFn runs the windows of one operator subtask.
type windowFn[K comparable, T, A, O any] struct {
	op       *keyedProcessOperator[K, T, O]
	a        window.Assigner
	lateness int64
	early    int64
	spec     windowSpec[K, T, A, O]
	// now is the processing-time clock; tests set it.
	now func() int64
	// alwaysRegister registers a window's timers on every record, as
	// before they were registered once: for the benchmark's baseline.
	alwaysRegister bool
	// late is the late records' side output, if lateSet (WithSideOutputLateRecords).
	late    OutputTag[T]
	lateSet bool

	contents state.MapState[int64, A]
	ends     state.MapState[int64, int64]
	counts   state.ValueState[int64]
	records  state.ListState[windowRecord[T]]

	// dropped counts the records dropped as later than the allowed
	// lateness (droppedLate, for tests, and the metric).
	dropped     prometheus.Counter
	droppedLate int64

	buf   []window.TimeWindow
	fired []window.TimeWindow
	clean []window.TimeWindow
}

func (f *windowFn[K, T, A, O]) Open(ctx *KeyedContext[K, O]) error {
	var err error
	if f.contents, err = keyed.DeclareMap(ctx.op, windowContentsState, statecodec.For[int64](), statecodec.For[A](), nil); err != nil {
		return err
	}
	switch {
	case f.a.IsSession():
		if f.ends, err = keyed.DeclareMap(ctx.op, windowEndsState, statecodec.For[int64](), statecodec.For[int64](), nil); err != nil {
			return err
		}
	case f.a.IsCount():
		if f.counts, err = keyed.DeclareValue(ctx.op, windowCountState, statecodec.For[int64](), nil); err != nil {
			return err
		}
	}
	if f.spec.emitList != nil || f.spec.emitMarked != nil {
		if f.records, err = keyed.DeclareListNoTTL(ctx.op, windowRecordsState, windowRecordCodec[T](f.spec.emitMarked != nil)); err != nil {
			return err
		}
	}
	var t *task
	if f.op != nil {
		t = f.op.t
	}
	f.dropped = t.metricGroup(*ctx.info).Counter("window_late_records_dropped_total",
		"Records an event-time window operator dropped as later than its allowed lateness.")
	return nil
}

func (f *windowFn[K, T, A, O]) ProcessElement(ctx *KeyedContext[K, O], v T) error {
	if f.a.IsCount() {
		return f.addGlobal(ctx, v)
	}
	ts := f.now()
	if f.a.IsEventTime() {
		ts = ctx.Timestamp()
		if ts == connector.NoTimestamp {
			return &unrecoverableError{Err: fmt.Errorf("event-time window (%s): a record without a timestamp; give the source a watermark.Strategy with a timestamp assigner, or use a ProcessingTime window", f.a)}
		}
	}
	if f.a.IsSession() {
		return f.addSession(ctx, v, ts)
	}
	var err error
	if f.buf, err = f.a.Assign(ts, f.buf[:0]); err != nil {
		// The record fails again when replayed: fail the job rather than
		// restart it.
		return &unrecoverableError{Err: err}
	}
	placed := false
	for _, w := range f.buf {
		if f.isLate(ctx, w) {
			continue
		}
		placed = true
		acc, ok := f.contents.Get(w.Start)
		if !ok {
			acc = f.spec.create()
		}
		acc, err := f.spec.add(acc, v)
		if err != nil {
			return err
		}
		f.contents.Put(w.Start, acc)
		f.record(w.Start, v)
		if err := f.added(ctx, w, acc, !ok); err != nil {
			return err
		}
	}
	if !placed && len(f.buf) > 0 {
		f.dropLate(ctx, v)
	}
	return nil
}

// isLate reports that w's state is gone or going: the watermark passed
// its end plus the allowed lateness (processing-time windows are never
// late).
func (f *windowFn[K, T, A, O]) isLate(ctx *KeyedContext[K, O], w window.TimeWindow) bool {
	return f.a.IsEventTime() && f.cleanupAt(w) <= ctx.CurrentWatermark()
}

// cleanupAt is when w's state goes: MaxTimestamp plus the allowed
// lateness, saturated.
func (f *windowFn[K, T, A, O]) cleanupAt(w window.TimeWindow) int64 {
	c := w.MaxTimestamp() + f.lateness
	if c < w.MaxTimestamp() {
		return math.MaxInt64
	}
	return c
}

// dropLate drops v, a record later than the allowed lateness, to the
// late-data side output if there is one, at the record's timestamp.
func (f *windowFn[K, T, A, O]) dropLate(ctx *KeyedContext[K, O], v T) {
	f.droppedLate++
	f.dropped.Inc()
	if f.lateSet {
		Output(ctx, f.late, v)
	}
}

// added registers what window w, just updated to acc, needs: its firing
// (now, when the watermark is past its end already: a late record within
// the lateness), its cleanup and the early firing. Timers are registered
// when the window is new (fresh): a window in state had them registered
// by its first record, and they are still pending (its cleanup timer,
// the last of them, removes it), so registering them again would only
// cost a timer lookup, on pebble a write, per record. The early-firing
// timer of the key is pending too while any of its windows is open.
func (f *windowFn[K, T, A, O]) added(ctx *KeyedContext[K, O], w window.TimeWindow, acc A, fresh bool) error {
	fresh = fresh || f.alwaysRegister
	if f.a.IsProcessingTime() {
		if !fresh {
			return nil
		}
		ctx.RegisterProcessingTimeTimer(w.MaxTimestamp())
		return nil
	}
	if w.MaxTimestamp() <= ctx.CurrentWatermark() {
		if err := f.emit(ctx, w, acc, window.Late); err != nil {
			return err
		}
	} else if fresh {
		ctx.RegisterEventTimeTimer(w.MaxTimestamp())
		if f.early > 0 {
			ctx.RegisterProcessingTimeTimer(f.nextEarly(f.now()))
		}
	}
	if f.lateness > 0 && fresh {
		ctx.RegisterEventTimeTimer(f.cleanupAt(w))
	}
	return nil
}

// nextEarly is the first early-firing instant after now.
func (f *windowFn[K, T, A, O]) nextEarly(now int64) int64 {
	// Processing time, milliseconds since the epoch: never negative.
	return now - now%f.early + f.early
}

func (f *windowFn[K, T, A, O]) emit(ctx *KeyedContext[K, O], w window.TimeWindow, acc A, firing window.Firing) error {
	return f.emitInfo(ctx, window.Info[K]{Key: ctx.Key(), Window: w, Firing: firing}, acc, w.MaxTimestamp())
}

func (f *windowFn[K, T, A, O]) emitInfo(ctx *KeyedContext[K, O], info window.Info[K], acc A, ts int64) error {
	if f.spec.emitList == nil && f.spec.emitMarked == nil {
		return f.spec.emit(ctx, info, acc, ts)
	}
	var rs []T
	var fired []firedIn
	for r := range f.records.Get() {
		if r.Start == info.Window.Start {
			rs = append(rs, r.V)
			fired = append(fired, r.Fired)
		}
	}
	if f.spec.emitList != nil {
		return f.spec.emitList(ctx, info, rs, ts)
	}
	if err := f.spec.emitMarked(ctx, info, rs, fired, ts); err != nil {
		return err
	}
	f.markFired(info.Window.Start)
	return nil
}

// markFired marks the records of the window starting at start as fired
// in it. The marks are exact across session merges: a merged session's
// start is the least of its parts', and the starts its records fired in
// before lie within their own part, so records of two parts never share
// a mark they did not get from one firing together.
func (f *windowFn[K, T, A, O]) markFired(start int64) {
	var out []windowRecord[T]
	changed := false
	for r := range f.records.Get() {
		if r.Start == start && r.Fired != (firedIn{start, true}) {
			r.Fired, changed = firedIn{start, true}, true
		}
		out = append(out, r)
	}
	if changed {
		f.records.Update(out)
	}
}

// windowRecord is a record of WindowProcess's list, with the start of
// its window and, for emitMarked, where it last fired.
type windowRecord[T any] struct {
	Start int64
	V     T
	Fired firedIn
}

// record keeps v as a record of the window starting at start, for
// WindowProcess.
func (f *windowFn[K, T, A, O]) record(start int64, v T) {
	if f.records != nil {
		f.records.Add(windowRecord[T]{Start: start, V: v})
	}
}

// rewriteRecords rewrites the key's records: keep says whether one stays
// and under which window start.
func (f *windowFn[K, T, A, O]) rewriteRecords(keep func(start int64) (int64, bool)) {
	if f.records == nil {
		return
	}
	var out []windowRecord[T]
	changed := false
	for r := range f.records.Get() {
		s, ok := keep(r.Start)
		if ok {
			out = append(out, windowRecord[T]{Start: s, V: r.V, Fired: r.Fired})
		}
		changed = changed || !ok || s != r.Start
	}
	if changed {
		f.records.Update(out)
	}
}

// windowRecordCodec writes a windowRecord as varint(start) and the record
// in its type's default codec; marked, with its firedIn between them: a
// byte 0, or 1 and varint(start it fired in).
func windowRecordCodec[T any](marked bool) statecodec.Codec[windowRecord[T]] {
	s := windowRecordSerde[T]{c: statecodec.For[T](), marked: marked}
	return statecodec.Codec[windowRecord[T]]{ID: statecodec.IDUser, Ext: s, Name: s.Name()}
}

type windowRecordSerde[T any] struct {
	c      statecodec.Codec[T]
	marked bool
}

func (s windowRecordSerde[T]) Name() string {
	if s.marked {
		return "marked window record of " + s.c.String()
	}
	return "window record of " + s.c.String()
}

func (s windowRecordSerde[T]) Append(dst []byte, r windowRecord[T]) ([]byte, error) {
	dst = binary.AppendVarint(dst, r.Start)
	if s.marked {
		if r.Fired.Set {
			dst = binary.AppendVarint(append(dst, 1), r.Fired.Start)
		} else {
			dst = append(dst, 0)
		}
	}
	return statecodec.AppendOne(dst, s.c, r.V)
}

func (s windowRecordSerde[T]) Decode(b []byte) (windowRecord[T], error) {
	start, n := binary.Varint(b)
	if n <= 0 {
		return windowRecord[T]{}, engine.ErrShortState
	}
	r := windowRecord[T]{Start: start}
	b = b[n:]
	if s.marked {
		switch {
		case len(b) == 0:
			return r, engine.ErrShortState
		case b[0] == 1:
			fs, m := binary.Varint(b[1:])
			if m <= 0 {
				return r, engine.ErrShortState
			}
			r.Fired, b = firedIn{fs, true}, b[1+m:]
		case b[0] == 0:
			b = b[1:]
		default:
			return r, fmt.Errorf("window record: fired mark %d, want 0 or 1", b[0])
		}
	}
	var err error
	r.V, err = statecodec.ReadOne(b, s.c)
	return r, err
}

// addSession adds v at ts to the key's session that [ts, ts+gap) joins,
// merging the sessions it overlaps or touches.
func (f *windowFn[K, T, A, O]) addSession(ctx *KeyedContext[K, O], v T, ts int64) error {
	end := ts + f.a.Gap()
	if end < ts {
		end = math.MaxInt64
	}
	merged := window.TimeWindow{Start: ts, End: end}
	parts := f.buf[:0]
	for s, e := range f.ends.All() {
		// Flink's window.TimeWindow.intersects: touching sessions merge too.
		if s <= merged.End && e >= merged.Start {
			parts = append(parts, window.TimeWindow{Start: s, End: e})
		}
	}
	f.buf = parts
	for _, p := range parts {
		merged.Start, merged.End = min(merged.Start, p.Start), max(merged.End, p.End)
	}
	// A session still in state is not late (its cleanup timer has not
	// fired), and the merge ends no earlier: only a lone late record is.
	if f.isLate(ctx, merged) {
		f.dropLate(ctx, v)
		return nil
	}
	slices.SortFunc(parts, func(a, b window.TimeWindow) int { return cmpInt64(a.Start, b.Start) })
	acc := f.spec.create()
	for i, p := range parts {
		pa, ok := f.contents.Get(p.Start)
		if !ok {
			continue
		}
		if i == 0 {
			acc = pa
			continue
		}
		var err error
		if acc, err = f.spec.merge(acc, pa); err != nil {
			return err
		}
	}
	for _, p := range parts {
		f.contents.Remove(p.Start)
		f.ends.Remove(p.Start)
	}
	if len(parts) > 0 {
		f.rewriteRecords(func(s int64) (int64, bool) {
			for _, p := range parts {
				if p.Start == s {
					return merged.Start, true
				}
			}
			return s, true
		})
	}
	acc, err := f.spec.add(acc, v)
	if err != nil {
		return err
	}
	f.contents.Put(merged.Start, acc)
	f.ends.Put(merged.Start, merged.End)
	f.record(merged.Start, v)
	// A record inside a session leaves it as it was, timers and all; a
	// session that grew or merged has new ends.
	return f.added(ctx, merged, acc, len(parts) != 1 || parts[0] != merged)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// addGlobal adds v to the key's global window, firing it and starting
// over when it holds the count.
func (f *windowFn[K, T, A, O]) addGlobal(ctx *KeyedContext[K, O], v T) error {
	acc, ok := f.contents.Get(math.MinInt64)
	if !ok {
		acc = f.spec.create()
	}
	acc, err := f.spec.add(acc, v)
	if err != nil {
		return err
	}
	f.record(math.MinInt64, v)
	n, _ := f.counts.Value()
	if n+1 < f.a.CountOf() {
		f.contents.Put(math.MinInt64, acc)
		f.counts.Update(n + 1)
		return nil
	}
	f.contents.Remove(math.MinInt64)
	f.counts.Clear()
	w := window.TimeWindow{Start: math.MinInt64, End: math.MaxInt64}
	err = f.emitInfo(ctx, window.Info[K]{Key: ctx.Key(), Window: w, Firing: window.OnTime}, acc, ctx.Timestamp())
	if f.records != nil {
		f.records.Clear() // the global window is the key's only one
	}
	return err
}

func (f *windowFn[K, T, A, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	if t.Domain == ProcessingTime && f.a.IsEventTime() {
		return f.fireEarly(ctx, t.Timestamp)
	}
	// A window's end (event time, or processing time for processing-time
	// windows) or its cleanup.
	fired, clean := f.fired[:0], f.clean[:0]
	if f.a.IsSession() {
		for s, e := range f.ends.All() {
			w := window.TimeWindow{Start: s, End: e}
			if w.MaxTimestamp() == t.Timestamp {
				fired = append(fired, w)
			}
			if f.cleanupAt(w) == t.Timestamp {
				clean = append(clean, w)
			}
		}
	} else {
		if w, ok := f.fixedEndingAt(t.Timestamp); ok {
			fired = append(fired, w)
		}
		if f.lateness == 0 {
			clean = append(clean, fired...)
		} else if t.Timestamp >= math.MinInt64+f.lateness {
			if w, ok := f.fixedEndingAt(t.Timestamp - f.lateness); ok && f.cleanupAt(w) == t.Timestamp {
				clean = append(clean, w)
			}
		}
	}
	f.fired, f.clean = fired, clean
	for _, w := range fired {
		acc, ok := f.contents.Get(w.Start)
		if !ok {
			continue
		}
		if err := f.emit(ctx, w, acc, window.OnTime); err != nil {
			return err
		}
	}
	for _, w := range clean {
		f.contents.Remove(w.Start)
		if f.ends != nil {
			f.ends.Remove(w.Start)
		}
	}
	if len(clean) > 0 {
		f.rewriteRecords(func(s int64) (int64, bool) {
			for _, w := range clean {
				if w.Start == s {
					return s, false
				}
			}
			return s, true
		})
	}
	return nil
}

// fixedEndingAt is the tumbling or sliding window whose MaxTimestamp is
// maxTs, if the assigner has one.
func (f *windowFn[K, T, A, O]) fixedEndingAt(maxTs int64) (window.TimeWindow, bool) {
	return f.a.EndingAt(maxTs)
}

// fireEarly emits the partial result of every window of the key that has
// not fired on time yet, and asks for the next period while there is one.
func (f *windowFn[K, T, A, O]) fireEarly(ctx *KeyedContext[K, O], at int64) error {
	open := false
	for s, acc := range f.contents.All() {
		w := f.a.WindowAt(s)
		if f.ends != nil {
			e, ok := f.ends.Get(s)
			if !ok {
				continue
			}
			w = window.TimeWindow{Start: s, End: e}
		}
		if w.MaxTimestamp() <= ctx.CurrentWatermark() {
			continue
		}
		open = true
		if err := f.emit(ctx, w, acc, window.Early); err != nil {
			return err
		}
	}
	if open {
		// Behind the clock (a slow task, a restore), skip to the next
		// period rather than firing once per missed one.
		ctx.RegisterProcessingTimeTimer(f.nextEarly(max(at, f.now())))
	}
	return nil
}
