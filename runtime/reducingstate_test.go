package runtime

import (
	"testing"

	"github.com/splitflow/splitflow/runtime/state"
)

// ReducingState folds with its function and AggregatingState with its
// Aggregator, per key, on both backends, and both come back from
// a checkpoint; the descriptor and the Get form reach one state.
func TestReducingAndAggregatingState(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		maxOf := state.NewReducingState[int64]("max", func(a, b int64) int64 { return max(a, b) })
		type avg struct{ Sum, N int64 }
		mean := state.NewAggregatingState[int64, avg, float64]("mean", state.Aggregator[int64, avg, float64]{
			Create: func() avg { return avg{} },
			Add:    func(a avg, v int64) avg { return avg{a.Sum + v, a.N + 1} },
			Result: func(a avg) float64 { return float64(a.Sum) / float64(a.N) },
		})
		p, stop, err := openStringKeyed(t, sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		ctx := &p.ctx
		p.state.SetKey("a")
		if _, ok, err := maxOf.Get(ctx); ok || err != nil {
			t.Fatalf("max of a key with nothing added: %v, %v", ok, err)
		}
		if _, ok, err := mean.Get(ctx); ok || err != nil {
			t.Fatalf("mean of a key with nothing added: %v, %v", ok, err)
		}
		for _, v := range []int64{3, 9, 4} {
			if err := maxOf.Add(ctx, v); err != nil {
				t.Fatal(err)
			}
			if err := mean.Add(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		p.state.SetKey("b")
		sum, err := state.NewReducingState[int64]("sum", func(a, b int64) int64 { return a + b }).Handle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sum.Add(5)
		sum.Add(6)
		if v, ok := sum.Get(); !ok || v != 11 {
			t.Fatalf("sum of b = %d, %v; want 11", v, ok)
		}
		if err := maxOf.Add(ctx, -2); err != nil {
			t.Fatal(err)
		}
		chk := checkpointOf(t, p)

		q, stopQ, err := openStringKeyed(t, sc, chk)
		if err != nil {
			t.Fatal(err)
		}
		defer stopQ()
		ctx = &q.ctx
		q.state.SetKey("a")
		if v, ok, err := maxOf.Get(ctx); err != nil || !ok || v != 9 {
			t.Fatalf("restored max of a = %d, %v, %v; want 9", v, ok, err)
		}
		if v, ok, err := mean.Get(ctx); err != nil || !ok || v != 16.0/3 {
			t.Fatalf("restored mean of a = %v, %v, %v; want 16/3", v, ok, err)
		}
		agg, err := state.NewAggregatingState[int64, avg, float64]("mean", state.Aggregator[int64, avg, float64]{
			Create: func() avg { return avg{} },
			Add:    func(a avg, v int64) avg { return avg{a.Sum + v, a.N + 1} },
			Result: func(a avg) float64 { return float64(a.Sum) / float64(a.N) },
		}).Handle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		agg.Add(8)
		if v, ok := agg.Get(); !ok || v != 6 {
			t.Fatalf("mean of a after adding 8 = %v, %v; want 6", v, ok)
		}
		q.state.SetKey("b")
		if v, ok, err := maxOf.Get(ctx); err != nil || !ok || v != -2 {
			t.Fatalf("restored max of b = %d, %v, %v; want -2", v, ok, err)
		}
		if err := maxOf.Clear(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := maxOf.Get(ctx); ok {
			t.Fatal("max of b after Clear is still there")
		}
	})
}
