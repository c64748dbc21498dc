package coordinator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

var (
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	src0    = checkpoint.TaskID{UID: "source", Subtask: 0}
	src1    = checkpoint.TaskID{UID: "source", Subtask: 1}
	sink0   = checkpoint.TaskID{UID: "sink", Subtask: 0}
	allTask = []checkpoint.TaskID{src0, src1, sink0}
)

func newCoord(t *testing.T, opts ...CoordinatorOption) *Coordinator {
	t.Helper()
	c, err := NewCoordinator(allTask, append([]CoordinatorOption{WithInterval(time.Second), WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func handle(uid string, s int) checkpoint.StateHandle {
	return checkpoint.StateHandle{Owner: checkpoint.Owner{UID: uid, Subtask: s}, File: fmt.Sprintf("%s-%d", uid, s), Size: 1}
}

func want(t *testing.T, step string, got []Action, expect ...Action) {
	t.Helper()
	if len(got) == 0 && len(expect) == 0 {
		return
	}
	if !reflect.DeepEqual(got, expect) {
		t.Fatalf("%s: actions\n  %#v\nwant\n  %#v", step, got, expect)
	}
}

// abortOf checks that acts is exactly one NotifyAborted for id whose error
// matches reason, and returns it.
func abortOf(t *testing.T, step string, acts []Action, id int64, reason error) NotifyAborted {
	t.Helper()
	if len(acts) != 1 {
		t.Fatalf("%s: %d actions %#v, want one NotifyAborted", step, len(acts), acts)
	}
	a, ok := acts[0].(NotifyAborted)
	if !ok || a.ID != id || !errors.Is(a.Err, reason) {
		t.Fatalf("%s: %#v, want NotifyAborted{%d} for %v", step, acts[0], id, reason)
	}
	return a
}

// triggerAndAck runs checkpoint id from the trigger at now to the point
// where all tasks acknowledged, checking each step's actions.
func triggerAndAck(t *testing.T, c *Coordinator, now time.Time, id int64) {
	t.Helper()
	want(t, "tick", c.Tick(now), SnapshotCoordinators{ID: id, Timestamp: now})
	ackAll(t, c, now, id)
}

func ackAll(t *testing.T, c *Coordinator, trig time.Time, id int64) {
	t.Helper()
	coord := handle("source", checkpoint.CoordinatorSubtask)
	want(t, "coordinators snapshotted", c.CoordinatorsSnapshotted(id, []checkpoint.StateHandle{coord}, nil), InjectBarriers{ID: id, Timestamp: trig})
	want(t, "ack sink", c.Ack(id, sink0, []checkpoint.StateHandle{handle("sink", 0)}))
	want(t, "ack src1", c.Ack(id, src1, []checkpoint.StateHandle{handle("source", 1)}))
	want(t, "ack src0", c.Ack(id, src0, []checkpoint.StateHandle{handle("source", 0)}),
		PersistMetadata{ID: id, Timestamp: trig, States: []checkpoint.StateHandle{handle("sink", 0), coord, handle("source", 0), handle("source", 1)}})
}

func complete(t *testing.T, c *Coordinator, now time.Time, id int64) {
	t.Helper()
	triggerAndAck(t, c, now, id)
	want(t, "persisted", c.Persisted(id, nil), NotifyComplete{ID: id})
}

// Coordinators before barriers: every operator coordinator snapshots before
// any barrier; acknowledgements cannot get ahead of the barriers.
func TestCoordinatorsSnapshotBeforeBarriers(t *testing.T) {
	c := newCoord(t)
	want(t, "first tick schedules", c.Tick(t0))
	want(t, "before the interval", c.Tick(t0.Add(999*time.Millisecond)))
	now := t0.Add(time.Second)
	want(t, "interval reached", c.Tick(now), SnapshotCoordinators{ID: 1, Timestamp: now})
	want(t, "ack before barriers is ignored", c.Ack(1, src0, nil))
	want(t, "coordinators done", c.CoordinatorsSnapshotted(1, nil, nil), InjectBarriers{ID: 1, Timestamp: now})
	want(t, "second report ignored", c.CoordinatorsSnapshotted(1, nil, nil))
	want(t, "ack src0", c.Ack(1, src0, nil))
	want(t, "ack src1", c.Ack(1, src1, nil))
	want(t, "last ack", c.Ack(1, sink0, nil), PersistMetadata{ID: 1, Timestamp: now})
}

// A failed coordinator snapshot aborts before any barrier is injected.
func TestCoordinatorSnapshotFailureAborts(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(1))
	c.Tick(t0)
	c.Tick(t0.Add(time.Second))
	boom := errors.New("enumerator refused")
	a := abortOf(t, "coordinator failed", c.CoordinatorsSnapshotted(1, nil, boom), 1, checkpoint.ErrCoordinatorSnapshotFailed)
	if !errors.Is(a.Err, boom) {
		t.Fatalf("abort error %v does not carry the cause", a.Err)
	}
}

// Atomic checkpoints: with every acknowledgement in, the only action is to
// persist; sinks hear of completion only after Persisted succeeded.
func TestNoNotifyBeforePersist(t *testing.T) {
	c := newCoord(t)
	c.Tick(t0)
	trig := t0.Add(time.Second)
	triggerAndAck(t, c, trig, 1)
	want(t, "ticks while persisting", c.Tick(trig.Add(time.Hour)))
	want(t, "persisted elsewhere ignored", c.Persisted(7, nil))
	want(t, "persisted", c.Persisted(1, nil), NotifyComplete{ID: 1})
	if c.LastCompletedID() != 1 || len(c.PendingIDs()) != 0 {
		t.Fatalf("last completed %d, pending %v; want 1 and none", c.LastCompletedID(), c.PendingIDs())
	}
}

// A persist failure aborts the checkpoint and counts as a failure.
func TestPersistFailureAborts(t *testing.T) {
	c := newCoord(t)
	c.Tick(t0)
	triggerAndAck(t, c, t0.Add(time.Second), 1)
	disk := errors.New("disk full")
	acts := c.Persisted(1, disk)
	if len(acts) != 2 {
		t.Fatalf("persist failure: %#v, want NotifyAborted then FailJob", acts)
	}
	abortOf(t, "persist failure", acts[:1], 1, checkpoint.ErrPersistFailed)
	fj, ok := acts[1].(FailJob)
	if !ok || !errors.Is(fj.Err, checkpoint.ErrTooManyFailures) || !errors.Is(fj.Err, disk) {
		t.Fatalf("%#v, want FailJob matching checkpoint.ErrTooManyFailures and the disk error", acts[1])
	}
}

// A decline aborts and counts; past the tolerable count the job fails, and
// the coordinator then ignores everything until Restore.
func TestDeclineAbortsAndCounts(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(1))
	c.Tick(t0)
	now := t0.Add(time.Second)
	c.Tick(now)
	c.CoordinatorsSnapshotted(1, nil, nil)
	c.Ack(1, src0, nil)
	want(t, "decline from a task that acked is ignored", c.Decline(1, src0, errors.New("late")))
	why := errors.New("operator not ready")
	a := abortOf(t, "first decline", c.Decline(1, src1, why), 1, checkpoint.ErrDeclined)
	var ae *checkpoint.AbortError
	if !errors.As(a.Err, &ae) || ae.Task != src1 || !errors.Is(a.Err, why) {
		t.Fatalf("abort %v does not name the task and the reason", a.Err)
	}
	want(t, "ack after abort ignored", c.Ack(1, src1, nil))

	now = now.Add(time.Second)
	want(t, "next trigger", c.Tick(now), SnapshotCoordinators{ID: 2, Timestamp: now})
	acts := c.Decline(2, sink0, why)
	if len(acts) != 2 {
		t.Fatalf("second decline: %#v, want NotifyAborted and FailJob", acts)
	}
	var tm *checkpoint.TooManyFailuresError
	if fj, ok := acts[1].(FailJob); !ok || !errors.As(fj.Err, &tm) || tm.Consecutive != 2 || tm.Tolerable != 1 {
		t.Fatalf("%#v, want FailJob after 2 failures with 1 tolerable", acts[1])
	}
	want(t, "failed: tick", c.Tick(now.Add(time.Hour)))
	want(t, "failed: final", c.TriggerFinal(now.Add(time.Hour)))
	c.Restore(0)
	now = now.Add(2 * time.Hour)
	c.Tick(now)
	want(t, "after restore", c.Tick(now.Add(time.Second)), SnapshotCoordinators{ID: 3, Timestamp: now.Add(time.Second)})
}

// A completion resets the consecutive-failure count.
func TestCompletionResetsFailureCount(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(1))
	c.Tick(t0)
	c.Tick(t0.Add(time.Second))
	abortOf(t, "decline 1", c.Decline(1, src0, nil), 1, checkpoint.ErrDeclined)
	complete(t, c, t0.Add(2*time.Second), 2)
	c.Tick(t0.Add(3 * time.Second))
	abortOf(t, "decline 3 is again the first in a row", c.Decline(3, src0, nil), 3, checkpoint.ErrDeclined)
}

// A checkpoint not complete within the timeout is aborted by Tick; one
// whose metadata is being persisted waits for Persisted.
func TestTimeoutAborts(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(5))
	c.Tick(t0)
	trig := t0.Add(time.Second)
	c.Tick(trig)
	c.CoordinatorsSnapshotted(1, nil, nil)
	c.Ack(1, src0, nil)
	want(t, "just before timeout", c.Tick(trig.Add(10*time.Second-time.Nanosecond)))
	// The same Tick may trigger the next checkpoint: no pause is configured.
	abortOf(t, "timeout", c.Tick(trig.Add(10 * time.Second))[:1], 1, checkpoint.ErrTimeout)
	c.Restore(0) // ends checkpoint 2, which that Tick triggered

	c.Tick(trig.Add(20 * time.Second))
	trig = trig.Add(21 * time.Second)
	triggerAndAck(t, c, trig, 3)
	want(t, "persisting never times out", c.Tick(trig.Add(time.Hour)))
	want(t, "persisted late", c.Persisted(3, nil), NotifyComplete{ID: 3})
}

