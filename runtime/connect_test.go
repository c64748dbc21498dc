package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// coCounting is counting on both inputs of a KeyedCoProcess: one running
// count per key over the records of both.
type coCounting struct{ *counting }

func (c coCounting) ProcessElement1(ctx *KeyedContext[int64, int64], v int64) error {
	return c.ProcessElement(ctx, v)
}

func (c coCounting) ProcessElement2(ctx *KeyedContext[int64, int64], v int64) error {
	return c.ProcessElement(ctx, v)
}

// The face of a co-process function for the window harness (openWin).
func (c coProcessFn[K, A, B, O]) setClock(func() int64) {}
func (c coProcessFn[K, A, B, O]) lateDropped() int64    { return 0 }

func left[A, B any](v A) either[A, B]  { return either[A, B]{L: v} }
func right[A, B any](v B) either[A, B] { return either[A, B]{R: v, Second: true} }

// Rule: the two functions of a KeyedCoProcess share the key's state and
// timers: what the first input's function stores for a key the second's
// reads, a timer either registers fires OnTimer once for that key (the
// same time registered from both sides fires once), and OnTimer sees and
// clears the state both wrote. On both backends.
func TestCoProcessSharesStateAndTimersAcrossInputs(t *testing.T) {
	total := state.NewValueState[int64]("total")
	ds := winStream(func(e either[KV[string, int64], string]) string {
		if e.Second {
			return e.R
		}
		return e.L.Key
	}, func(KeyedStream[string, either[KV[string, int64], string]]) DataStream[string] {
		env := NewEnvironment()
		orders := DataStream[KV[string, int64]]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[KV[string, int64]]{}})}
		queries := DataStream[string]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[string]{}})}
		return KeyedCoProcess(Connect(KeyBy(orders, func(o KV[string, int64]) string { return o.Key }), KeyBy(queries, func(q string) string { return q })),
			func(ctx *KeyedContext[string, string], o KV[string, int64]) error {
				n, _, err := total.Get(ctx)
				if err != nil {
					return err
				}
				n += o.Value
				ctx.RegisterEventTimeTimer(ctx.Timestamp() + 10)
				ctx.Collect(fmt.Sprintf("1:%s:%d", ctx.Key(), n))
				return total.Set(ctx, n)
			},
			func(ctx *KeyedContext[string, string], q string) error {
				n, ok, err := total.Get(ctx)
				if err != nil {
					return err
				}
				ctx.RegisterEventTimeTimer(ctx.Timestamp() + 10)
				ctx.Collect(fmt.Sprintf("2:%s:%d:%v", ctx.Key(), n, ok))
				return nil
			},
			OnTimer(func(ctx *KeyedContext[string, string], tm Timer) error {
				n, ok, err := total.Get(ctx)
				if err != nil {
					return err
				}
				ctx.Collect(fmt.Sprintf("t:%s:%d:%d:%v", ctx.Key(), tm.Timestamp, n, ok))
				return total.Clear(ctx)
			}))
	})
	type step struct {
		in   *either[KV[string, int64], string] // nil: a watermark
		ts   int64
		want []string
	}
	o := func(k string, v int64) *either[KV[string, int64], string] {
		e := left[KV[string, int64], string](KV[string, int64]{k, v})
		return &e
	}
	q := func(k string) *either[KV[string, int64], string] {
		e := right[KV[string, int64]](k)
		return &e
	}
	steps := []step{
		{q("a"), 1, []string{"2:a:0:false"}}, // nothing stored yet; timer a@11
		{o("a", 5), 1, []string{"1:a:5"}},    // timer a@11 again: one timer
		{o("b", 7), 2, []string{"1:b:7"}},    // timer b@12
		{q("a"), 3, []string{"2:a:5:true"}},  // timer a@13
		{o("a", 2), 4, []string{"1:a:7"}},    // timer a@14
		{nil, 11, []string{"t:a:11:7:true"}}, // fires once, clears a
		{q("a"), 12, []string{"2:a:0:false"}},
		{q("b"), 12, []string{"2:b:7:true"}},
		{nil, 14, []string{"t:b:12:7:true", "t:a:13:0:false", "t:a:14:0:false"}},
		{nil, 30, []string{"t:a:22:0:false", "t:b:22:0:false"}},
	}
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, either[KV[string, int64], string]](t, ds, unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			for i, s := range steps {
				if s.in != nil {
					w.add(t, *s.in, s.ts)
				} else {
					w.watermark(t, s.ts)
				}
				got := w.out.take()
				if s.in == nil {
					slices.Sort(got)
					slices.Sort(s.want)
				}
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d: emitted %q, want %q", i, got, s.want)
				}
			}
			if n := w.timersLeft(); n != 0 {
				t.Fatalf("%d timers left", n)
			}
		})
	}
}

