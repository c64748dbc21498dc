package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

var rollingAPIs = []struct {
	name string
	api  countingAPI
}{{"Count", viaCount}, {"Aggregate", viaAggregate}, {"Reduce", viaReduce}}

// Rolling aggregations keep their running value in keyed state: through
// two failovers on either backend every running count is emitted exactly
// once.
func TestRollingAggregationsRestoredAfterFailover(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, a := range rollingAPIs {
			t.Run(a.name, func(t *testing.T) {
				src := &rangeSrc{splits: 4, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
				store := newTxnStore()
				env := countingJobVia(a.api, 2, src, failOnce(50, 120), &txnSink2PC{store: store},
					WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)), backend)
				if err := env.Execute(testCtx(t), "rolling"); err != nil {
					t.Fatal(err)
				}
				checkCounts(t, store, 160, 7)
			})
		}
	})
}

// Rolling aggregations rescale: a job killed at parallelism 2 (or 3) goes
// on at 3 (or 1) from its checkpoint and every running count is emitted
// exactly once, on either backend.
func TestRollingAggregationsRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, a := range rollingAPIs {
			for _, pars := range [][2]int{{2, 3}, {3, 1}} {
				t.Run(fmt.Sprintf("%s/%d->%d", a.name, pars[0], pars[1]), func(t *testing.T) {
					testRescaleVia(t, [2]countingAPI{a.api, a.api}, pars[0], pars[1], false, backend)
				})
			}
		}
	})
}

// Count emits a key with its running count, Reduce the running
// reduction, Aggregate the result of the running accumulator, each after
// every record, in the record's order per key.
func TestRollingAggregationsEmitRunningValues(t *testing.T) {
	words := []string{"a", "b", "a", "c", "a", "b"}
	run := func(build func(KeyedStream[string, string]) DataStream[string]) []string {
		env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
		src := &memSource[string]{numSplits: 1, perSplit: len(words), gen: func(_, i int) (string, int64) { return words[i], int64(i) }}
		sink := newCollectSink[string]()
		SinkTo(build(KeyBy(FromSource(env, src, "words"), func(w string) string { return w })), sink)
		if err := env.Execute(testCtx(t), "rolling"); err != nil {
			t.Fatal(err)
		}
		got := sink.all()
		slices.Sort(got)
		return got
	}
	cases := []struct {
		name  string
		build func(KeyedStream[string, string]) DataStream[string]
		want  []string
	}{
		{"Count", func(ks KeyedStream[string, string]) DataStream[string] {
			return Map(Count(ks), func(kv KV[string, int64]) (string, error) { return fmt.Sprintf("%s=%d", kv.Key, kv.Value), nil })
		}, []string{"a=1", "a=2", "a=3", "b=1", "b=2", "c=1"}},
		{"Reduce", func(ks KeyedStream[string, string]) DataStream[string] {
			return Reduce(ks, func(a, b string) string { return a + b })
		}, []string{"a", "aa", "aaa", "b", "bb", "c"}},
		{"Aggregate", func(ks KeyedStream[string, string]) DataStream[string] {
			return Map(Aggregate(ks, state.Aggregator[string, int, string]{
				Create: func() int { return 10 },
				Add:    func(n int, _ string) int { return n + 1 },
				Result: func(n int) string { return fmt.Sprint(n) },
			}), func(kv KV[string, string]) (string, error) { return kv.Key + "=" + kv.Value, nil })
		}, []string{"a=11", "a=12", "a=13", "b=11", "b=12", "c=11"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := run(c.build); !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// Rule: one Aggregator serves rolling, window and state aggregation, and
// each refuses one without Create, Add or Result before anything runs,
// naming what is missing (Merge is optional outside session windows).
func TestAggregatorWithoutARequiredFunctionIsRefused(t *testing.T) {
	noAdd := state.Aggregator[int64, int64, int64]{Create: func() int64 { return 0 }, Result: func(a int64) int64 { return a }}
	env := NewEnvironment(WithLogger(discardLogger()))
	ds := FromSource[int64, *rSplit, []*rSplit](env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range").UID("src")
	SinkTo(Aggregate(KeyBy(ds, func(v int64) int64 { return v }), noAdd), newCollectSink[KV[int64, int64]]())
	err := env.Execute(testCtx(t), "aggregate without Add")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "aggregator's Add is nil") {
		t.Fatalf("Execute: %v, want ErrInvalidGraph saying the aggregator's Add is nil", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Add") {
			t.Fatalf("NewAggregatingState without Add: panic %v, want one naming Add", r)
		}
	}()
	state.NewAggregatingState[int64, int64, int64]("sum", noAdd)
}
