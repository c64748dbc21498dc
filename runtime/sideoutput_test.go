package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/watermark"
)

var oddTag = NewOutputTag[ev]("odd")

// splitByParity emits even sequence numbers on the main output and odd ones
// on the side output oddTag.
func splitByParity[K comparable](ctx *KeyedContext[K, ev], e ev) error {
	if e.Seq%2 == 0 {
		ctx.Collect(e)
	} else {
		Output(ctx, oddTag, e)
	}
	return nil
}

// seqsOf counts every (split, seq) of es.
func seqsOf(es []ev) map[[2]int]int {
	m := map[[2]int]int{}
	for _, e := range es {
		m[[2]int{e.Split, e.Seq}]++
	}
	return m
}

// checkParitySplit checks that main holds every even record of the input
// once and side every odd one once.
func checkParitySplit(t *testing.T, splits, perSplit int, main, side []ev) {
	t.Helper()
	for name, got := range map[string][]ev{"main": main, "side": side} {
		want := 0
		for _, e := range got {
			if (e.Seq%2 == 1) != (name == "side") {
				t.Fatalf("%s output has record %+v", name, e)
			}
		}
		seen := seqsOf(got)
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("%s output has record %v %d times", name, k, n)
			}
		}
		for range splits {
			for i := range perSplit {
				if (i%2 == 1) == (name == "side") {
					want++
				}
			}
		}
		if len(seen) != want {
			t.Fatalf("%s output has %d distinct records, want %d", name, len(seen), want)
		}
	}
}

// A side stream behaves like any stream: whether its consumer is chained
// to the operator, behind a hash shuffle or in a task of its own, at any
// parallelism, it gets each record emitted to it exactly once and the
// main output is untouched.
func TestSideOutputIsAStreamLikeAnyOther(t *testing.T) {
	for _, par := range []int{1, 2} {
		for _, shape := range []string{"chained", "keyBy", "ownTask", "rebalance", "twice"} {
			for _, producer := range []string{"Process", "ProcessStream"} {
				t.Run(fmt.Sprintf("p%d/%s/%s", par, shape, producer), func(t *testing.T) {
					const splits, perSplit = 3, 500
					env := NewEnvironment(WithParallelism(par), WithBufferSize(32), WithLogger(discardLogger()))
					src := &memSource[ev]{numSplits: splits, perSplit: perSplit, gen: genEv(11), perPoll: 50}
					ds := FromSource(env, src, "mem")
					var main DataStream[ev]
					if producer == "Process" {
						main = KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), splitByParity[string])
					} else {
						main = Process(ds, func(ctx *ProcessContext[ev], e ev) error {
							if e.Seq%2 == 0 {
								ctx.Collect(e)
							} else {
								Output(ctx, oddTag, e)
							}
							return nil
						})
					}
					main = main.DeclareSideOutputs(oddTag)
					side := SideOutput(main, oddTag)
					switch shape {
					case "keyBy":
						side = KeyedProcess(KeyBy(side, func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, ev], e ev) error {
							ctx.Collect(e)
							return nil
						})
					case "ownTask":
						side = Map(side, func(e ev) (ev, error) { return e, nil }).DisableChaining()
					case "rebalance":
						side = Map(Rebalance(side), func(e ev) (ev, error) { return e, nil }).Parallelism(1)
					}
					mainSink, sideSink := newCollectSink[ev](), newCollectSink[ev]()
					SinkTo(main, mainSink)
					SinkTo(side, sideSink)
					var again *collectSink[ev]
					if shape == "twice" {
						again = newCollectSink[ev]()
						SinkTo(SideOutput(main, oddTag), again)
					}
					if err := env.Execute(testCtx(t), "side"); err != nil {
						t.Fatal(err)
					}
					checkParitySplit(t, splits, perSplit, mainSink.all(), sideSink.all())
					if again != nil {
						checkParitySplit(t, splits, perSplit, mainSink.all(), again.all())
					}
				})
			}
		}
	}
}