// The min pause runs from the end of the previous checkpoint; an end seen
// by an untimed event is dated by the next Tick.
func TestMinPause(t *testing.T) {
	c := newCoord(t, WithMinPause(5*time.Second))
	c.Tick(t0)
	complete(t, c, t0.Add(time.Second), 1)
	ended := t0.Add(2 * time.Second)
	want(t, "interval passed, pause not", c.Tick(ended))
	want(t, "pause almost over", c.Tick(ended.Add(5*time.Second-time.Nanosecond)))
	now := ended.Add(5 * time.Second)
	want(t, "pause over", c.Tick(now), SnapshotCoordinators{ID: 2, Timestamp: now})
}

func TestMinPauseAfterAbort(t *testing.T) {
	c := newCoord(t, WithMinPause(5*time.Second), WithTolerableFailures(3))
	c.Tick(t0)
	c.Tick(t0.Add(time.Second))
	abortOf(t, "decline", c.Decline(1, sink0, nil), 1, checkpoint.ErrDeclined)
	ended := t0.Add(2 * time.Second)
	want(t, "pause after abort", c.Tick(ended))
	want(t, "pause over", c.Tick(ended.Add(5*time.Second)), SnapshotCoordinators{ID: 2, Timestamp: ended.Add(5 * time.Second)})
}

