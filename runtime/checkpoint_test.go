package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/restart"
)

// rangeJob is source -> map -> 2PC sink over a rangeSrc. With global set
// the sink is behind a rebalance edge (all-to-all: one failover region,
// and tasks that align barriers over several channels); otherwise the job
// is a set of independent pipelines.
type rangeJob struct {
	par, splits, perSplit int
	push, global          bool
	delay                 time.Duration
	mapFn                 func(int64) (int64, error)
	opts                  []Option
	sink                  *txnSink2PC
	src                   *rangeSrc
	// viaSinkTo adds the sink behind a wrapper of its own
	// (capableSink) that is connector.TwoPhaseCapable, instead of the
	// test's generic one (twoPhase).
	viaSinkTo bool
}

func (j *rangeJob) env() *Environment {
	if j.sink == nil {
		j.sink = &txnSink2PC{store: newTxnStore()}
	}
	if j.mapFn == nil {
		j.mapFn = func(v int64) (int64, error) { return v, nil }
	}
	j.src = &rangeSrc{splits: j.splits, perSplit: j.perSplit, push: j.push, delay: j.delay, readerFailAt: -1}
	opts := append([]Option{
		WithParallelism(j.par),
		WithFlushTimeout(time.Millisecond),
		WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)),
		WithLogger(discardLogger()),
		WithDrainTimeout(5 * time.Second),
	}, j.opts...)
	env := NewEnvironment(opts...)
	ds := Map(FromSource(env, j.src, "range").UID("src"), j.mapFn).UID("map")
	if j.global {
		ds = Rebalance(ds)
	}
	if j.viaSinkTo {
		SinkTo(ds, connector.Sink[int64](&capableSink{txnSink2PC: j.sink, twoPhase: true})).UID("sink")
	} else {
		SinkTo(ds, twoPhase(j.sink)).UID("sink")
	}
	return env
}

func (j *rangeJob) records() int { return j.splits * j.perSplit }

// errTestDeadline is the cause of a testCtx that ran out.
var errTestDeadline = errors.New("the job ran into the test's 30 s deadline: it hung, and was drained")

// testCtx bounds a job, so that a broken mechanism fails the test instead
// of hanging it. A job cancelled by the deadline drains and Execute
// returns nil, so the test fails here too: its output is that of a job
// stopped half-way, and a check of it would blame the wrong thing.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), 30*time.Second, errTestDeadline)
	t.Cleanup(cancel)
	t.Cleanup(func() { // runs before cancel
		if context.Cause(ctx) == errTestDeadline {
			t.Error(errTestDeadline)
		}
	})
	return ctx
}

