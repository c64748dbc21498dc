package runtime

import (
	"errors"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/internal/timers"
	"github.com/splitflow/splitflow/runtime/state"
)

// point is a state value type that has no built-in encoding.
type point struct{ X, Y int }

// openKeyed opens a keyed process operator over keys K (records are their
// own keys), subtask subtask of par, restoring blobs (one per old
// subtask) as operator "op"'s state. The returned stop shuts the task
// down.
func openKeyed[K comparable](t testing.TB, blobs [][]byte, par, subtask int, fn KeyedProcessFuncs[K, K, string]) (*keyedProcessOperator[K, K, string], func()) {
	t.Helper()
	p, stop, err := openKeyedErr(t, blobs, par, subtask, fn)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return p, stop
}

// openKeyedErr is openKeyed returning the operator's open error.
func openKeyedErr[K comparable](t testing.TB, blobs [][]byte, par, subtask int, fn KeyedProcessFuncs[K, K, string]) (*keyedProcessOperator[K, K, string], func(), error) {
	return openKeyedOn(t, stateConfig{backend: kindHeap}, blobs, par, subtask, fn)
}

// openKeyedOn is openKeyedErr with the state backend of sc.
func openKeyedOn[K comparable](t testing.TB, sc stateConfig, blobs [][]byte, par, subtask int, fn KeyedProcessFuncs[K, K, string]) (*keyedProcessOperator[K, K, string], func(), error) {
	t.Helper()
	hash, err := stableHasher[K]()
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox()}
	if len(blobs) > 0 {
		store, err := checkpoint.NewMemoryStorage()
		if err != nil {
			t.Fatal(err)
		}
		w, err := store.Begin(1)
		if err != nil {
			t.Fatal(err)
		}
		var hs []checkpoint.StateHandle
		for i, b := range blobs {
			h, err := w.WriteState(checkpoint.OperatorOwner("op", i), b)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		if err := w.Commit(checkpoint.Metadata{ID: 1, States: hs}); err != nil {
			t.Fatal(err)
		}
		chk, err := store.Load(1)
		if err != nil {
			t.Fatal(err)
		}
		tk.restored = &engine.RestoredState{Chk: chk}
	}
	p := &keyedProcessOperator[K, K, string]{info: engine.OpInfo{Name: "p", UID: "op", Subtask: subtask}, keyFn: func(k K) K { return k },
		hash: hash, par: par, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[K, K, string] { return fn }}
	err = openOp(p, tk)
	return p, func() { _ = tk.shutdown(); _ = p.Close() }, err
}

// fixtureStates declares the states of testdata/keyed-state-v2.bin:
// count (ValueState[int64]), seen (MapState[string, int64]) and, when
// withPoint, point (ValueState[point], which has no built-in encoding).
func fixtureStates(withPoint bool) KeyedProcessFuncs[string, string, string] {
	return KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) error {
			if _, err := state.NewValueState[int64]("count").Handle(ctx); err != nil {
				return err
			}
			if withPoint {
				if _, err := state.NewValueState[point]("point").Handle(ctx); err != nil {
					return err
				}
			}
			_, err := state.NewMapState[string, int64]("seen").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
}

// checkFixtureState checks that p holds the state of
// testdata/keyed-state-v2.bin: keys a, bb, ccc, dddd and eeeee (bb seen
// twice) with their counts, points and seen maps, and an event-time and a
// processing-time timer per key.
func checkFixtureState(t *testing.T, p *keyedProcessOperator[string, string, string], withPoint bool) {
	t.Helper()
	wantCount := map[string]int64{"a": 1, "bb": 4, "ccc": 3, "dddd": 4, "eeeee": 5}
	wantPoint := map[string]point{}
	wantSeen := map[string]map[string]int64{}
	var wantEvent, wantProc []timers.Entry[string]
	for k := range wantCount {
		n := len(k)
		wantPoint[k] = point{X: n, Y: -n}
		wantSeen[k] = map[string]int64{k + "-x": int64(n) * 10, k + "-y": -1}
		wantEvent = append(wantEvent, timers.Entry[string]{Ts: int64(1000 + n), Key: k})
		wantProc = append(wantProc, timers.Entry[string]{Ts: int64(1<<50 + n), Key: k})
	}
	if got := p.state.States["count"].(*keyed.HeapValue[string, int64]).Flat(); !maps.Equal(got, wantCount) {
		t.Errorf("count = %v, want %v", got, wantCount)
	}
	if withPoint {
		if got := p.state.States["point"].(*keyed.HeapValue[string, point]).Flat(); !maps.Equal(got, wantPoint) {
			t.Errorf("point = %v, want %v", got, wantPoint)
		}
	}
	if got := p.state.States["seen"].(*keyed.HeapMap[string, string, int64]).Flat(); !reflect.DeepEqual(got, wantSeen) {
		t.Errorf("seen = %v, want %v", got, wantSeen)
	}
	order := func(a, b timers.Entry[string]) int { return strings.Compare(a.Key, b.Key) }
	for _, q := range []struct {
		name string
		q    *timers.Queue[string]
		want []timers.Entry[string]
	}{{"event-time", &p.timers.event, wantEvent}, {"processing-time", &p.timers.processing, wantProc}} {
		got := allTimers(q.q)
		slices.SortFunc(got, order)
		slices.SortFunc(q.want, order)
		if !slices.Equal(got, q.want) {
			t.Errorf("%s timers = %v, want %v", q.name, got, q.want)
		}
	}
}

