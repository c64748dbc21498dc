package runtime

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// The face of the join functions for the window harness (openWin).
func (f *intervalJoinFn[K, A, B, O]) setClock(func() int64) {}
func (f *intervalJoinFn[K, A, B, O]) lateDropped() int64    { return f.droppedLate }

// jRec is a record of either side of the join tests: its key and an id.
type jRec = KV[string, int]

// jPair is a join result: the ids of its two records and its timestamp.
type jPair struct {
	X, Y int
	Ts   int64
}

func sortedPairs(ps []jPair) []jPair {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b jPair) int {
		return cmp.Or(cmp.Compare(a.X, b.X), cmp.Compare(a.Y, b.Y), cmp.Compare(a.Ts, b.Ts))
	})
	return ps
}

func intervalStream(lower, upper time.Duration) DataStream[jPair] {
	env := NewEnvironment()
	a := DataStream[jRec]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[jRec]{}})}
	b := DataStream[jRec]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[jRec]{}})}
	key := func(r jRec) string { return r.Key }
	return IntervalJoin(KeyBy(a, key), KeyBy(b, key), lower, upper, func(x, y jRec) (jPair, error) {
		return jPair{X: x.Value, Y: y.Value}, nil
	})
}

type jOp = winOp[string, either[jRec, jRec], jPair]

func openInterval(t testing.TB, lower, upper time.Duration, b backendKind, chk *checkpoint.Checkpoint, par, sub int) *jOp {
	t.Helper()
	return openWin[string, either[jRec, jRec]](t, intervalStream(lower, upper), unitStateConfig(t, b), chk, par, sub)
}

// pairs takes what the join emitted, with its timestamps.
func pairs(w *jOp) []jPair {
	out := slices.Clone(w.out.vals)
	for i := range out {
		out[i].Ts = w.out.ts[i]
	}
	w.out.take()
	return out
}

// bufferedKeys counts the keys among keys with records in either buffer,
// and on the heap backend checks the buffers hold no other key.
func bufferedKeys(t testing.TB, w *jOp, keys []string) int {
	t.Helper()
	n, pairs := 0, 0
	for _, k := range keys {
		w.p.state.SetKey(k)
		has := false
		for _, name := range []string{intervalLeftState, intervalRightState} {
			if s, ok := w.p.state.States[name].(interface{ Len() int }); ok && s.Len() > 0 {
				has = true
				pairs++
			}
		}
		if has {
			n++
		}
	}
	if w.p.state.Err != nil {
		t.Fatal(w.p.state.Err)
	}
	if w.p.state.Pebble == nil {
		heap := 0
		for _, s := range w.p.state.States {
			if c, ok := s.(interface{ HeapKeys() int }); ok {
				heap += c.HeapKeys()
			}
		}
		if heap != pairs {
			t.Fatalf("heap state holds %d keys' buffers, %d of them of known keys", heap, pairs)
		}
	}
	return n
}

// joinModel is the interval join's rule written out plainly: a record
// at or behind the watermark is dropped; any other joins every record of
// the other side of its key that came before it and was not dropped,
// when their timestamps are within the bounds, at the larger timestamp.
// It forgets nothing.
type joinModel struct {
	lower, upper int64
	wm           int64
	left, right  map[string][]jPair // X: id, Ts: timestamp
	dropped      int64
}

func (m *joinModel) add(second bool, key string, id int, ts int64) []jPair {
	if ts <= m.wm {
		m.dropped++
		return nil
	}
	var out []jPair
	if !second {
		for _, y := range m.right[key] {
			if y.Ts >= ts+m.lower && y.Ts <= ts+m.upper {
				out = append(out, jPair{id, y.X, max(ts, y.Ts)})
			}
		}
		m.left[key] = append(m.left[key], jPair{X: id, Ts: ts})
		return out
	}
	for _, x := range m.left[key] {
		if ts >= x.Ts+m.lower && ts <= x.Ts+m.upper {
			out = append(out, jPair{x.X, id, max(ts, x.Ts)})
		}
	}
	m.right[key] = append(m.right[key], jPair{X: id, Ts: ts})
	return out
}