// At most max-concurrent checkpoints are pending (default 1).
func TestMaxConcurrent(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			opts := []CoordinatorOption{WithTolerableFailures(100)}
			if n != 1 {
				opts = append(opts, WithMaxConcurrent(n))
			}
			c := newCoord(t, opts...)
			c.Tick(t0)
			triggered := 0
			for i := 1; i <= 5; i++ {
				for _, a := range c.Tick(t0.Add(time.Duration(i) * time.Second)) {
					if _, ok := a.(SnapshotCoordinators); ok {
						triggered++
					}
				}
			}
			if triggered != n || len(c.PendingIDs()) != n {
				t.Fatalf("triggered %d, pending %v; want %d", triggered, c.PendingIDs(), n)
			}
		})
	}
}

// Metadata is persisted one checkpoint at a time, oldest first, so
// completions come in id order.
func TestPersistOneAtATime(t *testing.T) {
	c := newCoord(t, WithMaxConcurrent(2))
	c.Tick(t0)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	c.Tick(t1)
	c.Tick(t2)
	c.CoordinatorsSnapshotted(1, nil, nil)
	c.CoordinatorsSnapshotted(2, nil, nil)
	for _, task := range allTask[:2] {
		c.Ack(1, task, nil)
		c.Ack(2, task, nil)
	}
	want(t, "1 acked", c.Ack(1, sink0, nil), PersistMetadata{ID: 1, Timestamp: t1})
	want(t, "2 acked, waits", c.Ack(2, sink0, nil))
	want(t, "1 persisted", c.Persisted(1, nil), NotifyComplete{ID: 1}, PersistMetadata{ID: 2, Timestamp: t2})
	want(t, "2 persisted", c.Persisted(2, nil), NotifyComplete{ID: 2})
}

