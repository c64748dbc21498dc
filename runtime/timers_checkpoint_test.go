package runtime

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Timers are keyed state: they are checkpointed by key group and restored
// by operator UID, also into another parallelism.

const timerBase = int64(1_000_000_000)

// timerProbe is what a timer job's process function shares with its test.
type timerProbe struct {
	// registered counts the timer registrations, on the keyed task.
	registered atomic.Int64
	// cover is the first checkpoint whose barrier was injected after at
	// least minRegistered registrations: every timer registered before
	// it is only in that checkpoint, never registered again by a replay.
	minRegistered int64
	cover         atomic.Int64
	died          chan struct{}
	once          sync.Once

	mu      sync.Mutex
	firedOn map[int64][]int // timer output -> subtasks it fired on
}

func newTimerProbe(minRegistered int64) *timerProbe {
	return &timerProbe{minRegistered: minRegistered, died: make(chan struct{}), firedOn: map[int64][]int{}}
}

func (p *timerProbe) hooks() *testHooks {
	return &testHooks{
		barrierInjected: func(id int64) {
			if p.cover.Load() == 0 && p.registered.Load() >= p.minRegistered {
				p.cover.Store(id)
			}
		},
		checkpointCompleted: func(id int64, _ checkpoint.Storage) {
			if c := p.cover.Load(); c != 0 && id >= c {
				p.once.Do(func() { close(p.died) })
			}
		},
	}
}

func (p *timerProbe) fired(out int64, subtask int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.firedOn[out] = append(p.firedOn[out], subtask)
}

// timerJob: a range source whose records carry their value as event
// timestamp -> map -> keyBy -> process -> 2PC sink. The first regPer
// records of each split register one timer each; a timer emits what
// emit returns for it, nothing else is emitted.
func timerJob(par int, src *rangeSrc, perSplit, regPer int64, domain TimeDomain, keyFn func(int64) int64,
	procTime func() int64, emit func(ctx *KeyedContext[int64, int64], tm Timer) int64,
	probe *timerProbe, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option,
) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second)}, opts...)...)
	wm := watermark.ForMonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return v })
	ds := Map(FromSource(env, src, "range", WithWatermarks(wm)).UID("src"), mapFn).UID("map")
	timers := KeyedProcess(KeyBy(ds, keyFn), func(ctx *KeyedContext[int64, int64], v int64) error {
		if v%perSplit >= regPer {
			return nil
		}
		if domain == EventTime {
			ctx.RegisterEventTimeTimer(timerBase + v)
		} else {
			ctx.RegisterProcessingTimeTimer(procTime())
		}
		probe.registered.Add(1)
		return nil
	}, OnTimer(func(ctx *KeyedContext[int64, int64], tm Timer) error {
		if tm.Domain != domain {
			return fmt.Errorf("timer of domain %v fired, want %v", tm.Domain, domain)
		}
		out := emit(ctx, tm)
		probe.fired(out, ctx.SubtaskIndex())
		ctx.Collect(out)
		return nil
	})).UID("timers")
	SinkTo(timers, twoPhase(&txnSink2PC{store: sink.store})).UID("sink")
	return env
}

// checkTimerOutput: the committed output is want, each exactly once.
func checkTimerOutput(t *testing.T, store *txnStore, want []int64, keyOf func(int64) int64) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]int{}
	for _, rs := range store.committed {
		for _, r := range rs {
			seen[r]++
		}
	}
	wantPerKey, gotPerKey := map[int64]int{}, map[int64]int{}
	var bad []string
	for _, w := range want {
		wantPerKey[keyOf(w)]++
		if seen[w] != 1 {
			bad = append(bad, fmt.Sprintf("timer %d fired %d times in committed output", w, seen[w]))
		}
	}
	for r, n := range seen {
		gotPerKey[keyOf(r)] += n
	}
	for k, n := range wantPerKey {
		if gotPerKey[k] != n {
			bad = append(bad, fmt.Sprintf("key %d: %d timers fired, want %d", k, gotPerKey[k], n))
		}
	}
	if len(seen) != len(want) {
		bad = append(bad, fmt.Sprintf("%d distinct outputs committed, want %d", len(seen), len(want)))
	}
	if len(bad) > 0 {
		t.Fatalf("%d problems: %v", len(bad), bad)
	}
}

func registeringRecords(splits int, perSplit, regPer int64) []int64 {
	var want []int64
	for v := range int64(splits) * perSplit {
		if v%perSplit < regPer {
			want = append(want, v)
		}
	}
	return want
}

