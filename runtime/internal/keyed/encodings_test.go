package keyed

import (
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// Every type with a built-in encoding comes back exactly from a heap
// snapshot, as values and as map keys and values: edge values, named
// types, nil and empty byte slices, NaN and negative zero. The states
// are declared over string keys without TTL: what differs between types
// is their codec, and every other declaration of a state shares this
// path (a descriptor's state is a view over one of three key types, a
// TTL state one over a value with its timestamp). Each declared type
// instantiates the states once more, so the types are tried here, where
// that costs a sixth of what it costs through a descriptor; runtime's
// tests take a few of them through the operator's whole snapshot.
func TestBuiltinStateEncodingsRoundTrip(t *testing.T) {
	type word string
	type level uint16
	type raw []byte
	roundTrip(t, []string{"", "a", "ünïcode", strings.Repeat("x", 300)})
	roundTrip(t, []word{"", "w"})
	roundTrip(t, []int{math.MinInt, -1, 0, math.MaxInt})
	roundTrip(t, []int8{math.MinInt8, 0, math.MaxInt8})
	roundTrip(t, []int16{math.MinInt16, 1, math.MaxInt16})
	roundTrip(t, []int32{math.MinInt32, -7, math.MaxInt32})
	roundTrip(t, []int64{math.MinInt64, 0, math.MaxInt64})
	roundTrip(t, []time.Duration{-time.Second, time.Hour})
	roundTrip(t, []uint{0, math.MaxUint})
	roundTrip(t, []uint8{0, math.MaxUint8})
	roundTrip(t, []uint16{0, math.MaxUint16})
	roundTrip(t, []level{3, 9})
	roundTrip(t, []uint32{0, math.MaxUint32})
	roundTrip(t, []uint64{0, math.MaxUint64})
	roundTrip(t, []float32{0, -1.5, math.MaxFloat32, float32(math.Inf(-1))})
	roundTrip(t, []float64{0, math.SmallestNonzeroFloat64, math.Inf(1), -3.25})
	roundTrip(t, []bool{false, true})
	// Not comparable, so values only; and NaN and -0, which a map key
	// cannot hold faithfully.
	roundTripValues(t, [][]byte{nil, {}, {0, 1, 2}})
	roundTripValues(t, []raw{nil, {}, {9}})
	roundTripValues(t, []float64{math.NaN(), math.Copysign(0, -1)})
	roundTripValues(t, []float32{float32(math.NaN()), float32(math.Copysign(0, -1))})
}

// newStringKeyed is an empty keyed state over string keys spread over 8
// key groups.
func newStringKeyed(t *testing.T) *State[string] {
	t.Helper()
	hash, err := keygroup.StableHasher[string]()
	if err != nil {
		t.Fatal(err)
	}
	var ks State[string]
	ks.Init(hash, 8, func() int64 { return 0 })
	return &ks
}

// restoredFrom snapshots ks's heap states and returns a new keyed state
// holding the snapshot's entries as a restore leaves them: waiting for
// their states to be declared again.
func restoredFrom(t *testing.T, ks *State[string]) *State[string] {
	t.Helper()
	parts, carried := ks.Freeze()
	blob, err := EncodeParts(parts, carried, func() bool { return false })
	ks.Thaw()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := DecodeEntries(blob)
	if err != nil {
		t.Fatal(err)
	}
	q := newStringKeyed(t)
	q.Restored = map[string][]Entry{}
	for _, e := range entries {
		q.Restored[e.Name] = append(q.Restored[e.Name], e)
	}
	return q
}

// roundTrip checks vs as values, map keys and map values.
func roundTrip[T comparable](t *testing.T, vs []T) {
	t.Helper()
	roundTripValues(t, vs)
	declare := func(ks *State[string]) Map[T, T] {
		m, err := DeclareMapNoTTL(ks, "m", statecodec.For[T](), statecodec.For[T]())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ks := newStringKeyed(t)
	m := declare(ks)
	for i := range vs {
		ks.SetKey("k" + string(rune('a'+i)))
		m.Put(vs[i], vs[(i+1)%len(vs)])
		m.Put(vs[(i+1)%len(vs)], vs[i])
	}
	want := maps.Clone(ks.States["m"].(*HeapMap[string, T, T]).Flat())
	q := restoredFrom(t, ks)
	declare(q)
	if got := q.States["m"].(*HeapMap[string, T, T]).Flat(); !reflect.DeepEqual(got, want) {
		t.Errorf("%T map state: restored %v, want %v", vs, got, want)
	}
}

// roundTripValues checks vs as values of a value state, bit for bit.
func roundTripValues[T any](t *testing.T, vs []T) {
	t.Helper()
	declare := func(ks *State[string]) Value[T] {
		v, err := declareValue(ks, "v", statecodec.For[T]())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ks := newStringKeyed(t)
	v := declare(ks)
	for i, x := range vs {
		ks.SetKey("k" + string(rune('a'+i)))
		v.Update(x)
	}
	q := restoredFrom(t, ks)
	declare(q)
	got := q.States["v"].(*HeapValue[string, T]).Flat()
	if len(got) != len(vs) {
		t.Fatalf("%T: restored %d values, want %d", vs, len(got), len(vs))
	}
	for i, x := range vs {
		k := "k" + string(rune('a'+i))
		if !sameBits(got[k], x) {
			t.Errorf("%T: key %s restored as %#v, want %#v", vs, k, got[k], x)
		}
	}
}

// sameBits compares floats by their bits (NaN, -0) and byte slices with
// nil and empty apart.
func sameBits(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	switch va.Kind() {
	case reflect.Float32, reflect.Float64:
		return math.Float64bits(va.Float()) == math.Float64bits(vb.Float()) ||
			va.Kind() == reflect.Float32 && math.Float32bits(float32(va.Float())) == math.Float32bits(float32(vb.Float()))
	case reflect.Slice:
		return va.IsNil() == vb.IsNil() && reflect.DeepEqual(va.Bytes(), vb.Bytes())
	}
	return a == b
}