// A side stream carries its operator's watermarks: event-time timers of a
// keyed operator reading it fire, whether it is chained to the side
// stream or behind a shuffle. Timers registered at every record's
// timestamp fire only as the watermark passes them, so every side record
// yields one timer firing.
func TestSideOutputCarriesWatermarks(t *testing.T) {
	for _, par := range []int{1, 2} {
		t.Run(fmt.Sprint(par), func(t *testing.T) {
			const splits, perSplit = 2, 300
			env := NewEnvironment(WithParallelism(par), WithLogger(discardLogger()), WithAutoWatermarkInterval(time.Millisecond))
			src := &memSource[ev]{numSplits: splits, perSplit: perSplit, gen: genEv(5), perPoll: 20}
			ds := FromSource(env, src, "mem", WithWatermarks(watermark.ForMonotonousTimestamps[ev]()))
			main := KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), splitByParity[string]).DeclareSideOutputs(oddTag)
			side := SideOutput(main, oddTag)
			fired := KeyedProcess(KeyBy(side, func(e ev) int { return e.Split*perSplit + e.Seq }),
				func(ctx *KeyedContext[int, int], e ev) error {
					ctx.RegisterEventTimeTimer(ctx.Timestamp())
					return nil
				},
				OnTimer(func(ctx *KeyedContext[int, int], tm Timer) error {
					if ctx.CurrentWatermark() < tm.Timestamp {
						return fmt.Errorf("timer %d fired at watermark %d", tm.Timestamp, ctx.CurrentWatermark())
					}
					ctx.Collect(ctx.Key())
					return nil
				}))
			sink := newCollectSink[int]()
			SinkTo(fired, sink)
			SinkTo(main, newCollectSink[ev]())
			if err := env.Execute(testCtx(t), "side-watermarks"); err != nil {
				t.Fatal(err)
			}
			got := sink.all()
			slices.Sort(got)
			var want []int
			for s := range splits {
				for i := 1; i < perSplit; i += 2 {
					want = append(want, s*perSplit+i)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("timers fired for %d side records, want %d", len(got), len(want))
			}
		})
	}
}

// Exactly-once on a side stream: a job whose keyed operator splits the
// input between its main output and a side output, each into a two-phase
// sink (the side one behind a rebalance, so barriers cross a network edge
// and are aligned), fails at random records and restarts from its
// checkpoints; the two sinks' committed records together are the input,
// each once, each in the right sink.
func TestSideOutputIsExactlyOnceThroughFailover(t *testing.T) {
	for seed := range 12 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			par := 1 + rng.IntN(3)
			src := &rangeSrc{splits: 1 + rng.IntN(5), perSplit: 10 + rng.IntN(40), readerFailAt: -1,
				delay: time.Duration(rng.IntN(300)) * time.Microsecond}
			n := src.splits * src.perSplit
			var fails []int64
			for range 1 + rng.IntN(3) {
				fails = append(fails, int64(rng.IntN(n)))
			}
			env := NewEnvironment(WithParallelism(par), WithFlushTimeout(time.Millisecond),
				WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), WithLogger(discardLogger()),
				WithCheckpointInterval(time.Duration(2+rng.IntN(8))*time.Millisecond))
			odd := NewOutputTag[int64]("odd")
			ds := Map(FromSource(env, src, "range").UID("src"), failOnce(fails...)).UID("map")
			main := KeyedProcess(KeyBy(ds, func(v int64) int64 { return v % 7 }), func(ctx *KeyedContext[int64, int64], v int64) error {
				if v%2 == 0 {
					ctx.Collect(v)
				} else {
					Output(ctx, odd, v)
				}
				return nil
			}).UID("split").DeclareSideOutputs(odd)
			mainSink := &txnSink2PC{store: newTxnStore()}
			sideSink := &txnSink2PC{store: newTxnStore()}
			SinkTo(main, twoPhase(mainSink)).UID("main-sink")
			SinkTo(Rebalance(SideOutput(main, odd)), twoPhase(sideSink)).UID("side-sink")
			var mu sync.Mutex
			completed := 0
			env.hooks = &testHooks{checkpointCompleted: func(int64, checkpoint.Storage) {
				mu.Lock()
				completed++
				mu.Unlock()
			}}
			if err := env.Execute(testCtx(t), "side-exactly-once"); err != nil {
				t.Fatal(err)
			}
			if completed == 0 {
				t.Fatal("no checkpoint completed")
			}
			seen := make([]int, n)
			for name, store := range map[string]*txnStore{"main": mainSink.store, "side": sideSink.store} {
				store.mu.Lock()
				for _, rs := range store.committed {
					for _, r := range rs {
						if r < 0 || r >= int64(n) {
							t.Fatalf("%s committed %d, outside [0,%d)", name, r, n)
						}
						if (r%2 == 1) != (name == "side") {
							t.Fatalf("%s committed %d", name, r)
						}
						seen[r]++
					}
				}
				store.mu.Unlock()
			}
			for r, c := range seen {
				if c != 1 {
					t.Fatalf("par=%d splits=%d perSplit=%d fails=%v: record %d committed %d times", par, src.splits, src.perSplit, fails, r, c)
				}
			}
		})
	}
}