// The one-place rule, the booking rule and the gate, and exactly-once end to
// end, over randomized runs: failures injected in the map and in a reader at
// random records, random parallelism, split counts, pull or push assignment,
// region or global failover. Every completed checkpoint holds each split in
// exactly one place, and the committed output equals the input: no loss, no
// duplicate.
func TestRandomizedFailoverExactlyOnce(t *testing.T) {
	const seeds = 60
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			j := &rangeJob{
				par:      1 + rng.IntN(3),
				splits:   1 + rng.IntN(6),
				perSplit: 5 + rng.IntN(30),
				push:     rng.IntN(2) == 0,
				global:   rng.IntN(2) == 0,
				delay:    time.Duration(rng.IntN(400)) * time.Microsecond,
			}
			n := j.records()
			var fails []int64
			for range rng.IntN(3) {
				fails = append(fails, int64(rng.IntN(n)))
			}
			j.mapFn = failOnce(fails...)

			var mu sync.Mutex
			var violations []error
			completed := 0
			j.opts = []Option{WithCheckpointInterval(time.Duration(2+rng.IntN(8)) * time.Millisecond)}
			env := j.env()
			if rng.IntN(3) == 0 {
				j.src.readerFailAt = int64(rng.IntN(n))
			}
			env.hooks = &testHooks{checkpointCompleted: func(id int64, s checkpoint.Storage) {
				mu.Lock()
				defer mu.Unlock()
				completed++
				if err := checkSplitsInOnePlace(s, id, "src", j.splits); err != nil {
					violations = append(violations, err)
				}
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := env.Execute(ctx, "randomized"); err != nil {
				t.Fatalf("%+v: %v", j, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(violations) > 0 {
				t.Fatal(violations[0])
			}
			if completed == 0 {
				t.Fatal("no checkpoint completed (not even the final one)")
			}
			if err := j.sink.store.verify(n); err != nil {
				t.Fatalf("par=%d splits=%d perSplit=%d push=%v global=%v fails=%v readerFail=%d: %v",
					j.par, j.splits, j.perSplit, j.push, j.global, fails, j.src.readerFailAt, err)
			}
		})
	}
}

// The gate: every coordinator event is delayed until the
// next barrier has been injected. With the gate on, the checkpoint waits
// for the events sent before the coordinator snapshot, so each split is
// in the enumerator's or in a reader's state; switched off, an AddSplits
// event crosses a barrier and some checkpoint holds the split nowhere.
func TestGateKeepsAssignmentsOnOneSideOfTheBarrier(t *testing.T) {
	run := func(gateOn bool) (violations []error, storeErr error) {
		var mu sync.Mutex
		injected := make(chan struct{})
		delay := func() {
			mu.Lock()
			ch := injected
			mu.Unlock()
			tm := time.NewTimer(200 * time.Millisecond)
			defer tm.Stop()
			select {
			case <-ch:
			case <-tm.C: // the gate holds the checkpoint until delivery
			}
		}
		j := &rangeJob{par: 2, splits: 6, perSplit: 20, delay: 500 * time.Microsecond}
		j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), withEventDelay(delay), WithRestartStrategy(restart.None())}
		if !gateOn {
			j.opts = append(j.opts, withGateDisabled())
		}
		env := j.env()
		env.hooks = &testHooks{
			barrierInjected: func(int64) {
				mu.Lock()
				close(injected)
				injected = make(chan struct{})
				mu.Unlock()
			},
			checkpointCompleted: func(id int64, s checkpoint.Storage) {
				if err := checkSplitsInOnePlace(s, id, "src", j.splits); err != nil {
					violations = append(violations, err)
				}
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.Execute(ctx, "gate"); err != nil {
			t.Fatal(err)
		}
		return violations, j.sink.store.verify(j.records())
	}
	if v, err := run(true); len(v) > 0 || err != nil {
		t.Fatalf("gate on: violations %v, output %v", v, err)
	}
	if v, _ := run(false); len(v) == 0 {
		t.Fatal("gate off: no checkpoint lost a split; the test no longer shows what the gate prevents")
	}
}

// The booking rule's bookings exist only for a restart to give splits back,
// so a job that cannot restart (checkpoints off, no restart strategy: the
// default) books nothing, and its tracker does not grow with every split it
// ever assigned; a job that can restart without checkpoints keeps them, and a
// region restart gives the failed reader's splits back.
func TestSplitAssignmentTrackerBooksOnlyWhatARestartNeeds(t *testing.T) {
	for _, restarts := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarts=%v", restarts), func(t *testing.T) {
			var mu sync.Mutex
			var coord *srccoord.Source[int64, *rSplit, []*rSplit]
			j := &rangeJob{par: 2, splits: 20, perSplit: 10}
			strategy := restart.None()
			if restarts {
				strategy = restart.FixedDelay(3, time.Millisecond)
			}
			j.opts = []Option{WithRestartStrategy(strategy)}
			env := j.env()
			if restarts {
				j.src.readerFailAt = 95
			}
			env.hooks = &testHooks{taskCreated: func(tk *task) {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range tk.ex.coordOf {
					if c, ok := c.(*srccoord.Source[int64, *rSplit, []*rSplit]); ok && coord == nil {
						coord = c
					}
				}
			}}
			if err := env.Execute(testCtx(t), "bookings"); err != nil {
				t.Fatal(err)
			}
			if err := j.sink.store.verify(j.records()); err != nil {
				t.Fatal(err)
			}
			booked := coord.Uncheckpointed()
			if !restarts && booked != 0 {
				t.Fatalf("a job that cannot restart booked %d assignments", booked)
			}
			if restarts && !j.src.readerFailed.Load() {
				t.Fatal("the reader failure was never injected")
			}
		})
	}
}

