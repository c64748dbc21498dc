package runtime

import (
	"reflect"
	goruntime "runtime"
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/state"
)

// deepPoint is a state value the function can change in place through a
// pointer: a field and a slice inside.
type deepPoint struct {
	X    int
	Tags []string
}

// deepStates declares states whose values the function can change in
// place: a byte slice, a map, a pointer to a struct holding a slice, and a
// MapState of slices.
type deepStates struct {
	raw   state.ValueState[[]byte]
	tally state.ValueState[map[string]int]
	pt    state.ValueState[*deepPoint]
	parts state.MapState[string, []int]
}

func (d *deepStates) funcs() KeyedProcessFuncs[string, string, string] {
	return KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) (err error) {
			if d.raw, err = state.NewValueState[[]byte]("raw").Handle(ctx); err != nil {
				return err
			}
			if d.tally, err = state.NewValueState[map[string]int]("tally").Handle(ctx); err != nil {
				return err
			}
			if d.pt, err = state.NewValueState[*deepPoint]("pt").Handle(ctx); err != nil {
				return err
			}
			d.parts, err = state.NewMapState[string, []int]("parts").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
}

type deepView struct {
	raw   map[string][]byte
	tally map[string]map[string]int
	pt    map[string]*deepPoint
	parts map[string]map[string][]int
}

func deepViewOf(p *keyedProcessOperator[string, string, string]) deepView {
	return deepView{
		raw:   p.state.States["raw"].(*keyed.HeapValue[string, []byte]).Flat(),
		tally: p.state.States["tally"].(*keyed.HeapValue[string, map[string]int]).Flat(),
		pt:    p.state.States["pt"].(*keyed.HeapValue[string, *deepPoint]).Flat(),
		parts: p.state.States["parts"].(*keyed.HeapMap[string, string, []int]).Flat(),
	}
}

// fillDeep gives each of n keys a value in every state of d.
func fillDeep(t testing.TB, p *keyedProcessOperator[string, string, string], d *deepStates, n, size int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		p.state.SetKey(keys[i])
		raw := make([]byte, size)
		for j := range raw {
			raw[j] = byte(i + j)
		}
		d.raw.Update(raw)
		d.tally.Update(map[string]int{"n": i})
		d.pt.Update(&deepPoint{X: i, Tags: []string{"a", "b"}})
		d.parts.Put("a", []int{i, i + 1})
		d.parts.Put("b", make([]int, size/8))
	}
	if p.state.Err != nil {
		t.Fatal(p.state.Err)
	}
	return keys
}

// The freeze of states whose values the function could change in place
// (slices, maps, pointers) does not encode them: its work, like that of
// states of plain values, does not follow the number of keys. The bytes it
// allocates are a small fraction of the state's.
func TestFreezeOfMutableValuesDoesNotEncodeThem(t *testing.T) {
	var d deepStates
	p, stop := openKeyed(t, nil, 1, 0, d.funcs())
	defer stop()
	const keys, size = 20_000, 64
	fillDeep(t, p, &d, keys, size)
	stateBytes := uint64(keys * size * 2) // raw and parts["b"] alone

	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	enc, err := p.FreezeState(1)
	goruntime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > stateBytes/16 {
		t.Fatalf("the freeze allocated %d bytes for %d keys (%d bytes of values): it encodes the state", n, keys, stateBytes)
	}
	blob, _, err := enc(func() bool { return false })
	p.ThawState()
	if err != nil {
		t.Fatal(err)
	}
	var e deepStates
	q, stopQ := openKeyed(t, [][]byte{blob}, 1, 0, e.funcs())
	defer stopQ()
	if got, want := deepViewOf(q), deepViewOf(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %d raw, %d tally, %d pt, %d parts; want %d each", len(got.raw), len(got.tally), len(got.pt), len(got.parts), keys)
	}
}