// Bad use of side outputs is refused when the job is built, with an error
// that says what to do, or fails the job when a function emits to a side
// output its operator does not declare.
func TestSideOutputMisuseIsRefused(t *testing.T) {
	keyed := func(env *Environment) DataStream[ev] {
		src := &memSource[ev]{numSplits: 1, perSplit: 10, gen: genEv(3)}
		return KeyedProcess(KeyBy(FromSource(env, src, "mem"), func(e ev) string { return e.Key }), splitByParity[string])
	}
	cases := []struct {
		name  string
		build func(env *Environment)
		want  string
	}{
		{"id with two types", func(env *Environment) {
			p := keyed(env).DeclareSideOutputs(oddTag)
			SinkTo(SideOutput(p, oddTag), newCollectSink[ev]())
			q := keyed(env).DeclareSideOutputs(NewOutputTag[string]("odd"))
			SinkTo(SideOutput(q, NewOutputTag[string]("odd")), newCollectSink[string]())
		}, `side output id "odd" is used with two types`},
		{"SideOutput of an undeclared tag", func(env *Environment) {
			SinkTo(SideOutput(keyed(env), oddTag), newCollectSink[ev]())
		}, `which does not declare it: declare it there with DeclareSideOutputs`},
		{"SideOutput from the stream of another operator", func(env *Environment) {
			p := keyed(env).Name("splitter").DeclareSideOutputs(oddTag)
			SinkTo(SideOutput(Map(p, func(e ev) (ev, error) { return e, nil }), oddTag), newCollectSink[ev]())
		}, `it is declared by operator "splitter": take it from that operator's stream`},
		{"same id twice", func(env *Environment) {
			p := keyed(env).DeclareSideOutputs(oddTag, NewOutputTag[ev]("odd"))
			SinkTo(SideOutput(p, oddTag), newCollectSink[ev]())
		}, `declares side output "odd" twice`},
		{"declared on a Map", func(env *Environment) {
			m := Map(keyed(env), func(e ev) (ev, error) { return e, nil }).DeclareSideOutputs(oddTag)
			SinkTo(SideOutput(m, oddTag), newCollectSink[ev]())
		}, `only sources, Process, KeyedProcess and KeyedProcessPerSubtask emit them`},
		{"tag without an id", func(env *Environment) {
			p := keyed(env).DeclareSideOutputs(OutputTag[ev]{})
			SinkTo(SideOutput(p, OutputTag[ev]{}), newCollectSink[ev]())
		}, `tag has no id`},
		{"parallelism of a side stream", func(env *Environment) {
			p := keyed(env).DeclareSideOutputs(oddTag)
			SinkTo(SideOutput(p, oddTag).Parallelism(3), newCollectSink[ev]())
		}, `Parallelism on a side stream`},
		{"side output of a repartitioned stream", func(env *Environment) {
			p := keyed(env).DeclareSideOutputs(oddTag)
			SinkTo(SideOutput(Rebalance(p), oddTag), newCollectSink[ev]())
		}, `not a repartitioned one`},
		{"emitting to an undeclared tag", func(env *Environment) {
			SinkTo(keyed(env), newCollectSink[ev]())
		}, `side output "odd" (runtime.ev) is not declared`},
		{"emitting to a tag the operator does not declare", func(env *Environment) {
			SinkTo(keyed(env).DeclareSideOutputs(NewOutputTag[ev]("late")), newCollectSink[ev]())
		}, `side output "odd" (runtime.ev) is not declared by this operator`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(WithLogger(discardLogger()), WithRestartStrategy(restart.FixedDelay(3, time.Millisecond)))
			c.build(env)
			err := env.Execute(context.Background(), "misuse")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
			if strings.HasPrefix(c.name, "emitting") {
				var ue *unrecoverableError
				if !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a failure without restarts", err)
				}
			} else if !errors.Is(err, ErrInvalidGraph) {
				t.Fatalf("err = %v, want ErrInvalidGraph", err)
			}
		})
	}
}

// BenchmarkSideOutputMainPath is BenchmarkChainedPipeline with its filter
// a ProcessStream: without side outputs ("none"), and declaring one that
// a sink consumes but that gets no records ("declared"), so that the cost
// of side outputs on the main path shows as the ratio of the two (and to
// BenchmarkChainedPipeline) in one run. "half" sends every other record
// to the side output.
func BenchmarkSideOutputMainPath(b *testing.B) {
	side := NewOutputTag[int]("side")
	for _, mode := range []string{"none", "declared", "half"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			var total, sideTotal int64
			env := NewEnvironment(WithLogger(discardLogger()))
			ds := FromSource(env, &countSource{total: b.N}, "count")
			ds = Map(ds, func(v int) (int, error) { return v + 1, nil })
			ds = Process(ds, func(ctx *ProcessContext[int], v int) error {
				if mode == "half" && v%2 == 0 {
					Output(ctx, side, v)
					return nil
				}
				if v >= 0 {
					ctx.Collect(v)
				}
				return nil
			})
			if mode != "none" {
				ds = ds.DeclareSideOutputs(side)
				SinkTo(SideOutput(ds, side), countingSink[int]{total: &sideTotal})
			}
			SinkTo(ds, countingSink[int]{total: &total})
			b.ResetTimer()
			start := time.Now()
			if err := env.Execute(context.Background(), "side"); err != nil {
				b.Fatal(err)
			}
			reportPerRecord(b, start)
			if total+sideTotal != int64(b.N) {
				b.Fatalf("sinks counted %d, want %d", total+sideTotal, b.N)
			}
		})
	}
}