// Atomic checkpoints and restore across processes: a job that dies (no
// restart) leaves its checkpoints in a directory; a new Environment on the
// same directory resumes from the newest one and the committed output is
// exact. Restoring from an older checkpoint must never duplicate silently:
// when the newest checkpoint, which was reported complete (its sinks may have
// committed), is damaged (torn metadata, a corrupt state file), the job does
// not start and says which checkpoint is damaged and how to proceed; nothing
// is committed again. Only a damaged checkpoint whose commit never returned
// (the process died between the metadata rename and the end of Commit, so no
// sink was told) is passed over; the store then holds none of its
// transactions, as no sink committed them.
func TestRestoreFromDirectoryInNewEnvironment(t *testing.T) {
	for _, tc := range []struct {
		damage      string
		interrupted bool // the newest checkpoint's commit never returned
	}{
		{"none", false},
		{"torn metadata", false},
		{"corrupt state", false},
		{"torn metadata", true},
		{"corrupt state", true},
		// A read error is never a reason to fall back, not even from a
		// checkpoint never reported complete.
		{"unreadable state", true},
	} {
		name := tc.damage
		if tc.interrupted {
			name += ", commit interrupted"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			store := newTxnStore()
			const splits, perSplit = 4, 100
			died := make(chan struct{})
			var once sync.Once
			completed := make(chan int64, 1000)
			// First process: runs until at least 2 checkpoints completed,
			// then its map fails with no restart allowed.
			j1 := &rangeJob{par: 2, splits: splits, perSplit: perSplit, delay: time.Millisecond, sink: &txnSink2PC{store: store}}
			j1.mapFn = func(v int64) (int64, error) {
				select {
				case <-died:
					return 0, errors.New("process killed")
				default:
				}
				return v, nil
			}
			j1.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir), WithCheckpointsRetained(5), WithRestartStrategy(restart.None())}
			env1 := j1.env()
			// The readers stop halfway through each split until the
			// process is "killed", so the job cannot end before its second
			// checkpoint however slow the machine makes checkpoints.
			j1.src.hold = func(v int64) bool { return v%perSplit >= perSplit/2 }
			j1.src.release = died
			env1.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
				completed <- id
				if id >= 2 {
					once.Do(func() { close(died) })
				}
			}}
			if err := env1.Execute(testCtx(t), "first"); err == nil {
				t.Fatal("the job finished before it could be killed")
			}
			close(completed)
			var last int64
			for id := range completed {
				last = max(last, id)
			}
			chk := filepath.Join(dir, fmt.Sprintf("chk-%d", last))
			switch tc.damage {
			case "torn metadata":
				meta := filepath.Join(chk, "_metadata")
				b, err := os.ReadFile(meta)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(meta, b[:len(b)/2], 0o644); err != nil {
					t.Fatal(err)
				}
			case "corrupt state":
				entries, err := os.ReadDir(chk)
				if err != nil {
					t.Fatal(err)
				}
				damaged := false
				for _, e := range entries {
					if e.Name() == "_metadata" {
						continue
					}
					p := filepath.Join(chk, e.Name())
					b, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if len(b) > 0 {
						b[len(b)-1] ^= 0xff
						if err := os.WriteFile(p, b, 0o644); err != nil {
							t.Fatal(err)
						}
						damaged = true
						break
					}
				}
				if !damaged {
					t.Fatal("no state file to damage")
				}
			}
			var unreadable string
			if tc.damage == "unreadable state" {
				entries, err := os.ReadDir(chk)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					if strings.HasSuffix(e.Name(), ".state") {
						unreadable = filepath.Join(chk, e.Name())
						break
					}
				}
				if err := os.Remove(unreadable); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(unreadable, 0o755); err != nil { // reading it fails: EISDIR
					t.Fatal(err)
				}
			}
			want := last
			if tc.interrupted {
				// What a process that died inside Commit leaves: the mark
				// beside the metadata, and no transaction of the
				// checkpoint committed.
				if err := os.WriteFile(filepath.Join(chk, "_committing"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				store.drop(last)
				want = last - 1
			}
			// Second process.
			inits := make(chan connector.SinkInitContext, 16)
			j2 := &rangeJob{par: 2, splits: splits, perSplit: perSplit, sink: &txnSink2PC{store: store, inits: inits}}
			j2.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir), WithLogger(discardLogger())}
			err := j2.env().Execute(testCtx(t), "first")
			close(inits)
			if unreadable != "" {
				var ue *checkpoint.UnreadableCheckpointError
				if !errors.As(err, &ue) || ue.ID != last || !strings.Contains(err.Error(), unreadable) || !strings.Contains(err.Error(), "is a directory") {
					t.Fatalf("second process: err = %v; want a *checkpoint.UnreadableCheckpointError naming %s and the cause", err, unreadable)
				}
				if n := len(inits); n != 0 {
					t.Fatalf("%d sink writers were created although the checkpoint could not be read", n)
				}
				return
			}
			if tc.damage != "none" && !tc.interrupted {
				var de *checkpoint.DamagedCheckpointError
				if !errors.As(err, &de) || de.ID != last || !errors.Is(err, checkpoint.ErrCorrupt) {
					t.Fatalf("second process: err = %v; want a *checkpoint.DamagedCheckpointError for checkpoint %d (a restore from checkpoint %d would write its output again)", err, last, last-1)
				}
				for _, want := range []string{chk, "is damaged", fmt.Sprintf("resume from checkpoint %d", last-1), "from a backup"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if n := len(inits); n != 0 {
					t.Fatalf("%d sink writers were created although the restore was refused", n)
				}
				if err := store.verifyNoDuplicates(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for ic := range inits {
				id, ok := ic.RestoredCheckpointID()
				if !ok || id != want {
					t.Fatalf("restored from checkpoint %d (ok=%v), want %d", id, ok, want)
				}
			}
			if err := store.verify(splits * perSplit); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The commit rule: a transaction is committed only after its checkpoint
// completed (its metadata is durable), or, if its checkpoint was
// subsumed, after the newer one that holds it completed. The final
// checkpoint may complete while the periodic one before it is still in
// flight; that one is then aborted as subsumed, and its transactions
// commit with the final checkpoint, whose state holds them.
func TestTwoPhaseCommitOnlyAfterCheckpointCompletes(t *testing.T) {
	var mu sync.Mutex
	var newest int64 // the newest completed checkpoint
	var early []string
	commits := 0
	j := &rangeJob{par: 2, splits: 4, perSplit: 50, delay: 200 * time.Microsecond, global: true}
	j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
		mu.Lock()
		defer mu.Unlock()
		commits++
		if c := r.Committable(); c.Checkpoint > newest {
			early = append(early, fmt.Sprintf("%s (newest completed checkpoint: %d)", c.ID, newest))
		}
		return true
	}}
	j.opts = []Option{WithCheckpointInterval(2 * time.Millisecond)}
	env := j.env()
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		mu.Lock()
		newest = max(newest, id)
		mu.Unlock()
	}}
	if err := env.Execute(testCtx(t), "2pc"); err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 {
		t.Fatalf("committed before their checkpoint completed: %v", early)
	}
	if commits == 0 {
		t.Fatal("nothing committed")
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
}

