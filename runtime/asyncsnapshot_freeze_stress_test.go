package runtime

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/state"
)

// deepModel is what the states of deepStates (raw and parts) should hold.
type deepModel struct {
	raw   map[string][]byte
	parts map[string]map[string][]int
}

func (m deepModel) clone() deepModel {
	out := deepModel{raw: map[string][]byte{}, parts: map[string]map[string][]int{}}
	for k, v := range m.raw {
		out.raw[k] = append([]byte(nil), v...)
	}
	for k, in := range m.parts {
		c := map[string][]int{}
		for uk, uv := range in {
			c[uk] = append([]int(nil), uv...)
		}
		out.parts[k] = c
	}
	return out
}

// Snapshots of states whose values the function changes in place hold the
// state as it was at their freeze, whatever the function does after it
// (in-place writes through Value, Get and All, Update, Put, Remove,
// Clear, on keys whose slots are copied, not yet copied, or already read
// by the encoder), and the live state keeps every write: random
// operations over rounds of freeze, concurrent encode and thaw.
func TestFrozenSnapshotEqualsStateAtFreezeUnderRandomInPlaceWrites(t *testing.T) {
	var d deepStates
	p, stop := openKeyed(t, nil, 1, 0, d.funcs())
	defer stop()
	rng := rand.New(rand.NewPCG(1, 2))
	model := deepModel{raw: map[string][]byte{}, parts: map[string]map[string][]int{}}
	const nkeys = 400
	key := func() string { return "k" + strconv.Itoa(rng.IntN(nkeys)) }
	op := func() {
		k := key()
		p.state.SetKey(k)
		switch rng.IntN(9) {
		case 0:
			if v, ok := d.raw.Value(); ok {
				v[0]++
				model.raw[k][0]++
			}
		case 1:
			v, _ := d.raw.Value()
			v = append(v, byte(rng.IntN(256)))
			d.raw.Update(v)
			model.raw[k] = append([]byte(nil), v...)
		case 2:
			v := []byte{byte(rng.IntN(256)), 1}
			d.raw.Update(v)
			model.raw[k] = append([]byte(nil), v...)
		case 3:
			d.raw.Clear()
			delete(model.raw, k)
		case 4:
			if v, ok := d.parts.Get("a"); ok {
				v[0]++
				model.parts[k]["a"][0]++
			}
		case 5:
			uk := []string{"a", "b", "c"}[rng.IntN(3)]
			v := []int{rng.IntN(100), 7}
			d.parts.Put(uk, v)
			if model.parts[k] == nil {
				model.parts[k] = map[string][]int{}
			}
			model.parts[k][uk] = append([]int(nil), v...)
		case 6:
			uk := []string{"a", "b", "c"}[rng.IntN(3)]
			d.parts.Remove(uk)
			if in := model.parts[k]; in != nil {
				delete(in, uk)
				if len(in) == 0 {
					delete(model.parts, k)
				}
			}
		case 7:
			for uk, v := range d.parts.All() {
				v[len(v)-1]++
				model.parts[k][uk][len(v)-1]++
			}
		case 8:
			d.parts.Clear()
			delete(model.parts, k)
		}
	}
	live := func() deepModel {
		return deepModel{raw: flatValue(d.raw), parts: flatMap(d.parts)}
	}
	for range 2000 {
		op()
	}
	for round := range 15 {
		want := model.clone()
		enc, err := p.FreezeState(int64(round + 1))
		if err != nil {
			t.Fatal(err)
		}
		for range rng.IntN(200) {
			op()
		}
		done := make(chan []byte, 1)
		errc := make(chan error, 1)
		go func() {
			b, _, err := enc(func() bool { return false })
			errc <- err
			done <- b
		}()
		for range 1000 {
			op()
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		blob := <-done
		for range rng.IntN(200) {
			op()
		}
		p.ThawState()
		if p.state.Err != nil {
			t.Fatal(p.state.Err)
		}
		if got := live(); !maps.EqualFunc(got.raw, model.raw, func(a, b []byte) bool { return string(a) == string(b) }) ||
			!reflect.DeepEqual(got.parts, model.parts) {
			t.Fatalf("round %d: the live state lost writes", round)
		}
		var e deepStates
		q, stopQ := openKeyed(t, [][]byte{blob}, 1, 0, e.funcs())
		got := deepModel{raw: flatValue(e.raw), parts: flatMap(e.parts)}
		stopQ()
		_ = q
		if !maps.EqualFunc(got.raw, want.raw, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("round %d: the snapshot's raw differs from the state at the freeze", round)
		}
		if !reflect.DeepEqual(got.parts, want.parts) {
			t.Fatalf("round %d: the snapshot's parts differ from the state at the freeze", round)
		}
	}
}

// flatValue and flatMap read a heap state's contents. The state is asserted
// to its type through any: asserted straight from ValueState[[]byte], a
// *keyed.HeapValue[string, []byte] fails with "types from different scopes"
// under Go 1.26.8 (through any, and for the map state, it holds).
func flatValue(s state.ValueState[[]byte]) map[string][]byte {
	return any(s).(*keyed.HeapValue[string, []byte]).Flat()
}

func flatMap(s state.MapState[string, []int]) map[string]map[string][]int {
	return any(s).(*keyed.HeapMap[string, string, []int]).Flat()
}