// A snapshot in the layout before the built-in encodings (version 2, all
// gob, written by the build before them: testdata/keyed-state-v2.bin)
// restores whole: values, maps, a gob-only type and timers; a new
// snapshot of it restores again; and an old entry that no state has
// claimed yet is carried over in its old format and still restores when
// its state is declared later.
func TestKeyedStateVersion2Restores(t *testing.T) {
	v2, err := os.ReadFile("testdata/keyed-state-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	p, stop := openKeyed(t, [][]byte{v2}, 1, 0, fixtureStates(true))
	defer stop()
	checkFixtureState(t, p, true)

	v3, err := p.SnapshotState(2)
	if err != nil {
		t.Fatal(err)
	}
	if v3[0] != stateformat.KeyedVersion {
		t.Fatalf("snapshot layout version %d, want %d", v3[0], stateformat.KeyedVersion)
	}
	p, stop = openKeyed(t, [][]byte{v3}, 1, 0, fixtureStates(true))
	defer stop()
	checkFixtureState(t, p, true)

	// point is not declared: its version 2 entries ride along.
	p, stop = openKeyed(t, [][]byte{v2}, 1, 0, fixtureStates(false))
	defer stop()
	carried, err := p.SnapshotState(3)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := keyed.DecodeEntries(carried)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if want := map[bool]byte{true: stateformat.FormatGob, false: stateformat.FormatColumns}[e.Name == "point"]; e.Format != want {
			t.Errorf("entry %s (key group %d) in format %d, want %d", e.Name, e.KeyGroup, e.Format, want)
		}
	}
	p, stop = openKeyed(t, [][]byte{carried}, 1, 0, fixtureStates(true))
	defer stop()
	checkFixtureState(t, p, true)
}

