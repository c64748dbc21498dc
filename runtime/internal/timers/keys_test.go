package timers

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Every key type with a built-in encoding comes back exactly from a heap
// snapshot, as the key of a state and of timers, each in its key group.
// The states are declared over the key type itself, as the engine's own
// states are; a descriptor's states see the key through a view that
// keeps its codec (package keyed). Floats are not here: they have no
// stable hash, so a float key comes with the user's (KeyByHashed).
func TestBuiltinKeyEncodingsRoundTrip(t *testing.T) {
	type word string
	type level uint16
	keysRoundTrip(t, []string{"", "a", "ünïcode", strings.Repeat("x", 300)})
	keysRoundTrip(t, []word{"", "w"})
	keysRoundTrip(t, []int{math.MinInt, -1, 0, math.MaxInt})
	keysRoundTrip(t, []int8{math.MinInt8, 0, math.MaxInt8})
	keysRoundTrip(t, []int16{math.MinInt16, 1, math.MaxInt16})
	keysRoundTrip(t, []int32{math.MinInt32, -7, math.MaxInt32})
	keysRoundTrip(t, []int64{math.MinInt64, 0, math.MaxInt64})
	keysRoundTrip(t, []time.Duration{-time.Second, time.Hour})
	keysRoundTrip(t, []uint{0, math.MaxUint})
	keysRoundTrip(t, []uint8{0, math.MaxUint8})
	keysRoundTrip(t, []uint16{0, math.MaxUint16})
	keysRoundTrip(t, []level{3, 9})
	keysRoundTrip(t, []uint32{0, math.MaxUint32})
	keysRoundTrip(t, []uint64{0, math.MaxUint64})
	keysRoundTrip(t, []bool{false, true})
}

// keysRoundTrip gives each key of ks a value state's entry and an event
// timer, snapshots both, restores them into new ones and compares.
func keysRoundTrip[K comparable](t *testing.T, ks []K) {
	t.Helper()
	const groups = 8
	hash, err := keygroup.StableHasher[K]()
	if err != nil {
		t.Fatalf("%T: %v", ks, err)
	}
	newState := func() (*keyed.State[K], *Queue[K]) {
		var st keyed.State[K]
		st.Init(hash, groups, func() int64 { return 0 })
		q := NewQueue(groups, st.GroupOf, Sets[K](NewHeapSets(&st, groups)))
		return &st, &q
	}
	declare := func(st *keyed.State[K]) keyed.Value[int] {
		v, err := keyed.DeclareValue(st, "v", statecodec.For[int](), nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	st, q := newState()
	v := declare(st)
	for i, k := range ks {
		st.SetKey(k)
		v.Update(i + 1)
		q.Add(k, int64(i))
	}
	want := maps.Clone(st.States["v"].(*keyed.HeapValue[K, int]).Flat())
	wantTimers := timerSet(t, q)
	if len(want) != len(ks) || len(wantTimers) != len(ks) {
		t.Fatalf("%T keys: %d values and %d timers for %d keys", ks, len(want), len(wantTimers), len(ks))
	}

	parts, carried := st.Freeze()
	parts = append(parts, keyed.Part{Name: EventName, Kind: stateformat.KindEventTimers, Enc: q.Sets().(*HeapSets[K]).Freeze()})
	blob, err := keyed.EncodeParts(parts, carried, func() bool { return false })
	st.Thaw()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := keyed.DecodeEntries(blob)
	if err != nil {
		t.Fatal(err)
	}
	rst, rq := newState()
	rst.Restored = map[string][]keyed.Entry{}
	for _, e := range entries {
		if e.Kind != stateformat.KindEventTimers {
			rst.Restored[e.Name] = append(rst.Restored[e.Name], e)
			continue
		}
		if err := Restore(rq, rst, e.Format, e.Data); err != nil {
			t.Fatalf("%T keys: restore timers: %v", ks, err)
		}
	}
	declare(rst)
	if got := rst.States["v"].(*keyed.HeapValue[K, int]).Flat(); !maps.Equal(got, want) {
		t.Errorf("%T keys: restored %v, want %v", ks, got, want)
	}
	if got := timerSet(t, rq); !maps.Equal(got, wantTimers) {
		t.Errorf("%T keys: restored timers %v, want %v", ks, got, wantTimers)
	}
	for g, h := range rq.Sets().(*HeapSets[K]).heaps {
		for _, e := range h {
			if kg := rst.GroupOf(e.Key); kg != g {
				t.Errorf("%T keys: timer %v restored into key group %d, its key's is %d", ks, e, g, kg)
			}
		}
	}
}

func mustAll[K comparable](t *testing.T, q *Queue[K]) []Entry[K] {
	t.Helper()
	all, err := q.All()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// timerSet is q's timers as a set.
func timerSet[K comparable](t *testing.T, q *Queue[K]) map[Entry[K]]bool {
	t.Helper()
	set := map[Entry[K]]bool{}
	for _, e := range mustAll(t, q) {
		set[e] = true
	}
	return set
}