// The commit rule: a commit that fails with a known reason fails the job with
// that error, whatever the restart strategy (the data is lost; never
// silently).
func TestTwoPhaseKnownFailureFailsJob(t *testing.T) {
	errLost := errors.New("transaction was aborted by the broker")
	j := &rangeJob{par: 1, splits: 2, perSplit: 10}
	var mu sync.Mutex
	calls := 0
	j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
		mu.Lock()
		calls++
		mu.Unlock()
		r.SignalFailedWithKnownReason(errLost)
		return false
	}}
	j.opts = []Option{WithCheckpointInterval(time.Hour), WithRestartStrategy(restart.FixedDelay(5, 0))}
	err := j.env().Execute(testCtx(t), "known")
	if !errors.Is(err, errLost) {
		t.Fatalf("Execute = %v, want the commit's known reason", err)
	}
	var oe *OperatorError
	if !errors.As(err, &oe) || oe.UID != "sink" {
		t.Fatalf("Execute = %v, want an OperatorError of the sink", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("commit tried %d times; a known failure must fail the job without a restart", calls)
	}
}

// The commit rule: RetryLater is retried until the commit succeeds.
func TestTwoPhaseRetryLaterIsRetried(t *testing.T) {
	var mu sync.Mutex
	tries := map[string]int{}
	j := &rangeJob{par: 2, splits: 2, perSplit: 10}
	j.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(r connector.CommitRequest[tTxn]) bool {
		mu.Lock()
		defer mu.Unlock()
		id := r.Committable().ID
		tries[id]++
		if r.NumberOfRetries() < 2 {
			r.RetryLater()
			return false
		}
		return true
	}}
	j.opts = []Option{WithCheckpointInterval(time.Millisecond)}
	if err := j.env().Execute(testCtx(t), "retry"); err != nil {
		t.Fatal(err)
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
	for id, n := range tries {
		if n != 3 {
			t.Fatalf("%s tried %d times, want 3 (two RetryLater)", id, n)
		}
	}
}

