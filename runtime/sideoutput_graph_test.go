package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
)

// A side stream united with its own operator's main output: two edges of
// one task into the union, each a channel of its own that barriers
// align, so every record is committed once through failovers.
func TestSideOutputUnitedWithItsMainIsExactlyOnce(t *testing.T) {
	for seed := range 6 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 17))
			par := 1 + rng.IntN(3)
			src := &rangeSrc{splits: 1 + rng.IntN(4), perSplit: 10 + rng.IntN(40), readerFailAt: -1,
				delay: time.Duration(rng.IntN(300)) * time.Microsecond}
			n := src.splits * src.perSplit
			env := NewEnvironment(WithParallelism(par), WithFlushTimeout(time.Millisecond),
				WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), WithLogger(discardLogger()),
				WithCheckpointInterval(time.Duration(2+rng.IntN(8))*time.Millisecond))
			odd := NewOutputTag[int64]("odd")
			ds := Map(FromSource(env, src, "range").UID("src"), failOnce(int64(rng.IntN(n)), int64(rng.IntN(n)))).UID("map")
			main := Process(ds, func(ctx *ProcessContext[int64], v int64) error {
				if v%2 == 0 {
					ctx.Collect(v)
				} else {
					Output(ctx, odd, v)
				}
				return nil
			}).UID("split").DeclareSideOutputs(odd)
			sink := &txnSink2PC{store: newTxnStore()}
			SinkTo(Union(main, SideOutput(main, odd)), twoPhase(sink)).UID("sink")
			if err := env.Execute(testCtx(t), "side-union"); err != nil {
				t.Fatal(err)
			}
			seen := make([]int, n)
			sink.store.mu.Lock()
			for _, rs := range sink.store.committed {
				for _, r := range rs {
					seen[r]++
				}
			}
			sink.store.mu.Unlock()
			for r, c := range seen {
				if c != 1 {
					t.Fatalf("record %d committed %d times", r, c)
				}
			}
		})
	}
}

// A Process reading a side stream may declare side outputs of its
// own: they chain into the same task and get their records.
func TestSideOutputOfAnOperatorOnASideStream(t *testing.T) {
	for _, chained := range []bool{true, false} {
		t.Run(fmt.Sprint(chained), func(t *testing.T) {
			env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
			src := &memSource[ev]{numSplits: 2, perSplit: 200, gen: genEv(3), perPoll: 20}
			main := KeyedProcess(KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key }), splitByParity[string]).DeclareSideOutputs(oddTag)
			three := NewOutputTag[ev]("three")
			inner := Process(SideOutput(main, oddTag), func(ctx *ProcessContext[ev], e ev) error {
				if e.Seq%4 == 3 {
					Output(ctx, three, e)
				} else {
					ctx.Collect(e)
				}
				return nil
			})
			if !chained {
				inner = inner.DisableChaining()
			}
			inner = inner.DeclareSideOutputs(three)
			a, b, c := newCollectSink[ev](), newCollectSink[ev](), newCollectSink[ev]()
			SinkTo(main, a)
			SinkTo(inner, b)
			SinkTo(SideOutput(inner, three), c)
			if err := env.Execute(testCtx(t), "side-of-side"); err != nil {
				t.Fatal(err)
			}
			// Of 2 splits of 200: main the evens, inner Seq%4 == 1,
			// three Seq%4 == 3, each once.
			for name, s := range map[string]struct {
				got  []ev
				mods []int
			}{"main": {a.all(), []int{0, 2}}, "inner": {b.all(), []int{1}}, "three": {c.all(), []int{3}}} {
				seen := seqsOf(s.got)
				if len(s.got) != 100*len(s.mods) || len(seen) != len(s.got) {
					t.Errorf("%s got %d records (%d distinct), want %d", name, len(s.got), len(seen), 100*len(s.mods))
				}
				for _, e := range s.got {
					if !slices.Contains(s.mods, e.Seq%4) {
						t.Fatalf("%s got %+v", name, e)
					}
				}
			}
		})
	}
}

// Two Counts in one job have UIDs and state of their own.
func TestTwoCountsInOneJob(t *testing.T) {
	env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
	src := &memSource[ev]{numSplits: 2, perSplit: 100, gen: genEv(3), perPoll: 20}
	ds := FromSource(env, src, "mem")
	a := Count(KeyBy(ds, func(e ev) string { return e.Key }))
	b := Count(KeyBy(ds, func(e ev) int { return e.Split }))
	sa, sb := newCollectSink[KV[string, int64]](), newCollectSink[KV[int, int64]]()
	SinkTo(a, sa)
	SinkTo(b, sb)
	if err := env.Execute(testCtx(t), "two-counts"); err != nil {
		t.Fatal(err)
	}
	max := map[int]int64{}
	for _, kv := range sb.all() {
		max[kv.Key] = maxOf(max[kv.Key], kv.Value)
	}
	if max[0] != 100 || max[1] != 100 {
		t.Fatalf("split counts %v", max)
	}
	if len(sa.all()) != 200 {
		t.Fatalf("%d", len(sa.all()))
	}
}

func maxOf(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