// Rule: the interval join emits, at the larger timestamp, every pair of
// records of one key whose second's timestamp is within [first's +
// lower, first's + upper], bounds included, once, whatever the order the
// records arrive in (out of order within the watermark); drops and
// counts the records at or behind the watermark; and once the input
// ends no key keeps a buffered record and no timer is left. Bounds on
// both sides of zero, one-sided and a point; both backends; against the
// model over random records and watermarks.
func TestIntervalJoinFollowsTheModel(t *testing.T) {
	bounds := [][2]int64{{-3, 5}, {0, 0}, {2, 6}, {-6, -2}, {-4, 0}, {0, 4}}
	keys := []string{"a", "b", "c"}
	for _, b := range stateBackends {
		for _, bd := range bounds {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("%s/[%d,%d]/%d", b, bd[0], bd[1], seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 7))
					w := openInterval(t, time.Duration(bd[0])*time.Millisecond, time.Duration(bd[1])*time.Millisecond, b, nil, 1, 0)
					defer w.stop()
					m := &joinModel{lower: bd[0], upper: bd[1], wm: math.MinInt64, left: map[string][]jPair{}, right: map[string][]jPair{}}
					maxTs, wm := int64(0), int64(-5)
					emitted := 0
					for step := range 500 {
						var want []jPair
						if rng.IntN(6) == 0 {
							wm = max(wm, maxTs-int64(rng.IntN(10)))
							m.wm = max(m.wm, wm)
							w.watermark(t, wm)
						} else {
							second := rng.IntN(2) == 1
							k := keys[rng.IntN(len(keys))]
							ts := maxTs + int64(rng.IntN(4)) - int64(rng.IntN(14))
							maxTs = max(maxTs, ts)
							want = m.add(second, k, step, ts)
							e := left[jRec, jRec](jRec{k, step})
							if second {
								e = right[jRec](jRec{k, step})
							}
							w.add(t, e, ts)
						}
						got := pairs(w)
						emitted += len(got)
						if !slices.Equal(sortedPairs(got), sortedPairs(want)) {
							t.Fatalf("step %d: emitted %v, the model %v", step, sortedPairs(got), sortedPairs(want))
						}
						if d := w.fn().lateDropped(); d != m.dropped {
							t.Fatalf("step %d: %d records dropped as late, the model %d", step, d, m.dropped)
						}
					}
					w.watermark(t, engine.MaxWatermark)
					if got := pairs(w); len(got) != 0 {
						t.Fatalf("the end of input emitted %v", got)
					}
					if n := bufferedKeys(t, w, keys); n != 0 {
						t.Fatalf("%d keys keep buffered records after the end of input", n)
					}
					if n := w.timersLeft(); n != 0 {
						t.Fatalf("%d timers left after the end of input", n)
					}
					if emitted == 0 || m.dropped == 0 {
						t.Fatalf("%d pairs emitted, %d records dropped: the run proves less than it says", emitted, m.dropped)
					}
				})
			}
		}
	}
}

// Rule: both bounds are inclusive, and the buffers go as soon as the
// watermark passes what can still match: bounds [-2, 3] (a record of
// the second side 2 ms before to 3 ms after one of the first).
func TestIntervalJoinBoundsAndCleanup(t *testing.T) {
	forEachBackend := func(f func(t *testing.T, b backendKind)) {
		for _, b := range stateBackends {
			t.Run(string(b), func(t *testing.T) { f(t, b) })
		}
	}
	forEachBackend(func(t *testing.T, b backendKind) {
		w := openInterval(t, -2*time.Millisecond, 3*time.Millisecond, b, nil, 1, 0)
		defer w.stop()
		type step struct {
			second bool
			id     int
			ts     int64 // a watermark when id is 0
			want   []jPair
			left   int // keys with buffered records after the step
		}
		steps := []step{
			{false, 1, 10, nil, 1},
			{true, 2, 7, nil, 1},                   // 7 < 10-2
			{true, 3, 8, []jPair{{1, 3, 10}}, 1},   // 10-2: the lower bound
			{true, 4, 13, []jPair{{1, 4, 13}}, 1},  // 10+3: the upper bound
			{true, 5, 14, nil, 1},                  // past it
			{false, 6, 16, []jPair{{6, 5, 16}}, 1}, // [14, 19]
			{false, 0, 12, nil, 1},                 // the watermark: 1 stays (until 13), 2 and 3 went (at 9 and 10)
			{true, 7, 13, []jPair{{1, 7, 13}}, 1},  // still joins 1 (10+3)
			{false, 0, 13, nil, 1},                 // 1 goes; 4, 7 stay until 15
			{true, 8, 13, nil, 1},                  // at the watermark: late
			{false, 0, 19, nil, 0},                 // everything gone
		}
		for i, s := range steps {
			if s.id == 0 {
				w.watermark(t, s.ts)
			} else if s.second {
				w.add(t, right[jRec](jRec{"k", s.id}), s.ts)
			} else {
				w.add(t, left[jRec, jRec](jRec{"k", s.id}), s.ts)
			}
			if got := sortedPairs(pairs(w)); !slices.Equal(got, s.want) {
				t.Fatalf("step %d: emitted %v, want %v", i, got, s.want)
			}
			if n := bufferedKeys(t, w, []string{"k"}); n != s.left {
				t.Fatalf("step %d: %d keys buffered, want %d", i, n, s.left)
			}
		}
		if d := w.fn().lateDropped(); d != 1 {
			t.Fatalf("%d records dropped as late, want 1", d)
		}
		w.p.state.SetKey("k")
		l, _ := w.p.state.States[intervalLeftState].(interface{ Len() int })
		r, _ := w.p.state.States[intervalRightState].(interface{ Len() int })
		if l.Len()+r.Len() != 0 {
			t.Fatalf("buffers hold %d and %d timestamps", l.Len(), r.Len())
		}
	})
}