// The final checkpoint: with an interval far longer than the job, no
// periodic checkpoint runs, and the last transactions still commit before
// Execute returns.
func TestFinalCheckpointCommitsBoundedJob(t *testing.T) {
	j := &rangeJob{par: 3, splits: 5, perSplit: 20, global: true}
	j.opts = []Option{WithCheckpointInterval(time.Hour), WithDrainTimeout(time.Second)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.env().Execute(ctx, "final"); err != nil {
		t.Fatal(err)
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
}

// Alignment: after barrier N on one channel, records behind it are not
// processed until N arrived on the other channel too.
func TestAlignmentBlocksChannelUntilAllBarriersArrived(t *testing.T) {
	down := engine.NewInputGate[int](1, 8)
	out := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &engine.OpInfo{Name: "t"}, cfg: &config{}, mb: engine.NewMailbox(), outputs: []engine.NetworkOutput{out}}
	up := engine.NewInputGate[int](2, 8)
	tk.gate = up
	in := &gateInput[int]{t: tk, gate: up, head: engine.Output[int](out), valve: engine.NewWatermarkValve(2, out)}
	a := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 0, 1, nil, 128, 0)
	b := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 1, 1, nil, 128, 0)
	barrier := engine.Event{Kind: engine.EventBarrier, Barrier: engine.CheckpointBarrier{CheckpointID: 3}}
	_ = a.Collect(1, 0)
	a.BroadcastEvent(barrier)
	_ = a.Collect(100, 0) // after the barrier: must wait
	drain := func() {
		for {
			if st, err := in.Step(); err != nil || st == engine.InputNothing {
				return
			}
		}
	}
	drain()
	out.Flush()
	var got []int
	collect := func() {
		for {
			_, bt, ok := down.Poll(nil, 0)
			if !ok {
				return
			}
			for _, r := range bt.Records {
				got = append(got, r.Value)
			}
			if bt.Ev.Kind == engine.EventBarrier {
				got = append(got, -int(bt.Ev.Barrier.CheckpointID))
			}
		}
	}
	collect()
	if fmt.Sprint(got) != "[1]" {
		t.Fatalf("before the second barrier: forwarded %v, want [1] (100 is behind barrier 3 and must wait)", got)
	}
	_ = b.Collect(2, 0)
	b.BroadcastEvent(barrier)
	drain()
	out.Flush()
	collect()
	if fmt.Sprint(got) != "[1 2 -3 100]" {
		t.Fatalf("forwarded %v, want [1 2 -3 100]: the records before the barrier, the barrier, then the rest", got)
	}
}

