package runtime

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// encodeWinCount packs a count result of windows of 10ms over keys 0..2
// into the int64 the test sink keeps.
func encodeWinCount(r window.Result[int64, int64]) int64 {
	return ((r.Window.Start/10)*3+r.Key)*1000 + r.Value*10 + int64(r.Firing)
}

// Rule (exactly-once, invariant of the two-phase sink): a windowed job
// that fails at random records and restarts from its checkpoints commits
// each window's results once: one on-time result per window, no result
// twice, and every window's last result is its full count. Records reach
// windows out of order across splits; the allowed lateness keeps them
// all, so a record a restart makes late updates its window instead of
// being dropped.
func TestWindowResultsExactlyOnceUnderFailures(t *testing.T) {
	for seed := range 4 {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 11))
			j := &rangeJob{par: 1 + rng.IntN(3), splits: 2 + rng.IntN(3), perSplit: 20 + rng.IntN(30),
				delay: time.Duration(rng.IntN(300)) * time.Microsecond}
			n := j.records()
			var fails []int64
			for range 1 + rng.IntN(2) {
				fails = append(fails, int64(rng.IntN(n)))
			}
			j.sink = &txnSink2PC{store: newTxnStore()}
			j.src = &rangeSrc{splits: j.splits, perSplit: j.perSplit, delay: j.delay, readerFailAt: -1}
			env := NewEnvironment(WithParallelism(j.par), WithFlushTimeout(time.Millisecond),
				WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), WithLogger(discardLogger()),
				WithDrainTimeout(5*time.Second), WithCheckpointInterval(time.Duration(2+rng.IntN(6))*time.Millisecond),
				WithAutoWatermarkInterval(time.Millisecond))
			src := FromSource(env, j.src, "range", WithWatermarks(watermark.ForMonotonousTimestamps[int64]().
				WithTimestampAssigner(func(v, _ int64) int64 { return v }))).UID("src")
			vals := Map(src, failOnce(fails...)).UID("map")
			counts := WindowCount(Window(KeyBy(vals, func(v int64) int64 { return v % 3 }),
				window.Tumbling(10*time.Millisecond), WithAllowedLateness(time.Hour))).UID("window")
			SinkTo(Map(counts, func(r window.Result[int64, int64]) (int64, error) { return encodeWinCount(r), nil }).UID("encode"), twoPhase(j.sink)).UID("sink")
			if err := env.Execute(testCtx(t), "windows"); err != nil {
				t.Fatalf("%+v fails=%v: %v", j, fails, err)
			}
			want := map[int64]int64{} // window (start/10*3+key) -> count
			for v := range int64(n) {
				want[(v/10)*3+v%3]++
			}
			j.sink.store.mu.Lock()
			defer j.sink.store.mu.Unlock()
			seen := map[int64]bool{}
			onTime := map[int64]int{}
			last := map[int64]int64{}
			for _, rs := range j.sink.store.committed {
				for _, r := range rs {
					if seen[r] {
						t.Fatalf("fails=%v: result %d committed twice", fails, r)
					}
					seen[r] = true
					win, count, firing := r/1000, r%1000/10, window.Firing(r%10)
					if firing == window.OnTime {
						onTime[win]++
					}
					last[win] = max(last[win], count)
				}
			}
			for win, c := range want {
				if onTime[win] != 1 || last[win] != c {
					t.Fatalf("fails=%v: window %d: %d on-time results, last count %d, want 1 and %d", fails, win, onTime[win], last[win], c)
				}
			}
			if len(last) != len(want) {
				t.Fatalf("fails=%v: results of %d windows, want %d", fails, len(last), len(want))
			}
		})
	}
}