// Build-time refusals of the joins.
func TestJoinMisuseIsRefused(t *testing.T) {
	key := func(v int64) int64 { return v }
	pair := func(x, y int64) (int64, error) { return x + y, nil }
	for _, c := range []struct {
		name, want string
		build      func(a, b KeyedStream[int64, int64]) DataStream[int64]
	}{
		{"lower above upper", "lower bound is above the upper bound", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return IntervalJoin(a, b, 5*time.Millisecond, time.Millisecond, pair)
		}},
		{"fractional bound", "whole numbers of milliseconds", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return IntervalJoin(a, b, -time.Microsecond, time.Millisecond, pair)
		}},
		{"nil interval function", "join function is nil", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return IntervalJoin[int64, int64, int64, int64](a, b, 0, time.Millisecond, nil)
		}},
		{"nil window function", "join function is nil", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return WindowJoin[int64, int64, int64, int64](a, b, window.Tumbling(time.Second), nil)
		}},
		{"zero assigner", "zero window.Assigner", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return WindowJoin(a, b, window.Assigner{}, pair)
		}},
		{"late data side output", "WithSideOutputLateRecords does not apply to WindowJoin", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			return WindowJoin(a, b, window.Tumbling(time.Second), pair, WithSideOutputLateRecords(NewOutputTag[int64]("late")))
		}},
		{"different hashes", "different hashes", func(a, b KeyedStream[int64, int64]) DataStream[int64] {
			b = KeyByHashed(b.stream, key, func(v int64) uint32 { return uint32(v) })
			return IntervalJoin(a, b, 0, time.Millisecond, pair)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(WithLogger(discardLogger()))
			a := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "a")
			b := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "b")
			SinkTo(c.build(KeyBy(a, key), KeyBy(b, key)), newCollectSink[int64]())
			err := env.Execute(testCtx(t), "misuse")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Execute: %v, want ErrInvalidGraph saying %q", err, c.want)
			}
		})
	}
}

// intervalJob joins the even records of src (first input) with the odd
// ones (second input), each timestamped with its value, by key v%3 and
// bounds [-7, 5], into the two-phase test sink as x*1000+y.
func intervalJob(par int, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
		WithDrainTimeout(5 * time.Second), WithAutoWatermarkInterval(time.Millisecond)}, opts...)...)
	ds := Map(FromSource(env, src, "range", WithWatermarks(watermark.ForMonotonousTimestamps[int64]().
		WithTimestampAssigner(func(v, _ int64) int64 { return v }))).UID("src"), mapFn).UID("map")
	key := func(v int64) int64 { return v % 3 }
	evens := KeyBy(Filter(ds, func(v int64) (bool, error) { return v%2 == 0, nil }), key)
	odds := KeyBy(Filter(ds, func(v int64) (bool, error) { return v%2 == 1, nil }), key)
	joined := IntervalJoin(evens, odds, -7*time.Millisecond, 5*time.Millisecond, func(x, y int64) (int64, error) {
		return x*1000 + y, nil
	}).UID("join")
	SinkTo(joined, twoPhase(sink)).UID("sink")
	return env
}

