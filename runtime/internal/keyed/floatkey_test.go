package keyed

import (
	"math"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// Rule: a state declared through a descriptor finds a float key's entry
// by the key's bits, as the pebble backend's key bytes do: a NaN key's
// state is there at its next record, and -0 is +0. A map over the float
// itself would never find a NaN again (NaN != NaN), so each of its
// records would start from nothing while the pebble backend kept its
// state.
func TestDescriptorStateFindsAFloatKeyByItsBits(t *testing.T) {
	t.Run("float64", func(t *testing.T) { floatKeyByBits(t, math.NaN(), math.Copysign(0, -1)) })
	t.Run("float32", func(t *testing.T) { floatKeyByBits(t, float32(math.NaN()), float32(math.Copysign(0, -1))) })
}

func floatKeyByBits[K float32 | float64](t *testing.T, nan, negZero K) {
	var ks State[K]
	ks.Init(func(K) uint32 { return 0 }, 8, func() int64 { return 0 })
	spec := &ValueSpec[int64]{Name: "n", Vals: statecodec.For[int64]()}
	n, _, err := spec.State(&ks)
	if err != nil {
		t.Fatal(err)
	}
	ks.SetKey(nan)
	n.Update(7)
	ks.SetKey(negZero)
	n.Update(3)
	ks.SetKey(nan)
	if v, ok := n.Value(); !ok || v != 7 {
		t.Errorf("state of NaN = %d, %v; want 7", v, ok)
	}
	ks.SetKey(0)
	if v, ok := n.Value(); !ok || v != 3 {
		t.Errorf("state of +0 after setting -0's = %d, %v; want 3", v, ok)
	}
}