// The old layout rescales like the new: two subtasks restoring the
// version 2 snapshot split its key groups and timers between them, and
// together hold all of it.
func TestKeyedStateVersion2Rescales(t *testing.T) {
	v2, err := os.ReadFile("testdata/keyed-state-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	var blobs [][]byte
	for sub := range 2 {
		p, stop := openKeyed(t, [][]byte{v2}, 2, sub, fixtureStates(true))
		defer stop()
		b, err := p.SnapshotState(2)
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
		for k := range p.state.States["count"].(*keyed.HeapValue[string, int64]).Flat() {
			if g := p.state.GroupOf(k); keygroup.Subtask(g, 2, 128) != sub {
				t.Errorf("subtask %d of 2 restored key %q of key group %d", sub, k, g)
			}
		}
	}
	p, stop := openKeyed(t, blobs, 1, 0, fixtureStates(true))
	defer stop()
	checkFixtureState(t, p, true)
}

// The operator's snapshot brings back exactly what its states and keys
// hold: strings as values, map keys, map values and keys of the operator
// and its timers, and byte slices with nil and empty apart. Each type
// with a built-in encoding is tried in package keyed (values, maps) and
// package timers (keys); through the operator each type instantiates
// its states six times more, so two are enough here.
func TestOperatorSnapshotRoundTripsStatesAndKeys(t *testing.T) {
	roundTrip(t, []string{"", "a", "ünïcode", strings.Repeat("x", 300)})
	roundTripValues(t, [][]byte{nil, {}, {0, 1, 2}})
}

// roundTrip checks vs as values, map keys and map values, and as keys of
// the operator and of timers.
func roundTrip[T comparable](t *testing.T, vs []T) {
	t.Helper()
	roundTripValues(t, vs)
	declare := func(ctx *KeyedContext[string, string]) (state.MapState[T, T], error) {
		return state.NewMapState[T, T]("m").Handle(ctx)
	}
	var m state.MapState[T, T]
	fn := KeyedProcessFuncs[string, string, string]{
		Setup:   func(ctx *KeyedContext[string, string]) (err error) { m, err = declare(ctx); return err },
		Element: func(ctx *KeyedContext[string, string], _ string) error { return nil },
	}
	p, stop := openKeyed(t, nil, 1, 0, fn)
	defer stop()
	for i := range vs {
		p.state.SetKey("k" + string(rune('a'+i)))
		m.Put(vs[i], vs[(i+1)%len(vs)])
		m.Put(vs[(i+1)%len(vs)], vs[i])
	}
	want := maps.Clone(p.state.States["m"].(*keyed.HeapMap[string, T, T]).Flat())
	b, err := p.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	q, stop2 := openKeyed(t, [][]byte{b}, 1, 0, fn)
	defer stop2()
	if got := q.state.States["m"].(*keyed.HeapMap[string, T, T]).Flat(); !reflect.DeepEqual(got, want) {
		t.Errorf("%T map state: restored %v, want %v", vs, got, want)
	}
	if _, err := stableHasher[T](); err == nil {
		roundTripKeys(t, vs)
	}
}

// roundTripValues checks vs as values of a ValueState; reflect.DeepEqual
// tells a nil slice from an empty one.
func roundTripValues[T any](t *testing.T, vs []T) {
	t.Helper()
	var v state.ValueState[T]
	fn := KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) (err error) {
			v, err = state.NewValueState[T]("v").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
	p, stop := openKeyed(t, nil, 1, 0, fn)
	defer stop()
	for i, x := range vs {
		p.state.SetKey("k" + string(rune('a'+i)))
		v.Update(x)
	}
	b, err := p.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	q, stop2 := openKeyed(t, [][]byte{b}, 1, 0, fn)
	defer stop2()
	got := q.state.States["v"].(*keyed.HeapValue[string, T]).Flat()
	if len(got) != len(vs) {
		t.Fatalf("%T: restored %d values, want %d", vs, len(got), len(vs))
	}
	for i, x := range vs {
		k := "k" + string(rune('a'+i))
		if !reflect.DeepEqual(got[k], x) {
			t.Errorf("%T: key %s restored as %#v, want %#v", vs, k, got[k], x)
		}
	}
}

// roundTripKeys checks ks as keys of the operator's state and timers.
func roundTripKeys[K comparable](t *testing.T, ks []K) {
	t.Helper()
	var v state.ValueState[int]
	fn := KeyedProcessFuncs[K, K, string]{
		// Declared over K itself, as the engine's own states are, to
		// read its map by K below.
		Setup: func(ctx *KeyedContext[K, string]) (err error) {
			v, err = keyed.DeclareValue(ctx.op, "v", statecodec.For[int](), nil)
			return err
		},
		Element: func(ctx *KeyedContext[K, string], _ K) error {
			n, _ := v.Value()
			v.Update(n + 1)
			ctx.RegisterEventTimeTimer(int64(n))
			return nil
		},
	}
	p, stop := openKeyed(t, nil, 1, 0, fn)
	defer stop()
	for _, k := range ks {
		if err := p.Collect(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	want := maps.Clone(p.state.States["v"].(*keyed.HeapValue[K, int]).Flat())
	wantTimers := map[timers.Entry[K]]bool{}
	for _, e := range allTimers(&p.timers.event) {
		wantTimers[e] = true
	}
	b, err := p.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	q, stop2 := openKeyed(t, [][]byte{b}, 1, 0, fn)
	defer stop2()
	if got := q.state.States["v"].(*keyed.HeapValue[K, int]).Flat(); !maps.Equal(got, want) {
		t.Errorf("%T keys: restored %v, want %v", ks, got, want)
	}
	got := map[timers.Entry[K]]bool{}
	for _, e := range allTimers(&q.timers.event) {
		got[e] = true
	}
	for e := range wantTimers {
		if !got[e] {
			t.Errorf("%T keys: timer %v not restored", ks, e)
		}
	}
	if len(got) != len(wantTimers) {
		t.Errorf("%T keys: %d timers restored, want %d", ks, len(got), len(wantTimers))
	}
}

// A state whose type changed to one encoded otherwise fails the restore
// naming the state and both encodings, instead of misreading the bytes.
func TestChangedStateTypeFailsRestoreNamingIt(t *testing.T) {
	declare := func(f func(*KeyedContext[string, string]) error) KeyedProcessFuncs[string, string, string] {
		return KeyedProcessFuncs[string, string, string]{Setup: f, Element: func(*KeyedContext[string, string], string) error { return nil }}
	}
	var count state.ValueState[int64]
	p, stop := openKeyed(t, nil, 1, 0, declare(func(ctx *KeyedContext[string, string]) (err error) {
		count, err = state.NewValueState[int64]("count").Handle(ctx)
		return err
	}))
	defer stop()
	p.state.SetKey("a")
	count.Update(7)
	b, err := p.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	_, stop2, err := openKeyedErr(t, [][]byte{b}, 1, 0, declare(func(ctx *KeyedContext[string, string]) error {
		_, err := state.NewValueState[string]("count").Handle(ctx)
		return err
	}))
	defer stop2()
	var unrec *unrecoverableError
	if err == nil || !errors.As(err, &unrec) || !strings.Contains(err.Error(), `state "count"`) ||
		!strings.Contains(err.Error(), "checkpointed as signed integer") || !strings.Contains(err.Error(), "encoded as string") {
		t.Fatalf("restore of an int64 state as a string: err = %v", err)
	}
}