// A cancelled job with checkpoints drains: sources stop, and a final
// checkpoint commits everything that went through before Execute returns.
func TestCancelDrainsWithFinalCheckpoint(t *testing.T) {
	var mu sync.Mutex
	passed := 0
	j := &rangeJob{par: 2, splits: 4, perSplit: 100000, delay: 100 * time.Microsecond}
	j.mapFn = func(v int64) (int64, error) {
		mu.Lock()
		passed++
		mu.Unlock()
		return v, nil
	}
	j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond)}
	env := j.env()
	ctx, cancel := context.WithCancel(context.Background())
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		if id == 2 {
			cancel()
		}
	}}
	if err := env.Execute(ctx, "cancel"); err != nil {
		t.Fatal(err)
	}
	j.sink.store.mu.Lock()
	defer j.sink.store.mu.Unlock()
	seen := map[int64]bool{}
	for _, rs := range j.sink.store.committed {
		for _, r := range rs {
			if seen[r] {
				t.Fatalf("record %d committed twice", r)
			}
			seen[r] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != passed || passed == 0 {
		t.Fatalf("committed %d records, %d went through the job", len(seen), passed)
	}
}

// statefulTxnSink's writers count what they wrote, in writer state.
type statefulTxnSink struct {
	txnSink2PC
	mu     sync.Mutex
	counts map[int]int64
}

type countState struct{}

func (countState) Version() int                      { return 1 }
func (countState) Serialize(n int64) ([]byte, error) { return []byte(fmt.Sprint(n)), nil }
func (countState) Deserialize(_ int, b []byte) (int64, error) {
	var n int64
	_, err := fmt.Sscan(string(b), &n)
	return n, err
}

type countingTxnWriter struct {
	tWriter
	s *statefulTxnSink
	n int64
}

func (w *countingTxnWriter) Write(v int64, c connector.WriteContext) error {
	w.n++
	return w.tWriter.Write(v, c)
}
func (w *countingTxnWriter) SnapshotState(int64) ([]int64, error) { return []int64{w.n}, nil }
func (w *countingTxnWriter) Close() error {
	w.s.mu.Lock()
	w.s.counts[w.subtask] = w.n
	w.s.mu.Unlock()
	return nil
}

func (s *statefulTxnSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s.RestoreWriter(ctx, nil)
}
func (s *statefulTxnSink) RestoreWriter(ctx connector.SinkInitContext, states []int64) (connector.StatefulSinkWriter[int64, int64], error) {
	w := &countingTxnWriter{tWriter: tWriter{subtask: ctx.SubtaskIndex(), attempt: ctx.AttemptNumber()}, s: s}
	for _, n := range states {
		w.n += n
	}
	return w, nil
}
func (s *statefulTxnSink) WriterStateSerializer() connector.VersionedSerializer[int64] {
	return countState{}
}

// Writer state of a stateful two-phase sink is checkpointed with the
// committables and restored through RestoreWriter: after failures the
// writers' counts add up to the input exactly.
func TestStatefulTwoPhaseSinkRestoresWriterState(t *testing.T) {
	sink := &statefulTxnSink{txnSink2PC: txnSink2PC{store: newTxnStore()}, counts: map[int]int64{}}
	env := NewEnvironment(WithParallelism(2), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
		WithCheckpointInterval(2*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)))
	src := &rangeSrc{splits: 4, perSplit: 50, delay: 200 * time.Microsecond, readerFailAt: -1}
	ds := Map(FromSource(env, src, "range").UID("src"), failOnce(30, 150)).UID("map")
	SinkTo(Rebalance(ds), statefulTwoPhase[int64, tTxn, int64](sink)).UID("sink")
	if err := env.Execute(testCtx(t), "stateful"); err != nil {
		t.Fatal(err)
	}
	if err := sink.store.verify(200); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sum := sink.counts[0] + sink.counts[1]; sum != 200 {
		t.Fatalf("writers counted %v (sum %d), want 200 in all", sink.counts, sum)
	}
}