// Event-time timers registered before a checkpoint survive a failover:
// the job fails once after a checkpoint that holds timers no replayed
// record registers again; after the restart every timer fires exactly
// once (at the final maxWatermark) and none is lost or duplicated in the
// committed output.
func TestEventTimeTimersRestoredAfterFailover(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		const splits, perSplit, regPer = 4, 60, 3
		probe := newTimerProbe(2 * regPer)
		var failed atomic.Bool
		kill := func(v int64) (int64, error) {
			select {
			case <-probe.died:
				if failed.CompareAndSwap(false, true) {
					return 0, errors.New("injected failure after a checkpoint with timers")
				}
			default:
			}
			return v, nil
		}
		store := newTxnStore()
		// The readers hold past the registering records until the failure,
		// so that a checkpoint holding timers completes before the input
		// ends however slow the checkpoints are (pebble's write the timers'
		// files).
		src := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Millisecond, readerFailAt: -1,
			hold: func(v int64) bool { return v%perSplit >= regPer }, release: probe.died}
		keyOf := func(v int64) int64 { return v % 7 }
		env := timerJob(2, src, perSplit, regPer, EventTime, keyOf, nil,
			func(_ *KeyedContext[int64, int64], tm Timer) int64 { return tm.Timestamp - timerBase },
			probe, kill, &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(3, time.Millisecond)), backend)
		env.hooks = probe.hooks()
		if err := env.Execute(testCtx(t), "event-time timers"); err != nil {
			t.Fatal(err)
		}
		if !failed.Load() {
			t.Fatal("the job ended before the injected failure; the test proves nothing")
		}
		checkTimerOutput(t, store, registeringRecords(splits, perSplit, regPer), keyOf)
	})
}

// Pending timers move with their key groups when the parallelism
// changes: a job at parallelism 2 dies after a checkpoint holding timers;
// the same job at parallelism 3 on the same directory fires each timer
// once, on the subtask that owns its key now.
func TestEventTimeTimersRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		const splits, perSplit, regPer = 4, 60, 3
		dir := t.TempDir()
		store := newTxnStore()
		keyOf := func(v int64) int64 { return v % 7 }
		emit := func(_ *KeyedContext[int64, int64], tm Timer) int64 { return tm.Timestamp - timerBase }

		probe1 := newTimerProbe(2 * regPer)
		kill := func(v int64) (int64, error) {
			select {
			case <-probe1.died:
				return 0, errors.New("process killed")
			default:
				return v, nil
			}
		}
		src1 := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Millisecond, readerFailAt: -1,
			hold: func(v int64) bool { return v%perSplit >= regPer }, release: probe1.died} // as in the test above
		env1 := timerJob(2, src1, perSplit, regPer, EventTime, keyOf, nil, emit, probe1, kill, &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(restart.None()), backend)
		env1.hooks = probe1.hooks()
		if err := env1.Execute(testCtx(t), "first"); err == nil {
			t.Fatal("the job finished before it could be killed; the test proves nothing")
		}
		probe1.mu.Lock()
		if len(probe1.firedOn) != 0 {
			t.Fatalf("timers fired before the kill: %v", probe1.firedOn)
		}
		probe1.mu.Unlock()

		probe2 := newTimerProbe(0)
		src2 := &rangeSrc{splits: splits, perSplit: perSplit, readerFailAt: -1}
		env2 := timerJob(3, src2, perSplit, regPer, EventTime, keyOf, nil, emit, probe2,
			func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), backend)
		if err := env2.Execute(testCtx(t), "first"); err != nil {
			t.Fatal(err)
		}
		checkTimerOutput(t, store, registeringRecords(splits, perSplit, regPer), keyOf)
		probe2.mu.Lock()
		defer probe2.mu.Unlock()
		for out, subtasks := range probe2.firedOn {
			owner := keygroup.Subtask(keygroup.ForHash(keygroup.HashInt64(keyOf(out)), 16), 3, 16)
			if len(subtasks) != 1 || subtasks[0] != owner {
				t.Fatalf("timer %d (key %d) fired on subtasks %v, want once on %d", out, keyOf(out), subtasks, owner)
			}
		}
	})
}