// A completion subsumes older pending checkpoints: they are aborted,
// before the completion is announced, without counting as failures.
func TestCompletionSubsumesOlder(t *testing.T) {
	c := newCoord(t, WithMaxConcurrent(2))
	c.Tick(t0)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	c.Tick(t1)
	c.Tick(t2)
	c.CoordinatorsSnapshotted(1, nil, nil)
	c.CoordinatorsSnapshotted(2, nil, nil)
	for _, task := range allTask {
		c.Ack(2, task, nil)
	}
	acts := c.Persisted(2, nil)
	if len(acts) != 2 {
		t.Fatalf("%#v, want NotifyAborted{1} then NotifyComplete{2}", acts)
	}
	abortOf(t, "subsumed", acts[:1], 1, checkpoint.ErrSubsumed)
	want(t, "complete", acts[1:], NotifyComplete{ID: 2})
	// Tolerable is 0: a counted failure would have failed the job.
	want(t, "still running", c.Tick(t0.Add(3*time.Second)), SnapshotCoordinators{ID: 3, Timestamp: t0.Add(3 * time.Second)})
}

// Finished tasks are no longer waited for, in pending checkpoints or later
// ones.
func TestTaskFinished(t *testing.T) {
	c := newCoord(t)
	c.Tick(t0)
	now := t0.Add(time.Second)
	c.Tick(now)
	want(t, "finish during coordinator snapshot", c.TaskFinished(src1))
	c.CoordinatorsSnapshotted(1, nil, nil)
	c.Ack(1, src0, nil)
	want(t, "finish the last awaited task", c.TaskFinished(sink0), PersistMetadata{ID: 1, Timestamp: now})
	want(t, "finish again ignored", c.TaskFinished(sink0))
	want(t, "unknown task ignored", c.TaskFinished(checkpoint.TaskID{UID: "nope"}))
	want(t, "persisted", c.Persisted(1, nil), NotifyComplete{ID: 1})
	now = now.Add(time.Second)
	want(t, "next", c.Tick(now), SnapshotCoordinators{ID: 2, Timestamp: now})
	c.CoordinatorsSnapshotted(2, nil, nil)
	want(t, "only src0 expected", c.Ack(2, src0, nil), PersistMetadata{ID: 2, Timestamp: now})
}

