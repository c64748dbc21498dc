package runtime

import (
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/state"
)

// winOut is what a window operator emitted: values with their timestamps.
type winOut[O any] struct {
	vals []O
	ts   []int64
	wms  []int64
}

func (r *winOut[O]) Collect(v O, ts int64) error {
	r.vals, r.ts = append(r.vals, v), append(r.ts, ts)
	return nil
}
func (r *winOut[O]) EmitWatermark(wm int64) error { r.wms = append(r.wms, wm); return nil }
func (r *winOut[O]) EmitStatus(bool) error        { return nil }

func (r *winOut[O]) take() []O {
	v := r.vals
	r.vals, r.ts = nil, nil
	return v
}

// winTestFn is the window function's face for tests, whatever its types.
type winTestFn interface {
	setClock(now func() int64)
	lateDropped() int64
}

func (f *windowFn[K, T, A, O]) setClock(now func() int64) { f.now = now }
func (f *windowFn[K, T, A, O]) lateDropped() int64        { return f.droppedLate }

// winOp is a window operator opened by hand, its processing-time clock
// the test's.
type winOp[K comparable, T, O any] struct {
	p     *keyedProcessOperator[K, T, O]
	out   *winOut[O]
	clock int64
	stop  func()
}

// winStream makes the window stream mk builds over a keyed stream of T
// by keyFn, for openWin.
func winStream[K comparable, T, O any](keyFn func(T) K, mk func(KeyedStream[K, T]) DataStream[O]) DataStream[O] {
	env := NewEnvironment()
	src := DataStream[T]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[T]{}})}
	return mk(KeyBy(src, keyFn))
}

// openWin opens subtask sub of par of the window operator of ds on state
// config sc, restored from chk if not nil, as operator "op".
func openWin[K comparable, T, O any](t testing.TB, ds DataStream[O], sc stateConfig, chk *checkpoint.Checkpoint, par, sub int) *winOp[K, T, O] {
	t.Helper()
	return openWinSides[K, T](t, ds, sc, chk, par, sub, nil)
}

// openWinSides is openWin with the operator's side outputs sides.
func openWinSides[K comparable, T, O any](t testing.TB, ds DataStream[O], sc stateConfig, chk *checkpoint.Checkpoint, par, sub int, sides *sideOutputs) *winOp[K, T, O] {
	t.Helper()
	if len(ds.node.errs) > 0 {
		t.Fatalf("window stream: %v", ds.node.errs[0])
	}
	w := &winOp[K, T, O]{out: &winOut[O]{}, clock: 1 << 50}
	l, _ := ds.node.build(engine.OpInfo{Name: "win", UID: "op", Subtask: sub, Sides: sides}, par, engine.Output[O](w.out))
	w.p = l.(*keyedProcessOperator[K, T, O])
	tk := &task{name: "win", head: &engine.OpInfo{Name: "win"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox()}
	if chk != nil {
		tk.restored = &engine.RestoredState{Chk: chk}
	}
	w.stop = func() { _ = tk.shutdown(); _ = w.p.Close() }
	if err := openOp(w.p, tk); err != nil {
		w.stop()
		t.Fatal(err)
	}
	w.fn().setClock(func() int64 { return w.clock })
	return w
}

func (w *winOp[K, T, O]) fn() winTestFn { return w.p.fn.(winTestFn) }

func (w *winOp[K, T, O]) add(t testing.TB, v T, ts int64) {
	t.Helper()
	if err := w.p.Collect(v, ts); err != nil {
		t.Fatal(err)
	}
}

func (w *winOp[K, T, O]) watermark(t testing.TB, wm int64) {
	t.Helper()
	if err := w.p.EmitWatermark(wm); err != nil {
		t.Fatal(err)
	}
}

// advance sets the processing-time clock to now and fires the
// processing-time timers due by it, as the task's timer would.
func (w *winOp[K, T, O]) advance(t testing.TB, now int64) {
	t.Helper()
	w.clock = now
	for {
		e, ok := w.p.timers.processing.Peek()
		if !ok || e.Ts > now {
			return
		}
		w.p.timers.processing.Pop()
		if err := w.p.fire(e, ProcessingTime, engine.NoTimestampForProcessingTime); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot takes checkpoint id of the operator into storage.
func (w *winOp[K, T, O]) snapshot(t testing.TB, storage checkpoint.Storage, id int64) ([]byte, []checkpoint.FileHandle) {
	t.Helper()
	if w.p.state.Pebble != nil {
		w.p.state.Pebble.Storage = storage
	}
	enc, err := w.p.FreezeState(id)
	if err != nil {
		t.Fatal(err)
	}
	blob, files, err := enc(func() bool { return false })
	w.p.ThawState()
	if err != nil {
		t.Fatal(err)
	}
	return blob, files
}

// timersLeft counts the operator's pending timers.
func (w *winOp[K, T, O]) timersLeft() int {
	return len(allTimers(&w.p.timers.event)) + len(allTimers(&w.p.timers.processing))
}

// keysInState counts the keys among keys with any window state, through
// the states themselves on either backend, and on the heap backend also
// every key the state maps hold.
func (w *winOp[K, T, O]) keysInState(t testing.TB, keys []K) int {
	t.Helper()
	n, pairs := 0, 0
	for _, k := range keys {
		w.p.state.SetKey(k)
		has := false
		for _, name := range []string{windowContentsState, windowEndsState, windowCountState, windowRecordsState} {
			s, ok := w.p.state.States[name]
			if !ok {
				continue
			}
			if l, ok := s.(interface{ Len() int }); ok && l.Len() > 0 {
				has = true
				pairs++
			}
			if v, ok := s.(state.ValueState[int64]); ok {
				if _, ok := v.Value(); ok {
					has = true
					pairs++
				}
			}
		}
		if has {
			n++
		}
	}
	if w.p.state.Err != nil {
		t.Fatal(w.p.state.Err)
	}
	if w.p.state.Pebble == nil {
		heap := 0
		for _, s := range w.p.state.States {
			if c, ok := s.(interface{ HeapKeys() int }); ok {
				heap += c.HeapKeys()
			}
		}
		if heap != pairs {
			t.Fatalf("heap state holds %d keys' states, %d of them of known keys", heap, pairs)
		}
	}
	return n
}