// checkIntervalPairs: every pair of intervalJob over records 0..n-1 was
// committed once, and nothing else.
func checkIntervalPairs(t *testing.T, store *txnStore, n int64) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]int{}
	for _, rs := range store.committed {
		for _, r := range rs {
			seen[r]++
		}
	}
	want := 0
	for x := int64(0); x < n; x += 2 {
		for y := int64(1); y < n; y += 2 {
			if x%3 != y%3 || y < x-7 || y > x+5 {
				continue
			}
			want++
			if c := seen[x*1000+y]; c != 1 {
				t.Fatalf("pair (%d, %d) committed %d times, want once", x, y, c)
			}
		}
	}
	if len(seen) != want {
		t.Fatalf("%d distinct results committed, want the %d pairs", len(seen), want)
	}
}

// Rule (exactly-once): an interval join whose job fails at random
// records and restarts from its checkpoints commits every pair once,
// with its buffers and cleanup timers restored; parallelism 1 to 3,
// both backends.
func TestIntervalJoinExactlyOnceUnderFailures(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for seed := range 3 {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), 5))
				par, splits, per := 1+rng.IntN(3), 2+rng.IntN(3), 20+rng.IntN(30)
				n := splits * per
				fails := []int64{int64(rng.IntN(n)), int64(rng.IntN(n))}
				src := &rangeSrc{splits: splits, perSplit: per, delay: time.Duration(rng.IntN(300)) * time.Microsecond, readerFailAt: -1}
				store := newTxnStore()
				env := intervalJob(par, src, failOnce(fails...), &txnSink2PC{store: store},
					WithCheckpointInterval(time.Duration(2+rng.IntN(5))*time.Millisecond), WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), backend)
				if err := env.Execute(testCtx(t), "interval join"); err != nil {
					t.Fatalf("par %d fails=%v: %v", par, fails, err)
				}
				if env.Status().Restarts == 0 {
					t.Fatal("the job never failed over; the test proves less than it says")
				}
				checkIntervalPairs(t, store, int64(n))
			})
		}
	})
}

// The interval join's buffers and timers move with their key groups: a
// job killed at parallelism 2 (3) after a checkpoint that holds buffered
// records goes on at 3 (1), and every pair is committed once.
func TestIntervalJoinRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, pars := range [][2]int{{2, 3}, {3, 1}} {
			t.Run(fmt.Sprintf("%d->%d", pars[0], pars[1]), func(t *testing.T) {
				dir := t.TempDir()
				store := newTxnStore()
				dieMidStream(t, pars[0], func(src *rangeSrc, kill func(int64) (int64, error), opts ...Option) *Environment {
					return intervalJob(pars[0], src, kill, &txnSink2PC{store: store}, append(opts, WithCheckpointDir(dir), backend)...)
				})
				src2 := &rangeSrc{splits: 4, perSplit: 40, readerFailAt: -1}
				env2 := intervalJob(pars[1], src2, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: store},
					WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), backend)
				if err := env2.Execute(testCtx(t), "first"); err != nil {
					t.Fatal(err)
				}
				checkIntervalPairs(t, store, 160)
			})
		}
	})
}

// BenchmarkIntervalJoin measures an interval join per record on each
// backend, beside "keyed-count", a running count per key in a ValueState
// through the same operator, in the same run: the ratio is what the join
// costs over plain keyed state. Record i has key i%1000, timestamp i, and
// is of the first input in even thousands and of the second in odd ones;
// with bounds [0, 1000] each record of the first input meets the next
// record of its key, and a watermark every 1000 records cleans the
// buffers, so a key holds one or two timestamps. ns/op is per record.
func BenchmarkIntervalJoin(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	for _, backend := range stateBackends {
		b.Run(string(backend)+"/interval-join", func(b *testing.B) {
			w := openWin[string, either[jRec, jRec]](b, intervalStream(0, time.Second), benchStateConfig(b, backend), nil, 1, 0)
			defer w.stop()
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				r := jRec{keys[i%1000], int(i)}
				e := left[jRec, jRec](r)
				if (i/1000)%2 == 1 {
					e = right[jRec](r)
				}
				if err := w.p.Collect(e, i); err != nil {
					b.Fatal(err)
				}
				i++
				if i%1000 == 0 {
					if err := w.p.EmitWatermark(i - 1); err != nil {
						b.Fatal(err)
					}
					w.out.take()
				}
			}
		})
		b.Run(string(backend)+"/keyed-count", func(b *testing.B) {
			var count state.ValueState[int64]
			p, stop, err := openKeyedOn(b, benchStateConfig(b, backend), nil, 1, 0, benchCount(&count))
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			p.fn = KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error {
				c, _ := count.Value()
				count.Update(c + 1)
				return nil
			}}
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				if err := p.Collect(keys[i%1000], i); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