// The final checkpoint of a bounded job is triggered at once, is the last
// one, reports its completion distinctly, and is retried if it aborts.
func TestFinalCheckpoint(t *testing.T) {
	c := newCoord(t, WithMinPause(time.Hour), WithTolerableFailures(1))
	c.Tick(t0)
	complete(t, c, t0.Add(time.Second), 1)
	now := t0.Add(1500 * time.Millisecond)
	want(t, "final ignores interval and pause", c.TriggerFinal(now), SnapshotCoordinators{ID: 2, Timestamp: now, Final: true})
	want(t, "second request while pending", c.TriggerFinal(now))
	abortOf(t, "final declined", c.Decline(2, sink0, nil), 2, checkpoint.ErrDeclined)
	later := now.Add(time.Millisecond)
	want(t, "retried at next tick", c.Tick(later), SnapshotCoordinators{ID: 3, Timestamp: later, Final: true})
	want(t, "barriers", c.CoordinatorsSnapshotted(3, nil, nil), InjectBarriers{ID: 3, Timestamp: later, Final: true})
	for _, task := range allTask[:2] {
		c.Ack(3, task, nil)
	}
	want(t, "acked", c.Ack(3, sink0, nil), PersistMetadata{ID: 3, Timestamp: later, Final: true})
	want(t, "no periodic trigger after final", c.Tick(later.Add(2*time.Hour)))
	want(t, "final complete", c.Persisted(3, nil), NotifyComplete{ID: 3, Final: true})
	want(t, "done", c.Tick(later.Add(4*time.Hour)))
	want(t, "done", c.TriggerFinal(later.Add(4*time.Hour)))
}

// The final checkpoint does not wait for a pending periodic one; when it
// completes, the older one is subsumed.
func TestFinalWhilePeriodicPending(t *testing.T) {
	c := newCoord(t)
	c.Tick(t0)
	c.Tick(t0.Add(time.Second))
	now := t0.Add(1100 * time.Millisecond)
	want(t, "final beyond max concurrent", c.TriggerFinal(now), SnapshotCoordinators{ID: 2, Timestamp: now, Final: true})
	c.CoordinatorsSnapshotted(2, nil, nil)
	for _, task := range allTask {
		c.Ack(2, task, nil)
	}
	acts := c.Persisted(2, nil)
	if len(acts) != 2 {
		t.Fatalf("%#v, want 1 subsumed then final complete", acts)
	}
	abortOf(t, "subsumed", acts[:1], 1, checkpoint.ErrSubsumed)
	want(t, "final", acts[1:], NotifyComplete{ID: 2, Final: true})
}

// Ids strictly increase, across Restore too, whatever id it is given.
func TestIDsMonotonicAcrossRestore(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(10))
	c.Tick(t0)
	complete(t, c, t0.Add(time.Second), 1)
	c.Tick(t0.Add(2 * time.Second)) // triggers 2, left pending
	acts := c.Restore(1)
	abortOf(t, "restore aborts pending", acts, 2, checkpoint.ErrRestarted)
	want(t, "aborted checkpoint's ack ignored", c.Ack(2, src0, nil))
	now := t0.Add(time.Minute)
	c.Tick(now)
	want(t, "continues above 2", c.Tick(now.Add(time.Second)), SnapshotCoordinators{ID: 3, Timestamp: now.Add(time.Second)})
	c.Restore(40) // a newer process's checkpoints found on disk
	c.Tick(now.Add(time.Hour))
	want(t, "continues above 40", c.Tick(now.Add(time.Hour+time.Second)), SnapshotCoordinators{ID: 41, Timestamp: now.Add(time.Hour + time.Second)})
	if c.LastCompletedID() != 40 {
		t.Fatalf("LastCompletedID = %d, want 40", c.LastCompletedID())
	}

	fresh := newCoord(t)
	fresh.Restore(7)
	fresh.Tick(t0)
	want(t, "fresh coordinator restored to 7", fresh.Tick(t0.Add(time.Second)), SnapshotCoordinators{ID: 8, Timestamp: t0.Add(time.Second)})
}