// Coordinators before barriers: for every checkpoint the enumerator snapshots
// before any barrier is injected, hence before any reader snapshots.
func TestCoordinatorsSnapshotBeforeBarriers(t *testing.T) {
	var mu sync.Mutex
	enumDone := map[int64]bool{}
	var bad []string
	j := &rangeJob{par: 3, splits: 6, perSplit: 30, delay: 200 * time.Microsecond}
	j.opts = []Option{WithCheckpointInterval(2 * time.Millisecond)}
	env := j.env()
	j.src.onSnapshot = func(subtask int, id int64) {
		mu.Lock()
		defer mu.Unlock()
		if subtask < 0 {
			enumDone[id] = true
		} else if !enumDone[id] {
			bad = append(bad, fmt.Sprintf("reader %d snapshotted checkpoint %d before the enumerator", subtask, id))
		}
	}
	env.hooks = &testHooks{barrierInjected: func(id int64) {
		mu.Lock()
		defer mu.Unlock()
		if !enumDone[id] {
			bad = append(bad, fmt.Sprintf("barrier %d injected before the enumerator snapshot", id))
		}
	}}
	if err := env.Execute(testCtx(t), "order"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	if len(enumDone) == 0 {
		t.Fatal("no checkpoint was taken")
	}
}

// The job listener hears every completed checkpoint, in order, and every
// restart with its cause.
func TestJobListenerSeesCheckpointsAndRestarts(t *testing.T) {
	var (
		mu        sync.Mutex
		completed []int64
		restarts  []int
		causes    []error
		failed    atomic.Bool
	)
	j := &rangeJob{par: 2, splits: 4, perSplit: 30, delay: time.Millisecond}
	boom := errors.New("injected")
	j.mapFn = func(v int64) (int64, error) {
		if v == 70 && failed.CompareAndSwap(false, true) {
			return 0, boom
		}
		return v, nil
	}
	j.opts = []Option{WithCheckpointInterval(20 * time.Millisecond), WithJobListener(JobListener{
		CheckpointCompleted: func(id int64) {
			mu.Lock()
			defer mu.Unlock()
			completed = append(completed, id)
		},
		Restarting: func(n int, err error) {
			mu.Lock()
			defer mu.Unlock()
			restarts, causes = append(restarts, n), append(causes, err)
		},
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := j.env().Execute(ctx, "listener"); err != nil {
		t.Fatal(err)
	}
	if err := j.sink.store.verify(j.records()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(completed) < 2 {
		t.Fatalf("listener saw %d completed checkpoints, want several", len(completed))
	}
	for i := 1; i < len(completed); i++ {
		if completed[i] <= completed[i-1] {
			t.Fatalf("checkpoints announced out of order: %v", completed)
		}
	}
	if len(restarts) != 1 || restarts[0] != 1 || !errors.Is(causes[0], boom) {
		t.Fatalf("restarts %v causes %v, want one restart caused by the injected failure", restarts, causes)
	}
}

// badConfigSink refuses every writer with an error no restart can fix.
type badConfigSink struct{ creates atomic.Int64 }

func (s *badConfigSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	s.creates.Add(1)
	return nil, fmt.Errorf("sink: transaction timeout too short: %w", connector.ErrInvalidConfiguration)
}

// A connector error wrapping connector.ErrInvalidConfiguration fails the job
// at once, even under a restart strategy that would retry forever.
func TestInvalidConfigurationIsNotRestarted(t *testing.T) {
	j := &rangeJob{par: 1, splits: 1, perSplit: 10}
	j.src = &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}
	env := NewEnvironment(WithParallelism(1), WithCheckpointInterval(50*time.Millisecond),
		WithRestartStrategy(restart.FixedDelay(1_000_000, time.Millisecond)), WithLogger(discardLogger()))
	sink := &badConfigSink{}
	SinkTo(FromSource(env, j.src, "range").UID("src"), connector.Sink[int64](sink))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := env.Execute(ctx, "bad config")
	if !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("Execute: %v, want the invalid-configuration error", err)
	}
	if n := sink.creates.Load(); n != 1 {
		t.Fatalf("the writer was created %d times: the job was restarted", n)
	}
}

// committingOnlySink says its writes need a committer.
type committingOnlySink struct{ badConfigSink }

func (*committingOnlySink) CommitterRequired() bool { return true }

// A sink whose writes need its committer is refused on the plain SinkTo
// path, where nothing would ever commit them.
func TestSinkToRefusesSinkThatNeedsItsCommitter(t *testing.T) {
	env := NewEnvironment()
	src := &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}
	SinkTo(FromSource(env, src, "range"), connector.Sink[int64](&committingOnlySink{}))
	err := env.Execute(context.Background(), "no committer")
	if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), "TwoPhaseCapable") {
		t.Fatalf("Execute: %v, want an invalid graph naming TwoPhaseCapable", err)
	}
}