// A frozen snapshot of values that the function changes in place after
// the freeze (a byte written into a slice, a map's entry incremented with
// or without Update, a field through a pointer, an element of a MapState's
// slice, through Get and through All) holds them as they were at the
// freeze, while the live state holds the changes. Under the race detector
// the encoder runs concurrently with the writes.
func TestFrozenSnapshotUnchangedByInPlaceWrites(t *testing.T) {
	var d deepStates
	p, stop := openKeyed(t, nil, 1, 0, d.funcs())
	defer stop()
	keys := fillDeep(t, p, &d, 1000, 16)
	atFreeze, err := p.SnapshotState(0)
	if err != nil {
		t.Fatal(err)
	}

	enc, err := p.FreezeState(1)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		blob []byte
		err  error
	}
	encoded := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		b, _, err := enc(func() bool { return false })
		encoded <- result{b, err}
	}()
	<-started
	for i, k := range keys {
		p.state.SetKey(k)
		raw, _ := d.raw.Value()
		raw[0] ^= 0xff
		if i%2 == 0 {
			raw = append(raw[:1], 'z')
		}
		d.raw.Update(raw)
		m, _ := d.tally.Value()
		m["n"]++ // no Update: the heap backend's value is the map itself
		if i%3 == 0 {
			m["new"] = i
			d.tally.Update(m)
		}
		pt, _ := d.pt.Value()
		pt.X = -pt.X
		pt.Tags[0] = "changed"
		d.pt.Update(pt)
		a, _ := d.parts.Get("a")
		a[0] = -1
		d.parts.Put("a", a)
		for _, v := range d.parts.All() {
			if len(v) > 0 {
				v[len(v)-1] = 42
			}
		}
	}
	live := deepViewOf(p)
	r := <-encoded
	p.ThawState()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if p.state.Err != nil {
		t.Fatal(p.state.Err)
	}

	var e, f deepStates
	q, stopQ := openKeyed(t, [][]byte{r.blob}, 1, 0, e.funcs())
	defer stopQ()
	want, stopW := openKeyed(t, [][]byte{atFreeze}, 1, 0, f.funcs())
	defer stopW()
	got, wantView := deepViewOf(q), deepViewOf(want)
	for _, k := range keys {
		if !reflect.DeepEqual(got.raw[k], wantView.raw[k]) || !reflect.DeepEqual(got.tally[k], wantView.tally[k]) ||
			!reflect.DeepEqual(got.pt[k], wantView.pt[k]) || !reflect.DeepEqual(got.parts[k], wantView.parts[k]) {
			t.Fatalf("key %s: the snapshot holds writes made after the freeze:\nraw %v tally %v pt %+v parts %v\nwant raw %v tally %v pt %+v parts %v",
				k, got.raw[k], got.tally[k], got.pt[k], got.parts[k], wantView.raw[k], wantView.tally[k], wantView.pt[k], wantView.parts[k])
		}
	}
	if !reflect.DeepEqual(deepViewOf(p), live) {
		t.Fatal("the live state changed when the encoder finished")
	}
	// The live state holds every change.
	k := keys[3]
	if l := live; l.raw[k][0] != byte(3)^0xff || l.tally[k]["n"] != 4 || l.pt[k].X != -3 || l.pt[k].Tags[0] != "changed" ||
		l.parts[k]["a"][0] != -1 || l.parts[k]["a"][1] != 42 || l.parts[k]["b"][1] != 42 {
		t.Fatalf("live state of %s: raw %v tally %v pt %+v parts %v", k, l.raw[k], l.tally[k], l.pt[k], l.parts[k])
	}
	if l := live; string(l.raw[keys[2]]) != string([]byte{2 ^ 0xff, 'z'}) || l.tally[keys[3]]["new"] != 3 {
		t.Fatalf("live state: raw[%s] = %v, tally[%s] = %v", keys[2], l.raw[keys[2]], keys[3], l.tally[keys[3]])
	}
}