// Events for checkpoints that are unknown, already aborted or already
// complete, and from tasks that are not awaited, change nothing.
func TestStaleEventsIgnored(t *testing.T) {
	c := newCoord(t, WithTolerableFailures(10))
	c.Tick(t0)
	complete(t, c, t0.Add(time.Second), 1)
	for _, tc := range []struct {
		name string
		acts []Action
	}{
		{"ack unknown id", c.Ack(99, src0, nil)},
		{"ack completed", c.Ack(1, src0, nil)},
		{"decline completed", c.Decline(1, src0, nil)},
		{"persisted completed", c.Persisted(1, nil)},
		{"coordinators of completed", c.CoordinatorsSnapshotted(1, nil, nil)},
	} {
		want(t, tc.name, tc.acts)
	}
	now := t0.Add(2 * time.Second)
	c.Tick(now)
	c.CoordinatorsSnapshotted(2, nil, nil)
	want(t, "ack unknown task", c.Ack(2, checkpoint.TaskID{UID: "ghost"}, nil))
	want(t, "decline unknown task", c.Decline(2, checkpoint.TaskID{UID: "ghost"}, nil))
	want(t, "persisted before asked", c.Persisted(2, nil))
	c.Ack(2, src0, nil)
	want(t, "duplicate ack", c.Ack(2, src0, nil))
	abortOf(t, "decline", c.Decline(2, src1, nil), 2, checkpoint.ErrDeclined)
	want(t, "ack aborted", c.Ack(2, sink0, nil))
	want(t, "persisted aborted", c.Persisted(2, nil))
}

func TestCoordinatorOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks []checkpoint.TaskID
		opts  []CoordinatorOption
	}{
		{"no tasks", nil, nil},
		{"duplicate task", []checkpoint.TaskID{src0, src0}, nil},
		{"task without uid", []checkpoint.TaskID{{Subtask: 0}}, nil},
		{"zero interval", allTask, []CoordinatorOption{WithInterval(0)}},
		{"zero timeout", allTask, []CoordinatorOption{WithTimeout(0)}},
		{"negative pause", allTask, []CoordinatorOption{WithMinPause(-1)}},
		{"zero concurrent", allTask, []CoordinatorOption{WithMaxConcurrent(0)}},
		{"pause with concurrency", allTask, []CoordinatorOption{WithMinPause(time.Second), WithMaxConcurrent(2)}},
		{"negative tolerable", allTask, []CoordinatorOption{WithTolerableFailures(-1)}},
	} {
		if _, err := NewCoordinator(tc.tasks, tc.opts...); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	c, err := NewCoordinator(allTask)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg != defaultCoordinatorConfig() || c.cfg.maxConcurrent != 1 || c.cfg.tolerable != 0 {
		t.Fatalf("defaults %+v", c.cfg)
	}
}

// checkpointLife is what the randomized test saw of one checkpoint.
type checkpointLife struct {
	coordinatorsDone bool
	barriers         bool
	persistAsked     bool
	ended            string // "", "complete", "aborted"
}

// Randomized event order over many seeds. Whatever the order, and however
// wrong the events (stale ids, unknown tasks, duplicates), the coordinator:
//   - triggers strictly increasing ids;
//   - injects barriers for N only in answer to a successful
//     CoordinatorsSnapshotted(N) (coordinators before barriers);
//   - asks to persist N only after barriers for N, one persist at a time;
//   - emits NotifyComplete{N} only in answer to a successful Persisted(N)
//     that it asked for (atomic checkpoints);
//   - ends every triggered checkpoint exactly once, complete or aborted;
//   - triggers nothing after the final checkpoint completed;
//   - says nothing between FailJob and Restore, and produces the same
//     actions for the same events (it is deterministic).
func TestRandomizedEventOrder(t *testing.T) {
	seen := map[string]int{}
	for seed := range uint64(400) {
		trace := runRandom(t, seed, seen)
		if again := runRandom(t, seed, map[string]int{}); !slices.Equal(trace, again) {
			t.Fatalf("seed %d: two runs of the same events differ", seed)
		}
	}
	// The events must reach every outcome often, or the checks above prove
	// little.
	for _, kind := range []string{"coordinator.NotifyComplete", "coordinator.NotifyAborted", "coordinator.FailJob", "coordinator.PersistMetadata"} {
		if seen[kind] < 100 {
			t.Errorf("only %d %s over all seeds", seen[kind], kind)
		}
	}
	t.Logf("actions over all seeds: %v", seen)
}

