package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// Rule (Flink's StreamingJobGraphGenerator#isChainable): an edge is chained
// when it is forward, both ends have the same parallelism, the producer
// allows chaining, the consumer accepts a predecessor (not StartNewChain or
// DisableChaining), it is the consumer's only input, and chaining is on.
func TestChainingDecisions(t *testing.T) {
	id := func(v int) (int, error) { return v, nil }
	keep := func(int) (bool, error) { return true, nil }
	src := func() *memSource[int] {
		return &memSource[int]{numSplits: 1, perSplit: 1, gen: func(_, i int) (int, int64) { return i, 0 }}
	}
	cases := []struct {
		name  string
		opts  []Option
		build func(env *Environment)
		want  [][]string // chains by operator name, in order
	}{
		{
			name: "forward equal parallelism chains everything",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Filter(Map(ds, id).Name("m"), keep).Name("f"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s", "m", "f", "k"}},
		},
		{
			name: "different parallelism breaks the chain (rebalance)",
			opts: []Option{WithParallelism(2)},
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Map(ds, id).Name("m").Parallelism(1), newCollectSink[int]()).Name("k").Parallelism(1)
			},
			want: [][]string{{"Source: s"}, {"m", "k"}},
		},
		{
			name: "keyBy (hash) breaks the chain",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				p := KeyedProcess(KeyBy(ds, func(v int) int { return v }), func(*KeyedContext[int, int], int) error { return nil }).Name("p")
				SinkTo(p, newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s"}, {"p", "k"}},
		},
		{
			name: "rebalance breaks the chain even at equal parallelism",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Map(Rebalance(ds), id).Name("m"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s"}, {"m", "k"}},
		},
		{
			name: "DisableChaining isolates the operator",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Filter(Map(ds, id).Name("m").DisableChaining(), keep).Name("f"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s"}, {"m"}, {"f", "k"}},
		},
		{
			name: "StartNewChain starts a chain its successors join",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Filter(Map(ds, id).Name("m").StartNewChain(), keep).Name("f"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s"}, {"m", "f", "k"}},
		},
		{
			name: "chaining off for the job",
			opts: []Option{WithoutChaining()},
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Map(ds, id).Name("m"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s"}, {"m"}, {"k"}},
		},
		{
			name: "a fork chains both branches",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				SinkTo(Map(ds, id).Name("a"), newCollectSink[int]()).Name("ka")
				SinkTo(Map(ds, id).Name("b"), newCollectSink[int]()).Name("kb")
			},
			want: [][]string{{"Source: s", "a", "ka", "b", "kb"}},
		},
		{
			name: "a union has several inputs: it heads a chain its successors join",
			build: func(env *Environment) {
				a := FromSource(env, src(), "a")
				b := FromSource(env, src(), "b")
				SinkTo(Map(Union(a, b), id).Name("m"), newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: a"}, {"Source: b"}, {"Union", "m", "k"}},
		},
		{
			name: "an operator that reaches no sink is not part of the job",
			build: func(env *Environment) {
				ds := FromSource(env, src(), "s")
				Map(ds, id).Name("dangling")
				SinkTo(ds, newCollectSink[int]()).Name("k")
			},
			want: [][]string{{"Source: s", "k"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(c.opts...)
			c.build(env)
			if err := env.cfg.validate(); err != nil {
				t.Fatal(err)
			}
			g, err := buildJobGraph(env)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, ch := range g.chains {
				var names []string
				for _, n := range ch.nodes {
					names = append(names, n.name)
				}
				got = append(got, names)
			}
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("chains = %v, want %v", got, c.want)
			}
			// The job also runs.
			env.executed = false
			if err := env.Execute(context.Background(), c.name); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Rule: Execute rejects graphs it cannot run, before running anything, with
// an error wrapping ErrInvalidGraph that says what is wrong.
func TestInvalidGraphsAreRejected(t *testing.T) {
	src := func() *memSource[int] {
		return &memSource[int]{numSplits: 1, perSplit: 1, gen: func(_, i int) (int, int64) { return i, 0 }}
	}
	type point struct{ X, Y int }
	cases := []struct {
		name  string
		opts  []Option
		build func(env *Environment)
		msg   string
	}{
		{"no sink", nil, func(env *Environment) {
			Map(FromSource(env, src(), "s"), func(v int) (int, error) { return v, nil })
		}, "no sink"},
		{"zero parallelism", []Option{WithParallelism(0)}, func(env *Environment) {
			SinkTo(FromSource(env, src(), "s"), newCollectSink[int]())
		}, "parallelism must be > 0"},
		{"negative operator parallelism", nil, func(env *Environment) {
			SinkTo(FromSource(env, src(), "s").Parallelism(-1), newCollectSink[int]())
		}, "parallelism must be > 0"},
		{"nil map function", nil, func(env *Environment) {
			SinkTo(Map[int, int](FromSource(env, src(), "s"), nil), newCollectSink[int]())
		}, "map function is nil"},
		{"nil filter function", nil, func(env *Environment) {
			SinkTo(Filter[int](FromSource(env, src(), "s"), nil), newCollectSink[int]())
		}, "filter function is nil"},
		{"nil process function", nil, func(env *Environment) {
			ks := KeyBy(FromSource(env, src(), "s"), func(v int) int { return v })
			SinkTo(KeyedProcess[int, int, int](ks, nil), newCollectSink[int]())
		}, "process function is nil"},
		{"nil key selector", nil, func(env *Environment) {
			ks := KeyBy[int, int](FromSource(env, src(), "s"), nil)
			SinkTo(KeyedProcess(ks, func(*KeyedContext[int, int], int) error { return nil }), newCollectSink[int]())
		}, "key selector is nil"},
		{"key type without stable hash", nil, func(env *Environment) {
			ks := KeyBy(FromSource(env, src(), "s"), func(v int) point { return point{v, v} })
			SinkTo(KeyedProcess(ks, func(*KeyedContext[point, int], int) error { return nil }), newCollectSink[int]())
		}, "use KeyByHashed"},
		{"nil sink", nil, func(env *Environment) {
			SinkTo[int](FromSource(env, src(), "s"), nil)
		}, "sink is nil"},
		{"nil source", nil, func(env *Environment) {
			SinkTo(FromSource[int, *memSplit, int](env, nil, "s"), newCollectSink[int]())
		}, "source is nil"},
		{"max parallelism below parallelism", []Option{WithParallelism(8), WithMaxParallelism(4)}, func(env *Environment) {
			SinkTo(FromSource(env, src(), "s"), newCollectSink[int]())
		}, "max parallelism 4 is below the parallelism 8"},
		{"operator parallelism above max parallelism", []Option{WithMaxParallelism(4)}, func(env *Environment) {
			SinkTo(FromSource(env, src(), "s"), newCollectSink[int]()).Parallelism(5)
		}, "exceeds the max parallelism"},
		{"duplicate uid", nil, func(env *Environment) {
			ds := FromSource(env, src(), "s").UID("same")
			SinkTo(ds, newCollectSink[int]()).UID("same")
		}, "share the uid"},
		{"explicit forward across parallelism", nil, func(env *Environment) {
			ds := FromSource(env, src(), "s")
			SinkTo(Forward(ds), newCollectSink[int]()).Parallelism(2)
		}, "forward needs equal parallelism"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(c.opts...)
			c.build(env)
			err := env.Execute(context.Background(), "invalid")
			if !errors.Is(err, ErrInvalidGraph) {
				t.Fatalf("Execute = %v, want ErrInvalidGraph", err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not say %q", err, c.msg)
			}
		})
	}
}

// Configuration errors come all at once (errors.Join), each naming its
// setting, so a user fixes them in one go: before, Execute named only the
// first bad option, then the first bad operator.
func TestEveryConfigurationErrorIsReportedAtOnce(t *testing.T) {
	t.Run("options", func(t *testing.T) {
		env := NewEnvironment(WithLogger(discardLogger()), WithBufferSize(0), WithCheckpointsRetained(0), WithStateBackend(state.Pebble("", state.PebbleBlockCacheSize(-1))))
		SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range"), newCollectSink[int64]())
		err := env.Execute(testCtx(t), "bad options")
		if !errors.Is(err, ErrInvalidGraph) {
			t.Fatalf("Execute: %v, want ErrInvalidGraph", err)
		}
		for _, want := range []string{"buffer size", "retained checkpoints", "block cache size"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Execute: %v; does not name the %s", err, want)
			}
		}
	})
	t.Run("operators", func(t *testing.T) {
		env := NewEnvironment(WithLogger(discardLogger()))
		ds := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range")
		SinkTo(Map[int64, int64](ds, nil).Name("no function"), newCollectSink[int64]()).Name("first")
		SinkTo(ds, connector.Sink[int64](nil)).Name("nil sink")
		err := env.Execute(testCtx(t), "bad operators")
		if !errors.Is(err, ErrInvalidGraph) {
			t.Fatalf("Execute: %v, want ErrInvalidGraph", err)
		}
		for _, want := range []string{`"no function"`, `"nil sink"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Execute: %v; does not name operator %s", err, want)
			}
		}
		if n := strings.Count(err.Error(), "invalid job graph"); n != 2 {
			t.Errorf("Execute: %v; says invalid job graph %d times, want once per problem (2)", err, n)
		}
	})
}

// Option names: restart.Unlimited (-1) is the one spelling of "no limit" for
// restart attempts; a strategy with fewer attempts than that, or none at
// all, is refused at Execute. Before, any negative number meant no limit
// and a nil strategy failed only at the first restart.
func TestRestartAttemptsOtherThanUnlimitedMustNotBeNegative(t *testing.T) {
	for _, s := range []restart.Strategy{restart.FixedDelay(-2, time.Millisecond),
		restart.ExponentialDelay(-2, time.Millisecond, time.Second, 2), nil} {
		env := NewEnvironment(WithLogger(discardLogger()), WithRestartStrategy(s))
		SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range"), newCollectSink[int64]())
		err := env.Execute(testCtx(t), "bad restart")
		if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "restart") {
			t.Errorf("%v: Execute: %v, want ErrInvalidGraph naming the restart strategy", s, err)
		}
	}
	for _, s := range []restart.Strategy{restart.FixedDelay(restart.Unlimited, time.Millisecond),
		restart.ExponentialDelay(restart.Unlimited, time.Millisecond, time.Second, 2), restart.None()} {
		env := NewEnvironment(WithLogger(discardLogger()), WithRestartStrategy(s))
		sink := newCollectSink[int64]()
		SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 3, readerFailAt: -1}, "range"), sink)
		if err := env.Execute(testCtx(t), "good restart"); err != nil {
			t.Errorf("%v: Execute: %v", s, err)
		}
	}
}