// BenchmarkWindowTumblingCount measures a tumbling-window count per
// record on each backend, over 1000 keys with a watermark every 1000
// records (each window holds about one record per key, so every
// watermark fires and clears a window of each key), beside "keyed-count",
// a running count per key in a ValueState through the same operator: the
// ratio is what windows cost over plain keyed state.
func BenchmarkWindowTumblingCount(b *testing.B) {
	for _, backend := range stateBackends {
		b.Run(string(backend)+"/window", func(b *testing.B) {
			w := openWin[string, string](b, countStream(window.Tumbling(time.Second)), benchStateConfig(b, backend), nil, 1, 0)
			defer w.stop()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "word-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				if err := w.p.Collect(keys[i%1000], i); err != nil {
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
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "word-" + strconv.Itoa(i)
			}
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

// BenchmarkWindowTimersOnce measures a window record's cost with its
// window's timers registered once (the operator's way) against
// registered on every record (the baseline, alwaysRegister), in one run:
// a tumbling count of 100 keys whose windows hold 10 records each, and a
// session count whose records fall inside sessions already open half the
// time. ns/op is per record.
func BenchmarkWindowTimersOnce(b *testing.B) {
	for _, backend := range stateBackends {
		for _, c := range []struct {
			name string
			a    window.Assigner
			ts   func(i int64) int64
		}{
			// Key i%100 at i ms: a 1s window holds 10 records per key.
			{"tumbling", window.Tumbling(time.Second), func(i int64) int64 { return i }},
			// Two records per key at the same time, 500 ms apart per
			// pair: the second lands inside the session the first made.
			{"session", window.Session(100 * time.Millisecond), func(i int64) int64 { return i / 200 * 500 }},
		} {
			for _, mode := range []string{"once", "every-record"} {
				b.Run(string(backend)+"/"+c.name+"/"+mode, func(b *testing.B) {
					w := openWin[string, string](b, countStream(c.a), benchStateConfig(b, backend), nil, 1, 0)
					defer w.stop()
					w.p.fn.(*windowFn[string, string, int64, window.Result[string, int64]]).alwaysRegister = mode == "every-record"
					keys := make([]string, 100)
					for i := range keys {
						keys[i] = "user-" + strconv.Itoa(i)
					}
					b.ReportAllocs()
					i := int64(0)
					for b.Loop() {
						if err := w.p.Collect(keys[i%100], c.ts(i)); err != nil {
							b.Fatal(err)
						}
						i++
						if i%1000 == 0 {
							if err := w.p.EmitWatermark(c.ts(i) - 1000); err != nil {
								b.Fatal(err)
							}
							w.out.take()
						}
					}
				})
			}
		}
	}
}

// Rule (exactly-once, invariant of the two-phase sink): a window join
// that fails at random records and restarts from its checkpoints commits
// every pair once. Its windows fire many times (early every millisecond,
// and again for each record a restart makes late, within the allowed
// lateness), and each firing emits only the pairs no committed firing
// emitted: the marks of what fired are checkpointed with the records.
func TestWindowJoinPairsExactlyOnceUnderFailures(t *testing.T) {
	for seed := range 4 {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 23))
			j := &rangeJob{par: 1 + rng.IntN(3), splits: 2 + rng.IntN(3), perSplit: 20 + rng.IntN(30),
				delay: time.Duration(rng.IntN(300)) * time.Microsecond}
			n := j.records()
			var fails []int64
			for range 1 + rng.IntN(2) {
				fails = append(fails, int64(rng.IntN(n)))
			}
			j.sink = &txnSink2PC{store: newTxnStore()}
			j.src = &rangeSrc{splits: j.splits, perSplit: j.perSplit, delay: j.delay, readerFailAt: -1}
			env := NewEnvironment(WithParallelism(j.par), WithFlushTimeout(time.Millisecond),
				WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), WithLogger(discardLogger()),
				WithDrainTimeout(5*time.Second), WithCheckpointInterval(time.Duration(2+rng.IntN(6))*time.Millisecond),
				WithAutoWatermarkInterval(time.Millisecond))
			src := FromSource(env, j.src, "range", WithWatermarks(watermark.ForMonotonousTimestamps[int64]().
				WithTimestampAssigner(func(v, _ int64) int64 { return v }))).UID("src")
			vals := Map(src, failOnce(fails...)).UID("map")
			key := func(v int64) int64 { return v % 3 }
			evens := KeyBy(Filter(vals, func(v int64) (bool, error) { return v%2 == 0, nil }).UID("evens"), key)
			odds := KeyBy(Filter(vals, func(v int64) (bool, error) { return v%2 == 1, nil }).UID("odds"), key)
			joined := WindowJoin(evens, odds, window.Tumbling(10*time.Millisecond), func(x, y int64) (int64, error) {
				return x*10000 + y, nil
			}, WithAllowedLateness(time.Hour), WithEarlyFiring(time.Millisecond)).UID("join")
			SinkTo(joined, twoPhase(j.sink)).UID("sink")
			if err := env.Execute(testCtx(t), "window join"); err != nil {
				t.Fatalf("%+v fails=%v: %v", j, fails, err)
			}
			want := map[int64]bool{}
			for x := int64(0); x < int64(n); x += 2 {
				for y := x/10*10 + 1; y < x/10*10+10 && y < int64(n); y += 2 {
					if x%3 == y%3 {
						want[x*10000+y] = true
					}
				}
			}
			j.sink.store.mu.Lock()
			defer j.sink.store.mu.Unlock()
			seen := map[int64]bool{}
			for _, rs := range j.sink.store.committed {
				for _, r := range rs {
					if seen[r] {
						t.Fatalf("%+v fails=%v: pair (%d, %d) committed twice", j, fails, r/10000, r%10000)
					}
					if !want[r] {
						t.Fatalf("%+v fails=%v: pair (%d, %d) is no pair of the join", j, fails, r/10000, r%10000)
					}
					seen[r] = true
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("%+v fails=%v: %d pairs committed, want %d", j, fails, len(seen), len(want))
			}
		})
	}
}