func runRandom(t *testing.T, seed uint64, seen map[string]int) []string {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	opts := []CoordinatorOption{
		WithInterval(time.Duration(1+rng.IntN(3)) * time.Second),
		WithTimeout(time.Duration(2+rng.IntN(8)) * time.Second),
		WithTolerableFailures(rng.IntN(4)),
	}
	if rng.IntN(2) == 0 {
		opts = append(opts, WithMaxConcurrent(1+rng.IntN(3)))
	} else {
		opts = append(opts, WithMinPause(time.Duration(rng.IntN(3))*time.Second))
	}
	c, err := NewCoordinator(allTask, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lives := map[int64]*checkpointLife{}
	var ids []int64 // triggered, in order
	var trace []string
	now := t0
	failed := false
	finalDone := false
	persisting := int64(0)
	persistAsked := map[int64]bool{}

	fatal := func(step string, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, %s: %s", seed, step, fmt.Sprintf(format, args...))
	}
	apply := func(step string, acts []Action, persistedOK int64, coordsOK int64) {
		t.Helper()
		trace = append(trace, fmt.Sprintf("%s -> %v", step, acts))
		if failed && len(acts) > 0 {
			fatal(step, "actions %v after FailJob", acts)
		}
		for _, a := range acts {
			seen[fmt.Sprintf("%T", a)]++
			switch a := a.(type) {
			case SnapshotCoordinators:
				if finalDone {
					fatal(step, "trigger of %d after the final checkpoint completed", a.ID)
				}
				if len(ids) > 0 && a.ID <= ids[len(ids)-1] {
					fatal(step, "triggered %d after %d", a.ID, ids[len(ids)-1])
				}
				ids = append(ids, a.ID)
				lives[a.ID] = &checkpointLife{}
			case InjectBarriers:
				l := lives[a.ID]
				if l == nil || l.ended != "" || coordsOK != a.ID {
					fatal(step, "barriers for %d not in answer to its coordinator snapshots", a.ID)
				}
				l.coordinatorsDone, l.barriers = true, true
			case PersistMetadata:
				l := lives[a.ID]
				if l == nil || l.ended != "" || !l.barriers || l.persistAsked {
					fatal(step, "persist of %d before its barriers, after its end or twice", a.ID)
				}
				if persisting != 0 {
					fatal(step, "persist of %d while %d is persisting", a.ID, persisting)
				}
				l.persistAsked = true
				persisting = a.ID
				persistAsked[a.ID] = true
			case NotifyComplete:
				l := lives[a.ID]
				if l == nil || l.ended != "" || persistedOK != a.ID || !l.persistAsked {
					fatal(step, "NotifyComplete{%d} not in answer to its successful Persisted", a.ID)
				}
				l.ended = "complete"
				persisting = 0
				finalDone = finalDone || a.Final
			case NotifyAborted:
				l := lives[a.ID]
				if l == nil || l.ended != "" {
					fatal(step, "abort of %d that is unknown or already ended", a.ID)
				}
				var ae *checkpoint.AbortError
				if !errors.As(a.Err, &ae) || ae.ID != a.ID {
					fatal(step, "abort of %d carries %v", a.ID, a.Err)
				}
				l.ended = "aborted"
				if persisting == a.ID {
					persisting = 0
				}
			case FailJob:
				if !errors.Is(a.Err, checkpoint.ErrTooManyFailures) {
					fatal(step, "FailJob with %v", a.Err)
				}
				failed = true
			}
		}
	}
	pick := func() int64 {
		// Mostly a pending checkpoint, sometimes a stale or unknown id.
		if p := c.PendingIDs(); len(p) > 0 && rng.IntN(8) != 0 {
			return p[rng.IntN(len(p))]
		}
		return int64(rng.IntN(len(ids) + 3))
	}
	pickTask := func() checkpoint.TaskID {
		if rng.IntN(20) == 0 {
			return checkpoint.TaskID{UID: "ghost"}
		}
		return allTask[rng.IntN(len(allTask))]
	}
	for range 300 {
		switch r := rng.IntN(100); {
		case r < 25:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			apply("Tick", c.Tick(now), 0, 0)
		case r < 27:
			apply("TriggerFinal", c.TriggerFinal(now), 0, 0)
		case r < 40:
			id := pick()
			var err error
			if rng.IntN(15) == 0 {
				err = errors.New("coordinator failed")
			}
			ok := id
			if err != nil {
				ok = 0
			}
			apply(fmt.Sprintf("CoordinatorsSnapshotted(%d, %v)", id, err), c.CoordinatorsSnapshotted(id, nil, err), 0, ok)
		case r < 77:
			id, task := pick(), pickTask()
			apply(fmt.Sprintf("Ack(%d, %s)", id, task), c.Ack(id, task, []checkpoint.StateHandle{handle(task.UID, task.Subtask)}), 0, 0)
		case r < 79:
			id, task := pick(), pickTask()
			apply(fmt.Sprintf("Decline(%d, %s)", id, task), c.Decline(id, task, errors.New("no")), 0, 0)
		case r < 92:
			id := pick()
			if persisting != 0 && rng.IntN(2) == 0 {
				id = persisting
			}
			var err error
			if rng.IntN(8) == 0 {
				err = errors.New("fsync failed")
			}
			ok := id
			if err != nil || !persistAsked[id] {
				ok = 0
			}
			apply(fmt.Sprintf("Persisted(%d, %v)", id, err), c.Persisted(id, err), ok, 0)
		case r < 97:
			task := pickTask()
			apply(fmt.Sprintf("TaskFinished(%s)", task), c.TaskFinished(task), 0, 0)
		default:
			last := int64(0)
			if len(ids) > 0 && rng.IntN(2) == 0 {
				last = ids[len(ids)-1]
			}
			failed, finalDone = false, false
			apply(fmt.Sprintf("Restore(%d)", last), c.Restore(last), 0, 0)
			persisting = 0
		}
	}
	// Wind down: finish an outstanding persist, then restart, which ends
	// everything still pending.
	if persisting != 0 && !failed {
		id := persisting
		apply(fmt.Sprintf("Persisted(%d, nil)", id), c.Persisted(id, nil), id, 0)
	}
	failed = false
	apply("Restore", c.Restore(0), 0, 0)
	if len(c.PendingIDs()) != 0 {
		fatal("end", "pending after Restore: %v", c.PendingIDs())
	}
	for _, id := range ids {
		if lives[id].ended == "" {
			fatal("end", "checkpoint %d never completed nor aborted", id)
		}
	}
	return trace
}

// Periodic checkpoints keep to a grid of one interval from the first
// Tick: a trigger that came late (the Tick after the due time) does not
// push every later one back by its lateness. A Tick driven by a coarse
// ticker would otherwise space checkpoints by the interval plus up to one
// tick, and a record would wait that much longer for its barrier.
func TestPeriodicCheckpointsKeepToTheIntervalGridWhenATriggerComesLate(t *testing.T) {
	c := newCoord(t)
	want(t, "first tick schedules", c.Tick(t0))
	late := t0.Add(time.Second + 30*time.Millisecond)
	complete(t, c, late, 1)
	second := t0.Add(2 * time.Second)
	want(t, "the grid's next point, not one interval after the late trigger", c.Tick(second), SnapshotCoordinators{ID: 2, Timestamp: second})
	ackAll(t, c, second, 2)
	want(t, "persisted", c.Persisted(2, nil), NotifyComplete{ID: 2})

	// A trigger held back past a whole interval (a checkpoint pending)
	// goes on at the next point of the grid after it.
	held := t0.Add(4*time.Second + 500*time.Millisecond)
	complete(t, c, held, 3)
	want(t, "before the next point", c.Tick(t0.Add(4*time.Second+999*time.Millisecond)))
	fifth := t0.Add(5 * time.Second)
	want(t, "the next point after the held trigger", c.Tick(fifth), SnapshotCoordinators{ID: 4, Timestamp: fifth})
}

// NextTrigger names when the next periodic checkpoint is due, so that the
// caller can Tick then instead of at its ticker's next beat.
func TestNextTriggerIsTheDueTimeOfThePeriodicCheckpoint(t *testing.T) {
	c := newCoord(t)
	if _, ok := c.NextTrigger(); ok {
		t.Fatal("a due time before the first Tick")
	}
	c.Tick(t0)
	if due, ok := c.NextTrigger(); !ok || !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextTrigger = %v, %v; want %v", due, ok, t0.Add(time.Second))
	}
}
