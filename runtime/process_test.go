package runtime

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// countPerKey keeps a running count per key in ValueState and the distinct
// sequence numbers per key in MapState.
type countPerKey struct {
	count state.ValueState[int]
	seqs  state.MapState[int, bool]
}

type keyCount struct {
	Key      string
	Count    int
	Distinct int
}

func (c *countPerKey) Open(ctx *KeyedContext[string, keyCount]) error {
	var err error
	if c.count, err = state.NewValueState[int]("count").Handle(ctx); err != nil {
		return err
	}
	c.seqs, err = state.NewMapState[int, bool]("seqs").Handle(ctx)
	return err
}

func (c *countPerKey) ProcessElement(ctx *KeyedContext[string, keyCount], e ev) error {
	n, _ := c.count.Value()
	c.count.Update(n + 1)
	c.seqs.Put(e.Split*1_000_000+e.Seq, true)
	ctx.Collect(keyCount{Key: ctx.Key(), Count: n + 1, Distinct: c.seqs.Len()})
	return nil
}

func (c *countPerKey) OnTimer(*KeyedContext[string, keyCount], Timer) error { return nil }

// Rule: keyed state is scoped to the current key: each key's ValueState
// counts only its own records and its MapState holds only its own entries,
// at any parallelism; with KeyedProcessPerSubtask each subtask has its own
// function instance (the race detector checks they share nothing).
func TestKeyedStateIsPerKey(t *testing.T) {
	for _, par := range []int{1, 3} {
		env := NewEnvironment(WithParallelism(par))
		src := &memSource[ev]{numSplits: 3, perSplit: 400, gen: genEv(10)}
		ks := KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key })
		sink := newCollectSink[keyCount]()
		SinkTo(KeyedProcessPerSubtask(ks, func() KeyedProcessFunction[string, ev, keyCount] { return &countPerKey{} }).UID("counter"), sink)
		if err := env.Execute(context.Background(), "state"); err != nil {
			t.Fatal(err)
		}
		final := map[string]keyCount{}
		for _, kc := range sink.all() {
			if kc.Count != kc.Distinct {
				t.Fatalf("key %s: count %d but %d distinct entries in its map", kc.Key, kc.Count, kc.Distinct)
			}
			if kc.Count > final[kc.Key].Count {
				final[kc.Key] = kc
			}
		}
		want := map[string]int{}
		for s := 0; s < 3; s++ {
			for i := 0; i < 400; i++ {
				e, _ := genEv(10)(s, i)
				want[e.Key]++
			}
		}
		for k, n := range want {
			if final[k].Count != n {
				t.Fatalf("par %d: key %s counted %d, want %d", par, k, final[k].Count, n)
			}
		}
	}
}

// Rule: a processing-time timer fires when the wall clock reaches it, not
// before, once per (key, timestamp), on the task goroutine (it may emit).
// The fake clock of testing/synctest makes "when" exact.
func TestProcessingTimeTimersFireOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type fired struct {
			Key   string
			Timer int64
			Now   int64
		}
		env := NewEnvironment()
		src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(3)}
		ds := FromSource(env, &gatedSource{memSource: src, gate: &silentAfter{limit: 9}}, "mem")
		start := time.Now()
		res := KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, fired], e ev) error {
			// three records per key register the same timer: it fires once
			ctx.RegisterProcessingTimeTimer(start.Add(5 * time.Second).UnixMilli())
			if e.Seq == 0 {
				ctx.RegisterProcessingTimeTimer(start.Add(time.Hour).UnixMilli())
				ctx.DeleteProcessingTimeTimer(start.Add(time.Hour).UnixMilli())
			}
			return nil
		}, OnTimer(func(ctx *KeyedContext[string, fired], tm Timer) error {
			if tm.Domain != ProcessingTime {
				t.Errorf("timer domain %v, want processing time", tm.Domain)
			}
			ctx.Collect(fired{Key: ctx.Key(), Timer: tm.Timestamp, Now: ctx.CurrentProcessingTime()})
			return nil
		}))
		sink := newCollectSink[fired]()
		sink.onWrite = make(chan fired, 16)
		SinkTo(res, sink)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "processing time") }()
		keys := map[string]bool{}
		for range 3 {
			f := <-sink.onWrite
			if f.Now < f.Timer {
				t.Fatalf("timer %d fired at %d, early", f.Timer, f.Now)
			}
			if time.Since(start) != 5*time.Second {
				t.Fatalf("timer fired after %v, want exactly 5s", time.Since(start))
			}
			keys[f.Key] = true
		}
		if len(keys) != 3 {
			t.Fatalf("timers fired for keys %v, want 3 distinct keys", keys)
		}
		time.Sleep(2 * time.Hour) // the deleted timer must not fire
		synctest.Wait()
		if n := len(sink.onWrite); n != 0 {
			t.Fatalf("%d more timers fired; deleted or duplicate timers fired", n)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

var _ connector.SourceReader[ev, *memSplit] = (*gatedReader)(nil)

// Rule: KeyedProcessFuncs.Setup runs once per subtask before the first
// record, and state created there follows the current key.
func TestKeyedProcessFuncsSetup(t *testing.T) {
	env := NewEnvironment(WithParallelism(2))
	src := &memSource[ev]{numSplits: 2, perSplit: 100, gen: genEv(4)}
	ks := KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key })
	res := KeyedProcessPerSubtask(ks, func() KeyedProcessFunction[string, ev, int] {
		var count state.ValueState[int]
		return KeyedProcessFuncs[string, ev, int]{
			Setup: func(ctx *KeyedContext[string, int]) (err error) {
				count, err = state.NewValueState[int]("count").Handle(ctx)
				return err
			},
			Element: func(ctx *KeyedContext[string, int], _ ev) error {
				n, _ := count.Value()
				count.Update(n + 1)
				ctx.Collect(n + 1)
				return nil
			},
		}
	})
	sink := newCollectSink[int]()
	SinkTo(res, sink)
	if err := env.Execute(context.Background(), "setup"); err != nil {
		t.Fatal(err)
	}
	best := 0
	for _, n := range sink.all() {
		best = max(best, n)
	}
	if best != 50 { // 200 records over 4 keys
		t.Fatalf("largest per-key count = %d, want 50", best)
	}
}

// A task closes every operator of its chain whatever happened before, also
// those that never opened: a sink whose writer cannot be created (a missing
// right, a bad configuration) fails its chain before the keyed operator
// ahead of it opens. The job fails with the sink's error; closing the
// unopened keyed operator must not panic and take the process with it.
func TestKeyedOperatorThatNeverOpenedClosesCleanly(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		env := NewEnvironment(backend, WithParallelism(2), WithLogger(discardLogger()), WithRestartStrategy(restart.None()))
		src := &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}
		counts := KeyedProcess(KeyBy(FromSource(env, src, "range"), func(v int64) int64 { return v % 3 }),
			func(ctx *KeyedContext[int64, int64], v int64) error { ctx.Collect(v); return nil })
		refused := errors.New("writer refused")
		sink := newCollectSink[int64]()
		sink.creating = func(int) error { return refused }
		SinkTo(counts, sink)
		if err := env.Execute(testCtx(t), "unopened"); !errors.Is(err, refused) {
			t.Fatalf("job ended with %v, want the sink's error", err)
		}
	})
}