// A processing-time timer whose time passed while the job was down fires
// after the restore: the job's processing-time clock stands still until
// the injected failure, so no timer is due before it, and moves to the
// timers' time as the job fails, so every timer is due when the job
// restores from the checkpoint that holds them; the clock never moves
// again, so only a restored timer scheduled as due can fire (a lost one
// would leave its output missing). Before the job had a clock of its own
// this test read the wall clock, and under load a timer could fire before
// the failure and void the test.
func TestProcessingTimeTimerRestoredAfterItsTimeFires(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		const splits, perSplit, regPer = 2, 400, 2
		const ahead, restartDelay = 200 * time.Millisecond, 50 * time.Millisecond
		const start = int64(1) << 40 // a processing time far from the wall clock's
		var clock atomic.Int64
		clock.Store(start)
		probe := newTimerProbe(2 * regPer)
		var failed atomic.Bool
		kill := func(v int64) (int64, error) {
			select {
			case <-probe.died:
				if failed.CompareAndSwap(false, true) {
					clock.Store(start + ahead.Milliseconds()) // the job is down while the timers come due
					return 0, errors.New("injected failure after a checkpoint with timers")
				}
			default:
			}
			return v, nil
		}
		var early atomic.Bool // fired before the failure
		store := newTxnStore()
		src := &rangeSrc{splits: splits, perSplit: perSplit, delay: 500 * time.Microsecond, readerFailAt: -1,
			hold: func(v int64) bool { return v%perSplit >= regPer }, release: probe.died}
		identity := func(v int64) int64 { return v }
		env := timerJob(2, src, perSplit, regPer, ProcessingTime, identity,
			func() int64 { return clock.Load() + ahead.Milliseconds() },
			func(ctx *KeyedContext[int64, int64], tm Timer) int64 {
				if !failed.Load() {
					early.Store(true)
				}
				if now := ctx.CurrentProcessingTime(); now < tm.Timestamp {
					t.Errorf("timer of %d fired at processing time %d", tm.Timestamp, now)
				}
				return ctx.Key()
			},
			probe, kill, &txnSink2PC{store: store},
			WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(3, restartDelay)), backend)
		env.cfg.clock = clock.Load
		env.hooks = probe.hooks()
		if err := env.Execute(testCtx(t), "processing-time timers"); err != nil {
			t.Fatal(err)
		}
		if !failed.Load() {
			t.Fatal("the job ended before the injected failure; the test proves nothing")
		}
		if early.Load() {
			t.Fatal("a timer fired before the failure, while the clock stood before its time")
		}
		checkTimerOutput(t, store, registeringRecords(splits, perSplit, regPer), identity)
	})
}

// Exactly-once output of a job driven by its timers, on both backends,
// across random failures: every record registers an event-time timer due
// a little later, which fires as the watermark passes it (mid-stream, so
// that checkpoints hold timers registered, fired and deleted in between)
// and emits the record; a decoy timer registered and deleted with it
// never fires. Every record's output is committed exactly once.
func TestTimerDrivenJobExactlyOnceAcrossFailures(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for seed := range 4 {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), 17))
				par := 1 + rng.IntN(3)
				splits, perSplit := 1+rng.IntN(4), 40+rng.IntN(60)
				n := splits * perSplit
				var fails []int64
				for range 1 + rng.IntN(3) {
					fails = append(fails, int64(rng.IntN(n)))
				}
				const due = 30
				keyOf := func(v int64) int64 { return v % 13 }
				env := NewEnvironment(WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond),
					WithLogger(discardLogger()), WithDrainTimeout(5*time.Second), WithAutoWatermarkInterval(time.Millisecond),
					WithCheckpointInterval(time.Duration(2+rng.IntN(6))*time.Millisecond),
					WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), backend)
				src := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Duration(100+rng.IntN(300)) * time.Microsecond, readerFailAt: -1}
				// The timestamp is the place within the split, so that splits
				// read side by side move the watermark together.
				wm := watermark.ForMonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return v % int64(perSplit) * 1000 })
				var midStream atomic.Int64
				ds := Map(FromSource(env, src, "range", WithWatermarks(wm)).UID("src"), failOnce(fails...)).UID("map")
				out := KeyedProcess(KeyBy(ds, keyOf), func(ctx *KeyedContext[int64, int64], v int64) error {
					ts := v%int64(perSplit) + due
					ctx.RegisterEventTimeTimer(ts*1000 + v%1000)
					ctx.RegisterEventTimeTimer(ts*1000 + 999) // the decoy
					ctx.DeleteEventTimeTimer(ts*1000 + 999)
					return nil
				}, OnTimer(func(ctx *KeyedContext[int64, int64], tm Timer) error {
					if tm.Timestamp%1000 == 999 {
						return fmt.Errorf("a deleted timer fired: %d", tm.Timestamp)
					}
					if ctx.CurrentWatermark() < engine.MaxWatermark {
						midStream.Add(1)
					}
					ctx.Collect(tm.Timestamp % 1000) // the record (n < 1000)
					return nil
				})).UID("timers")
				store := newTxnStore()
				SinkTo(out, twoPhase(&txnSink2PC{store: store})).UID("sink")
				if err := env.Execute(testCtx(t), "timer-driven"); err != nil {
					t.Fatalf("par=%d splits=%d perSplit=%d fails=%v: %v", par, splits, perSplit, fails, err)
				}
				if midStream.Load() == 0 {
					t.Fatal("no timer fired before the end of the input; the test proves less than it says")
				}
				var want []int64
				for v := range int64(n) {
					want = append(want, v)
				}
				checkTimerOutput(t, store, want, keyOf)
			})
		}
	})
}