// Rule (exactly-once over two inputs): a running count per key over two
// sources connected into one KeyedCoProcess, with injected failures on one
// input and global restarts from checkpoints, commits every count of
// every key once: both inputs' records of a key reach one subtask, and
// the barriers align over both inputs. Parallelism 2 and 3, both
// backends.
func TestCoProcessExactlyOnceUnderFailures(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, par := range []int{2, 3} {
			t.Run(fmt.Sprint("par=", par), func(t *testing.T) {
				env := NewEnvironment(WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
					WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)),
					WithDrainTimeout(5*time.Second), backend)
				src1 := &rangeSrc{splits: 3, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
				src2 := &rangeSrc{splits: 2, perSplit: 50, delay: 150 * time.Microsecond, readerFailAt: 30}
				a := Map(FromSource(env, src1, "first").UID("src1"), failOnce(40, 90)).UID("map1")
				b := Map(FromSource(env, src2, "second").UID("src2").Parallelism(1),
					func(v int64) (int64, error) { return v + 120, nil }).UID("map2")
				counts := KeyedCoProcessPerSubtask(Connect(KeyBy(a, func(v int64) int64 { return v % 7 }), KeyBy(b, func(v int64) int64 { return v % 7 })),
					func() KeyedCoProcessFunction[int64, int64, int64, int64] { return coCounting{&counting{}} }).UID("counts")
				store := newTxnStore()
				SinkTo(counts, twoPhase(&txnSink2PC{store: store})).UID("sink")
				if err := env.Execute(testCtx(t), "co-count"); err != nil {
					t.Fatal(err)
				}
				if env.Status().Restarts == 0 {
					t.Fatal("the job never failed over; the test proves less than it says")
				}
				checkCounts(t, store, 220, 7)
			})
		}
	})
}

// The state of a KeyedCoProcess moves with its key groups like any keyed
// state: killed at parallelism 2 (or 3) after a checkpoint, resumed at 3
// (or 1), every running count over both inputs is emitted once.
func TestCoProcessRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, pars := range [][2]int{{2, 3}, {3, 1}} {
			t.Run(fmt.Sprintf("%d->%d", pars[0], pars[1]), func(t *testing.T) {
				testRescaleVia(t, [2]countingAPI{viaCoProcess, viaCoProcess}, pars[0], pars[1], false, backend)
			})
		}
	})
}

// The graph of a KeyedCoProcess: the tagging maps chain to their inputs'
// operators (a source of parallelism 1 keeps its map at 1), the operator
// has its default name and UID, a UID given to it is kept, and it is one
// hash exchange away from its inputs.
func TestCoProcessGraph(t *testing.T) {
	env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
	a := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "a").Parallelism(1)
	b := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "b")
	key := func(v int64) int64 { return v }
	fn := func(*KeyedContext[int64, int64], int64) error { return nil }
	c1 := KeyedCoProcess(Connect(KeyBy(a, key), KeyBy(b, key)), fn, fn)
	c2 := KeyedCoProcess(Connect(KeyBy(a, key), KeyBy(b, key)), fn, fn).UID("mine")
	SinkTo(Union(c1, c2), newCollectSink[int64]())
	g, err := buildJobGraph(env)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range g.chains {
		names = append(names, c.name())
	}
	want := []string{"Source: a -> CoProcess: input 1 -> CoProcess: input 1", "Source: b -> CoProcess: input 2 -> CoProcess: input 2",
		"CoProcess", "CoProcess", "Union -> Sink"}
	if !slices.Equal(names, want) {
		t.Fatalf("chains %q, want %q", names, want)
	}
	if c1.node.uid != "CoProcess#1" || c2.node.uid != "mine" {
		t.Fatalf("uids %q and %q, want CoProcess#1 and mine", c1.node.uid, c2.node.uid)
	}
	for _, n := range []*node{c1.node, c2.node} {
		for _, e := range n.inputs {
			if e.kind != engine.PartitionHash {
				t.Fatalf("input %q of %q is not hash-partitioned", e.from.name, n.name)
			}
		}
	}
}

// Build-time refusals of Connect and KeyedCoProcess.
func TestConnectMisuseIsRefused(t *testing.T) {
	fn := func(*KeyedContext[int64, int64], int64) error { return nil }
	key := func(v int64) int64 { return v }
	h1 := func(v int64) uint32 { return uint32(v) }
	h2 := func(v int64) uint32 { return uint32(v) * 3 }
	for _, c := range []struct {
		name, want string
		build      func(env *Environment, a, b DataStream[int64]) DataStream[int64]
	}{
		{"KeyBy and KeyByHashed", "different hashes", func(_ *Environment, a, b DataStream[int64]) DataStream[int64] {
			return KeyedCoProcess(Connect(KeyBy(a, key), KeyByHashed(b, key, h1)), fn, fn)
		}},
		{"two hash functions", "different hash functions", func(_ *Environment, a, b DataStream[int64]) DataStream[int64] {
			return KeyedCoProcess(Connect(KeyByHashed(a, key, h1), KeyByHashed(b, key, h2)), fn, fn)
		}},
		{"nil key selector", "key selector of input 2 is nil", func(_ *Environment, a, b DataStream[int64]) DataStream[int64] {
			return KeyedCoProcess(Connect(KeyBy(a, key), KeyBy[int64](b, nil)), fn, fn)
		}},
		{"nil function", "process function of input 1 is nil", func(_ *Environment, a, b DataStream[int64]) DataStream[int64] {
			return KeyedCoProcess(Connect(KeyBy(a, key), KeyBy(b, key)), nil, fn)
		}},
		{"nil factory", "co-process function factory is nil", func(_ *Environment, a, b DataStream[int64]) DataStream[int64] {
			return KeyedCoProcessPerSubtask[int64, int64, int64, int64](Connect(KeyBy(a, key), KeyBy(b, key)), nil)
		}},
		{"two environments", "different environments", func(_ *Environment, a, _ DataStream[int64]) DataStream[int64] {
			other := NewEnvironment()
			b := FromSource(other, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "other")
			return KeyedCoProcess(Connect(KeyBy(a, key), KeyBy(b, key)), fn, fn)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(WithLogger(discardLogger()))
			a := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "a")
			b := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "b")
			SinkTo(c.build(env, a, b), newCollectSink[int64]())
			err := env.Execute(testCtx(t), "misuse")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Execute: %v, want ErrInvalidGraph saying %q", err, c.want)
			}
		})
	}
}
