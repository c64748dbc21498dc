package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/coordinator"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/goroutine"
	"github.com/splitflow/splitflow/runtime/internal/jobstorage"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/slotrun"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
)

// execution is one run of a job graph: Flink's JobMaster reduced to one
// goroutine, the master, which owns everything below. Tasks and
// coordinators reach it through its mailbox (acknowledgements, declines,
// ended inputs, exits, failures); it drives the checkpoint coordinator's
// deterministic core (package checkpoint) with those events and a ticker,
// and performs the actions the core returns, in order: snapshot the
// operator coordinators, then inject barriers, persist the metadata, and
// only then notify tasks and coordinators (coordinators before barriers,
// atomic checkpoints). It also runs the failover: a failed task of a job of
// independent pipelines restarts its region, anything else restarts the job,
// as the restart strategy allows.
type execution struct {
	env       *Environment
	cfg       *config
	g         *jobGraph
	log       *slog.Logger
	pointwise bool
	strategy  restart.Strategy

	master   *engine.Mailbox
	hard     context.Context
	stopHard context.CancelFunc

	// The current attempt's coordinators.
	coords    []srccoord.Coordinator
	coordUIDs []string
	coordOf   map[*node]srccoord.Coordinator
	coordCtx  context.Context
	stopCoord context.CancelFunc
	coordWG   *sync.WaitGroup
	coordGen  int

	tasks    []*task // current tasks, not replaced by a restart
	live     int     // task goroutines alive, current or not
	attempt  int
	restarts int

	// Checkpointing; cc is nil when it is off.
	cc       *coordinator.Coordinator
	storage  checkpoint.Storage
	writers  map[int64]checkpoint.Writer
	injected map[int64]engine.CheckpointBarrier
	ended    map[*task]bool
	// snapWG counts the coordinator-snapshot and state-write goroutines;
	// stateIO bounds the state writes under way (statewrite.go).
	snapWG  sync.WaitGroup
	stateIO chan struct{}
	// pebble is the job's pebble state backend once a task opened it.
	pebbleMu sync.Mutex
	pebble   *pebblestate.Backend
	// completedID is the newest completed checkpoint, finalID the final
	// checkpoint of this attempt (0 before it completed); see notify.go.
	completedID, finalID int64

	// Failover.
	restarting    bool
	restartRegion int // -1: global
	restartDelay  time.Duration
	waitingExit   int
	restartTimer  *time.Timer
	restartC      <-chan time.Time

	draining bool
	// savepointDrain: a slot stopping for a savepoint of the whole
	// distributed job (savepointdrain.go); drainingForSavepoint is the
	// same for the task goroutines.
	savepointDrain       bool
	drainingForSavepoint atomic.Bool
	stopped              bool // stopped for good: no restart
	// endCommits records the sinks that committed at the end of input in
	// a job without checkpoints (endOfInputCommit).
	endCommits endCommits
	err        error
	// lastFailure is the newest failure; cancelledAfter the failure the
	// job was restarting from when Execute's context was cancelled.
	lastFailure, cancelledAfter error
	// Tasks cancelled and not exited yet, and the watchdog that abandons
	// those that take too long (watchdog.go).
	cancelling []*task
	watchdog   *time.Timer
	watchdogC  <-chan time.Time

	// started is when Execute began, attemptStarted when the current
	// global attempt began; progressed that the job got going since
	// (gotGoing).
	started, attemptStarted time.Time
	progressed              bool

	// claim is the job's use of its checkpoint storage in this process
	// (jobstorage.Use), nil before it is taken.
	claim *jobstorage.Claim

	// Savepoints (savepoint.go): requests waiting for a trigger, those
	// waiting for their checkpoint by id, the stop's request and its
	// savepoint once taken. cancelRun cancels the context the job runs
	// under (a stop); done is closed when run has returned.
	savepointQueue []*savepointRequest
	savepointFor   map[int64][]*savepointRequest
	stopSavepoint  *savepointRequest
	// stopResult is the stop's savepoint, set by its copy (off the
	// master) and read once the copies have been waited for.
	stopResult atomic.Pointer[savepointResult]
	// outputCommitted is the newest checkpoint whose output every sink
	// task has committed (in some attempt), set on the master by release
	// and read by savepoint copies; unmarked holds the savepoints copied
	// whose checkpoint is not that far yet, to be marked committed when
	// it is (markCommitted).
	outputCommitted atomic.Int64
	unmarked        []copiedSavepoint
	cancelRun       func()
	done            chan struct{}

	// obs is the Environment's metrics and status board; name the job's
	// name for it.
	obs  *observe.Observer
	name string

	// slot is set when the execution runs one slot of a distributed job
	// (runtime/internal/slotrun): only the slot's subtask of every chain, restored from
	// its ownership log's restore point, each checkpoint recorded in the
	// log before it is notified.
	slot *slotrun.Slot
}

// unrecoverableError is a failure no restart can help: the job fails with
// it whatever the restart strategy (Flink's SuppressRestartsException).
// It is the engine's type, so that runtime's internal packages can return it.
type unrecoverableError = engine.UnrecoverableError

func newExecution(env *Environment, g *jobGraph, name string) (*execution, error) {
	return newExecutionWith(env, g, name, &env.cfg, nil)
}

// newExecutionWith is newExecution under cfg, for slot (nil: the whole
// job).
func newExecutionWith(env *Environment, g *jobGraph, name string, cfg *config, slot *slotrun.Slot) (*execution, error) {
	ex := &execution{
		slot:      slot,
		env:       env,
		cfg:       cfg,
		g:         g,
		log:       cfg.cp.logger,
		pointwise: g.pointwise(),
		strategy:  cfg.cp.restartStrategy(),
		master:    engine.NewMailbox(),
		writers:   map[int64]checkpoint.Writer{},
		injected:  map[int64]engine.CheckpointBarrier{},
		ended:     map[*task]bool{},

		savepointFor: map[int64][]*savepointRequest{},
		cancelRun:    func() {},
		done:         make(chan struct{}),
	}
	if ex.log == nil {
		ex.log = slog.Default()
	}
	ex.obs = env.observer()
	if !cfg.cp.enabled() {
		return ex, nil
	}
	var err error
	ex.storage, err = jobstorage.Open(cfg.cp.storage, cfg.cp.dir, cfg.cp.retained, ex.log)
	if err != nil {
		return nil, err
	}
	var ids []checkpoint.TaskID
	for _, c := range g.chains {
		for s := range c.parallelism {
			if slot == nil || s == slot.Index {
				ids = append(ids, checkpoint.TaskID{UID: c.head().uid, Subtask: s})
			}
		}
	}
	ex.cc, err = coordinator.NewCoordinator(ids,
		coordinator.WithInterval(cfg.cp.interval),
		coordinator.WithTimeout(cfg.cp.timeout),
		coordinator.WithMinPause(cfg.cp.minPause),
		coordinator.WithMaxConcurrent(1),
		coordinator.WithTolerableFailures(cfg.cp.tolerable))
	if err != nil {
		return nil, err
	}
	// One job per checkpoint directory: a second one would delete the
	// first one's checkpoints and commit output twice.
	if ex.claim, err = jobstorage.Use(ex.storage, name, ex.log); err != nil {
		return nil, err
	}
	if slot == nil {
		if err := jobstorage.ClaimOwner(ex.storage, checkpoint.StorageOwner{Job: name}, cfg.cp.renamedFrom, ex.log); err != nil {
			ex.releaseStorage()
			return nil, err
		}
	}
	return ex, nil
}

// latest loads the checkpoint to restore from: nil without checkpoints.
func (ex *execution) latest() (*engine.RestoredState, error) {
	if ex.storage == nil {
		ex.reportRestore(nil)
		return nil, nil
	}
	if ex.slot != nil {
		return ex.slotLatest()
	}
	chk, err := ex.storage.Latest()
	rs := &engine.RestoredState{Chk: chk}
	where := ex.storageName()
	switch {
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		// No checkpoint of the job's own yet: a savepoint or checkpoint
		// given to start from, at the start and at every restart until
		// the job completes one.
		if rs, err = ex.restorePoint(); rs == nil || err != nil {
			if err == nil {
				ex.reportRestore(nil)
			}
			return nil, err
		}
		where = rs.Path
	case err != nil:
		return nil, &unrecoverableError{Err: fmt.Errorf("restore: %w", err)}
	case ex.cfg.cp.restoreFrom != "" && ex.attempt == 0:
		ex.log.Warn("splitflow: restore: the job's checkpoint storage holds checkpoints, so the job resumes from its newest one and WithRestoreFrom is not used; give a new checkpoint storage to start from the savepoint",
			"storage", ex.storageName(), "checkpoint", chk.ID, "restoreFrom", ex.cfg.cp.restoreFrom)
	}
	return ex.checkedRestore(rs, where)
}

// checkedRestore checks that rs, loaded from where, fits the job (state by
// uid, max parallelism), logs what it warns of, and reports it.
func (ex *execution) checkedRestore(rs *engine.RestoredState, where string) (*engine.RestoredState, error) {
	warnings, err := ex.g.checkRestore(rs.Chk, where, ex.cfg.cp.allowNonRestored)
	if err != nil {
		return nil, &unrecoverableError{Err: err}
	}
	for _, w := range warnings {
		ex.log.Warn("splitflow: restore: " + w)
	}
	ex.reportRestore(rs)
	return rs, nil
}

// releaseStorage gives back what newExecution took beyond memory: the
// checkpoint directory's lock and the claim on its storage, in one step,
// so that a job claiming the storage next finds it unlocked and locks it
// itself. Called once Execute is done with the execution.
func (ex *execution) releaseStorage() { ex.claim.Release() }

// storageName says where checkpoints are kept, for errors.
func (ex *execution) storageName() string { return jobstorage.Name(ex.storage) }

// nextBeat is how long the master waits for its next Tick of cc: every,
// or less where the next periodic checkpoint is due sooner. A due time
// already past is a trigger held back (a pending checkpoint, the pause):
// the beat after every tries again.
func nextBeat(cc *coordinator.Coordinator, every time.Duration, now time.Time) time.Duration {
	if due, ok := cc.NextTrigger(); ok {
		if until := due.Sub(now); until > 0 && until < every {
			return until
		}
	}
	return every
}

func (ex *execution) run(ctx context.Context) error {
	// The tasks do not run under ctx: its cancellation is a request to
	// drain, while hard stops (a failure, the drain timeout) cancel this
	// context instead.
	ex.hard, ex.stopHard = context.WithCancel(context.Background())
	defer ex.stopHard()
	defer ex.closePebble()
	ex.started = time.Now()

	if ex.slot == nil {
		// A slot's execution is one of many of the job: the distributed
		// driver reports the job's start and end.
		jobStarted(ex.obs, ex.g, ex.name, ex.cc != nil, ex.cfg.cp.interval)
		defer func() { ex.obs.JobEnded(ctx, ex.err) }()
	}
	if ex.cfg.state.backend == kindPebble {
		// A state directory that cannot be used fails the job now, not
		// each task after each restart.
		if _, err := ex.pebbleFor(&ex.cfg.state); err != nil {
			ex.err = err
			return err
		}
	}
	rs, err := ex.latest()
	if err != nil {
		ex.err = err
		return err
	}
	if ex.cc != nil {
		ids, err := ex.storage.List()
		if err != nil {
			ex.err = fmt.Errorf("list checkpoints: %w", err)
			return ex.err
		}
		// Ids go on after a savepoint restored from, so that the sinks'
		// transactions of the restored checkpoint keep their own id.
		newest := rs.ID()
		if len(ids) > 0 {
			newest = max(newest, slices.Max(ids))
		}
		if ex.slot != nil {
			newest = max(newest, ex.slot.NextID-1)
		}
		ex.perform(ex.cc.Restore(newest))
	}
	ex.startAttempt(rs)

	// The coordinator's clock: a beat every `every` for its timeouts and
	// for triggers the pause or a pending checkpoint held back, and a beat
	// at the due time of each periodic checkpoint, so that checkpoints
	// come one interval apart, not one interval plus up to a beat.
	var tick <-chan time.Time
	var beat *time.Timer
	var every time.Duration
	if ex.cc != nil {
		every = min(ex.cfg.cp.interval, ex.cfg.cp.timeout) / 5
		every = min(max(every, time.Millisecond), 50*time.Millisecond)
		beat = time.NewTimer(every)
		defer beat.Stop()
		tick = beat.C
	}
	cancelled := ctx.Done()
	var drain <-chan time.Time
	for {
		for ex.master.HasMail() {
			m, ok := ex.master.Take()
			if !ok {
				break
			}
			_ = m.Run()
		}
		if ex.live == 0 && !ex.restarting {
			break
		}
		select {
		case <-ex.master.Ready:
		case now := <-tick:
			if !ex.restarting && !ex.stopped {
				// A queued savepoint first: once checkpoints take
				// longer than the interval, the periodic trigger is
				// due at every tick after a completion and would
				// take the one free slot each time.
				ex.triggerSavepoints(now)
				ex.perform(ex.cc.Tick(now))
			}
			beat.Reset(nextBeat(ex.cc, every, time.Now()))
		case <-ex.restartC:
			ex.restartC = nil
			ex.restart()
		case <-cancelled:
			cancelled = nil
			if ex.stopped {
				ex.stop(nil)
				continue
			}
			if ex.restarting && (ex.cc == nil || ex.cc.LastCompletedID() == 0) {
				// No checkpoint completed: nothing was prepared that a
				// restart would commit.
				ex.cancelledAfter = ex.lastFailure
				ex.stop(nil)
				continue
			}
			if ex.restarting {
				ex.cancelledAfter = ex.lastFailure
				ex.drainRestart()
			}
			ex.draining = true
			for _, t := range ex.tasks {
				if t.isSource {
					t.requestStop()
				}
			}
			tm := time.NewTimer(ex.cfg.drainTimeout)
			defer tm.Stop()
			drain = tm.C
		case now := <-ex.watchdogC:
			ex.watchdogFired(now)
		case <-drain:
			drain = nil
			ex.stop(fmt.Errorf("%w (%v)", ErrDrainTimeout, ex.cfg.drainTimeout))
		}
	}
	if ex.restartTimer != nil {
		ex.restartTimer.Stop()
	}
	if ex.watchdog != nil {
		ex.watchdog.Stop()
	}
	ex.stopCoordinators()
	ex.snapWG.Wait()
	for _, w := range ex.writers {
		_ = w.Abort()
	}
	ex.master.Close()
	if ex.cancelledAfter != nil {
		ex.err = ex.cancelledWhileRestarting(ex.err)
	}
	ex.endSavepoints()
	close(ex.done)
	return ex.err
}

// drainRestart handles a cancel that arrives while the job waits to
// restart. The last completed checkpoint's transactions are prepared and
// may not be committed yet (the failure may have come between completion
// and commit); left so, they pin every read_committed consumer of the
// output until the broker aborts them, and their records are lost. So the
// restart runs now instead of after its delay, as a drain: its committers
// commit the restored committables before any writer exists, its sources
// stop at their first step, and the final checkpoint ends it.
func (ex *execution) drainRestart() {
	ex.restartDelay = 0
	if ex.waitingExit == 0 {
		ex.armRestart()
	}
}

// cancelledWhileRestarting is what Execute returns after a cancel during a
// restart: the failure the job was restarting from and, when the drained
// restart failed too (settle), that the restored transactions may be
// open and how to commit them.
func (ex *execution) cancelledWhileRestarting(settle error) error {
	if settle == nil {
		return fmt.Errorf("%w: %w", ErrCancelledWhileRestarting, ex.cancelledAfter)
	}
	if ex.cc == nil {
		return fmt.Errorf("%w: %w; then: %w", ErrCancelledWhileRestarting, ex.cancelledAfter, settle)
	}
	hint := fmt.Sprintf("run the job again on the same checkpoint storage (%s) to commit them", ex.storageName())
	if _, ok := ex.storage.(*checkpoint.MemoryStorage); ok {
		hint = "the checkpoints were kept in memory, so no later run can commit them; the broker aborts them after their transaction timeout"
	}
	return fmt.Errorf("%w: %w; the restart run to commit the transactions of checkpoint %d failed too, so they may still be open, holding back read_committed consumers: %w; %s",
		ErrCancelledWhileRestarting, ex.cancelledAfter, ex.cc.LastCompletedID(), settle, hint)
}

// canRestart says whether a failure of the job can ever be restarted,
// which is what the coordinators' bookings are for.
func (ex *execution) canRestart() bool {
	_, ok := ex.strategy.Backoff(1)
	return ok
}

// startAttempt creates the coordinators (restored from rs) and every task,
// and starts them: the first start and every global restart.
func (ex *execution) startAttempt(rs *engine.RestoredState) {
	ex.attemptStarted = time.Now()
	ex.coordGen++
	gen := ex.coordGen
	ex.coordCtx, ex.stopCoord = context.WithCancel(ex.hard)
	ex.coordWG = &sync.WaitGroup{}
	ex.coords, ex.coordUIDs, ex.coordOf = nil, nil, map[*node]srccoord.Coordinator{}
	for _, n := range ex.g.nodes {
		if n.source == nil {
			continue
		}
		state, err := rs.Coordinator(n.uid)
		if err != nil {
			ex.stop(&unrecoverableError{Err: fmt.Errorf("restore coordinator %s: %w", n.uid, err)})
			return
		}
		var rescaled [][]byte
		if ex.cfg.cp.rescaledToEnumerator {
			old, err := rs.Subtasks(n.uid)
			if err != nil {
				ex.stop(&unrecoverableError{Err: fmt.Errorf("restore readers of %s: %w", n.uid, err)})
				return
			}
			if len(old) > 0 && len(old) != n.par(ex.cfg) {
				rescaled = old
			}
		}
		info := engine.OpInfo{Name: n.name, UID: n.uid, Subtask: -1}
		fail := func(err error) {
			ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "coordinator failed", Run: func() error {
				if gen == ex.coordGen {
					ex.failure(nil, err)
				}
				return nil
			}})
		}
		c := n.source.newCoordinator(info, n.par(ex.cfg), fail, ex.cfg.cp.gate, state, rescaled, ex.canRestart())
		c.Observe(ex.obs.Group(n.name, n.uid, -1), ex.log)
		if ex.slot != nil {
			c.StartShufflesAt(ex.slot.ShuffleStarts)
		}
		ex.coordOf[n] = c
		ex.coords = append(ex.coords, c)
		ex.coordUIDs = append(ex.coordUIDs, n.uid)
	}
	ex.tasks = ex.buildTasks(ex.slotIndex(), rs)
	for _, c := range ex.coords {
		ex.coordWG.Go(func() { c.Run(ex.coordCtx) })
	}
	for _, t := range ex.tasks {
		ex.start(t)
	}
	if ex.savepointDrain {
		ex.drainTasksForSavepoint(ex.tasks)
	}
}

func (ex *execution) stopCoordinators() {
	if ex.stopCoord != nil {
		ex.stopCoord()
		ex.coordWG.Wait()
	}
}

func (ex *execution) start(t *task) {
	ctx, cancel := context.WithCancel(ex.hard)
	t.stopCtx = cancel
	t.startedAt = time.Now()
	ex.live++
	go func() {
		t.goroutine.Store(goroutine.ID())
		err := t.run(ctx)
		cancel()
		ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "task exited", Run: func() error {
			ex.taskExited(t, err)
			return nil
		}})
	}()
}

func (ex *execution) current(t *task) bool { return slices.Contains(ex.tasks, t) }

func (ex *execution) taskExited(t *task, err error) {
	if t.abandoned {
		return // the watchdog gave up on it and counted it gone
	}
	ex.exitedAfterCancel(t)
	ex.live--
	t.exited = true
	reportTaskExit(ex.obs, t, err)
	if !ex.current(t) {
		ex.waitingExit--
		if ex.restarting && ex.waitingExit == 0 {
			ex.armRestart()
		}
		return
	}
	if err != nil && !errors.Is(err, errTaskCancelled) {
		ex.failure(t, err)
		return
	}
	if err == nil {
		// Finished: drop it so that nothing is sent to it any more.
		ex.tasks = slices.DeleteFunc(ex.tasks, func(x *task) bool { return x == t })
		delete(ex.ended, t)
	}
}

// failure decides what a failure of t (nil: of a coordinator or of
// checkpointing) costs: a region restart, a global restart, or the job.
func (ex *execution) failure(t *task, err error) {
	if ex.stopped {
		return
	}
	ex.lastFailure = err
	failedWith(ex.obs, t, err)
	var ue *unrecoverableError
	if ex.draining || errors.As(err, &ue) || errors.Is(err, connector.ErrInvalidConfiguration) {
		ex.stop(err)
		return
	}
	if d := ex.cfg.cp.startupTimeout; d > 0 && !ex.gotGoing(t, d) && time.Since(ex.started) >= d {
		ex.stop(fmt.Errorf("%w: in the %v since the job started (%d restarts) no checkpoint completed, no source emitted a record and no attempt ran that long without failing, so it fails instead of restarting again (WithStartupFailureTimeout); check that its external systems can be reached; last failure: %w",
			ErrNeverStarted, d, ex.restarts, err))
		return
	}
	region := -1
	if t != nil && ex.pointwise && ex.finalID == 0 {
		// Once this attempt's final checkpoint completed, the tasks of the
		// other regions finish as soon as their sinks committed it, and a
		// finished task is gone for the coordinator's checkpoints: the
		// final checkpoint of a region restart would wait for it until it
		// timed out. Restarting everything from that checkpoint instead
		// commits the restored committables again (commits are
		// idempotent) and ends every task at once.
		region = t.region
	}
	if ex.restarting {
		if ex.restartRegion < 0 || ex.restartRegion == region {
			ex.cancelTasks(region) // absorbed by the restart under way
			return
		}
		region = -1 // another region failed too: restart everything
	}
	// From here until the tasks of region are cancelled no sink of it
	// starts an end-of-input commit (endOfInputCommit checks the task's
	// context under the same lock).
	ex.endCommits.mu.Lock()
	defer ex.endCommits.mu.Unlock()
	if sink := ex.endCommits.in(region); sink != "" {
		ex.stop(&unrecoverableError{Err: fmt.Errorf("%s committed its output at the end of input, and without checkpoints a restart starts from the beginning and would commit it again, so the job fails instead of restarting; with checkpoints on (runtime.WithCheckpointInterval) a restart resumes from the last one: %w", sink, err)})
		return
	}
	n := ex.restarts + 1
	delay, ok := ex.strategy.Backoff(n)
	if !ok {
		ex.stop(err)
		return
	}
	ex.restarts = n
	ex.obs.Restarted(n)
	scope := "job"
	if region >= 0 {
		scope = fmt.Sprintf("region of subtask %d", region)
	}
	ex.log.Warn("splitflow: restarting after failure", "scope", scope, "restart", n, "strategy", ex.strategy.String(), "delay", delay, "err", err)
	if f := ex.cfg.cp.listener.Restarting; f != nil {
		f(n, err)
	}
	if ex.cc != nil {
		ex.perform(ex.cc.Restore(ex.cc.LastCompletedID()))
	}
	ex.finalID = 0 // the restarted tasks end with a final checkpoint of their own
	ex.restarting, ex.restartRegion, ex.restartDelay = true, region, delay
	ex.cancelTasks(region)
	if region < 0 {
		ex.stopCoordinators()
	} else {
		for _, c := range ex.coords {
			c.SubtaskFailed(region)
		}
	}
	if ex.waitingExit == 0 {
		ex.armRestart()
	}
}

// gotGoing reports whether the job has made progress since Execute began:
// a checkpoint completed, a source emitted a record, or the attempt that
// failed ran healthy for the startup failure timeout d (the failed task's
// attempt, the global one for a failure of no task). A job that cannot
// reach its external systems fails fast and again on each attempt; one
// that ran d without failing reached them, and may just have nothing to
// read (an empty topic) and no checkpoint due yet. Asked at each failure,
// while the failed attempt's tasks are still current (their counters lag
// by at most the publishing interval, the failed task's not at all), and
// remembered.
func (ex *execution) gotGoing(failed *task, d time.Duration) bool {
	since := ex.attemptStarted
	if failed != nil {
		since = failed.startedAt
	}
	if ex.progressed || ex.completedID > 0 || time.Since(since) >= d {
		ex.progressed = true
		return true
	}
	for _, t := range ex.tasks {
		if s := t.meter.stats; t.isSource && s != nil && s.RecordsIn() > 0 {
			ex.progressed = true
			return true
		}
	}
	return false
}

// endCommits are the sinks that committed at the end of input in a job
// without checkpoints, by region (the task's, -1 in a job that restarts
// only globally). No checkpoint holds what they committed, so restarting
// one of them would commit its records again (the commit rule).
type endCommits struct {
	mu    sync.Mutex
	sinks map[int]string
}

// in returns a sink that committed in region (-1: anywhere), or "".
func (c *endCommits) in(region int) string {
	if region >= 0 {
		return c.sinks[region]
	}
	for _, s := range c.sinks {
		return s
	}
	return ""
}

// endOfInputCommit is called by a two-phase sink of t, in a job without
// checkpoints, before it commits at the end of input. It fails with
// errTaskCancelled when t was cancelled by a restart, so that the restart
// and the commit exclude each other: either the commit happens and no
// restart of t follows, or the restart happens and t does not commit.
func (ex *execution) endOfInputCommit(t *task, sink string) error {
	if ex == nil {
		return nil // a task driven by hand in a test
	}
	ex.endCommits.mu.Lock()
	defer ex.endCommits.mu.Unlock()
	if t.ctx != nil && t.ctx.Err() != nil {
		return errTaskCancelled
	}
	if ex.endCommits.sinks == nil {
		ex.endCommits.sinks = map[int]string{}
	}
	region := t.region
	if !ex.pointwise {
		region = -1
	}
	if _, ok := ex.endCommits.sinks[region]; !ok {
		ex.endCommits.sinks[region] = sink
	}
	return nil
}

// cancelTasks stops the current tasks of region (every one for -1) and
// forgets them; their exits are awaited before the restart.
func (ex *execution) cancelTasks(region int) {
	keep := ex.tasks[:0:0]
	for _, t := range ex.tasks {
		if region >= 0 && t.region != region {
			keep = append(keep, t)
			continue
		}
		delete(ex.ended, t)
		if !t.exited {
			ex.waitingExit++
			t.stopCtx()
			t.cancel()
			ex.cancelled(t)
		}
	}
	ex.tasks = keep
}

func (ex *execution) armRestart() {
	if ex.restartTimer != nil {
		ex.restartTimer.Stop()
	}
	ex.restartTimer = time.NewTimer(ex.restartDelay)
	ex.restartC = ex.restartTimer.C
}

func (ex *execution) restart() {
	if !ex.restarting || ex.stopped {
		return
	}
	if ex.slot != nil {
		// The process may have been paused while another took the slot
		// over: restarting would redo work whose output is never
		// committed, its transactions pinning read_committed readers
		// until its writers abort them.
		if err := ex.slot.Owned(); err != nil {
			ex.restarting = false
			ex.stop(&unrecoverableError{Err: err})
			return
		}
	}
	rs, err := ex.latest()
	if err != nil {
		ex.restarting = false
		ex.stop(err)
		return
	}
	ex.attempt++
	ex.restarting = false
	ex.obs.SetState(status.StateRunning)
	var tasks []*task
	if ex.restartRegion < 0 {
		ex.startAttempt(rs)
		tasks = ex.tasks
	} else {
		tasks = ex.buildTasks(ex.restartRegion, rs)
		for _, c := range ex.coords {
			c.SubtaskReset(ex.restartRegion, rs.ID())
		}
		ex.tasks = append(ex.tasks, tasks...)
		for _, t := range tasks {
			ex.start(t)
		}
	}
	if ex.draining {
		// Cancelled during the restart (drainRestart): the sources stop
		// at once; the sinks commit what they restored, then end.
		for _, t := range tasks {
			if t.isSource {
				t.requestStop()
			}
		}
	} else if ex.savepointDrain && ex.restartRegion >= 0 {
		ex.drainTasksForSavepoint(tasks) // startAttempt did for a global one
	}
}

// stop ends the job for good with err (nil: cancelled): every task and
// coordinator is stopped hard.
func (ex *execution) stop(err error) {
	if !ex.stopped {
		ex.stopped = true
		ex.err = err
	}
	ex.restarting = false
	ex.stopHard()
	for _, t := range ex.tasks {
		if !t.exited {
			t.cancel()
			ex.cancelled(t)
		}
	}
}

// Events from tasks, called on their goroutines.

func (ex *execution) ack(t *task, id int64, blobs []ownedState, align, sync time.Duration) {
	if ex == nil {
		return // a task driven by hand in a test
	}
	ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "ack", Run: func() error {
		ex.onAck(t, id, blobs, align, sync)
		return nil
	}})
}

func (ex *execution) decline(t *task, id int64, reason error) {
	if ex == nil {
		return
	}
	ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "decline", Run: func() error {
		if ex.cc != nil && ex.current(t) {
			ex.perform(ex.cc.Decline(id, t.id, reason))
		}
		return nil
	}})
}

func (ex *execution) taskEnded(t *task) {
	ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "task ended", Run: func() error {
		ex.onEnded(t)
		return nil
	}})
}

func (ex *execution) onAck(t *task, id int64, blobs []ownedState, align, sync time.Duration) {
	if ex.cc == nil || !ex.current(t) {
		return
	}
	w := ex.writers[id]
	if w == nil {
		return // aborted meanwhile
	}
	// The files are written off this goroutine; the acknowledgement counts
	// once they are durable, unless the checkpoint or the task is gone by
	// then.
	ex.writeStates(w, blobs, func(hs []checkpoint.StateHandle, size int64, err error) {
		if ex.writers[id] != w || !ex.current(t) {
			return
		}
		if err != nil {
			ex.perform(ex.cc.Decline(id, t.id, err))
			return
		}
		var full int64
		var files []checkpoint.FileHandle
		for _, b := range blobs {
			size += b.newBytes
			full += int64(len(b.data))
			files = append(files, b.files...)
		}
		ex.obs.CheckpointProgress(ex.slotIndex(), id, observe.CheckpointSizes{Written: size, Full: full, Files: files, Align: align, Sync: sync})
		ex.perform(ex.cc.Ack(id, t.id, hs))
	})
}

// onEnded: a task whose input ended gets the barriers it can no longer
// receive through its channels; once every task has ended, the final
// checkpoint commits what the sinks prepared last.
func (ex *execution) onEnded(t *task) {
	if !ex.current(t) {
		return
	}
	ex.ended[t] = true
	for _, b := range ex.injected {
		ex.trigger(t, b)
	}
	if len(ex.ended) == len(ex.tasks) && !ex.restarting && !ex.stopped {
		ex.perform(ex.cc.TriggerFinal(time.Now()))
	}
}

func (ex *execution) trigger(t *task, b engine.CheckpointBarrier) {
	t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "trigger checkpoint", Run: func() error { return t.triggerCheckpoint(b) }})
}

// perform carries out the checkpoint coordinator's actions in order.
func (ex *execution) perform(acts []coordinator.Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case coordinator.SnapshotCoordinators:
			ex.obs.CheckpointTriggered(ex.slotIndex(), a.ID, a.Timestamp)
			ex.snapshotCoordinators(a.ID)
		case coordinator.InjectBarriers:
			b := engine.CheckpointBarrier{CheckpointID: a.ID, Timestamp: a.Timestamp.UnixMilli()}
			ex.injected[a.ID] = b
			if h := ex.env.hooks; h != nil && h.barrierInjected != nil {
				h.barrierInjected(a.ID)
			}
			for _, t := range ex.tasks {
				if t.isSource || ex.ended[t] {
					ex.trigger(t, b)
				}
			}
		case coordinator.PersistMetadata:
			w := ex.writers[a.ID]
			delete(ex.writers, a.ID)
			err := errors.New("no writer")
			if w != nil {
				err = w.Commit(checkpoint.Metadata{ID: a.ID, Timestamp: a.Timestamp, Fingerprint: ex.g.fingerprint(), States: a.States})
			}
			if err == nil && ex.slot != nil {
				// Not complete until the slot's log says so: a process
				// that lost the slot must not commit.
				if err := ex.slot.Record(a.ID); err != nil {
					ex.stop(&unrecoverableError{Err: err})
					return
				}
			}
			if err == nil {
				ex.savepointPersisted(a.ID, a.Final, a.Timestamp)
			}
			ex.perform(ex.cc.Persisted(a.ID, err))
		case coordinator.NotifyComplete:
			delete(ex.injected, a.ID)
			st := ex.obs.CheckpointCompleted(ex.slotIndex(), a.ID)
			ex.log.Info("splitflow: checkpoint completed", "id", a.ID, "duration", time.Duration(st.DurationMillis)*time.Millisecond,
				"sync", time.Duration(st.SyncMicros)*time.Microsecond, "size", st.SizeBytes, "full", st.FullSizeBytes)
			if f := ex.cfg.cp.listener.CheckpointCompleted; f != nil {
				f(a.ID)
			}
			if h := ex.env.hooks; h != nil && h.checkpointCompleted != nil {
				h.checkpointCompleted(a.ID, ex.storage)
			}
			ex.notifyComplete(a.ID, a.Final)
		case coordinator.NotifyAborted:
			if w := ex.writers[a.ID]; w != nil {
				_ = w.Abort()
				delete(ex.writers, a.ID)
			}
			delete(ex.injected, a.ID)
			ex.savepointAborted(a.ID, a.Err)
			ex.obs.CheckpointFailed(ex.slotIndex(), a.ID, statusText(a.Err))
			for _, c := range ex.coords {
				c.NotifyCheckpointAborted(a.ID)
			}
			for _, t := range ex.tasks {
				id := a.ID
				t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "checkpoint aborted", Run: func() error {
					t.abortCheckpoint(id)
					return nil
				}})
			}
			if !errors.Is(a.Err, checkpoint.ErrRestarted) && !errors.Is(a.Err, checkpoint.ErrSubsumed) {
				ex.log.Warn("splitflow: checkpoint aborted", "id", a.ID, "err", a.Err)
			}
		case coordinator.FailJob:
			ex.failure(nil, a.Err)
		}
	}
}

// snapshotCoordinators starts checkpoint id: every operator coordinator
// snapshots (and closes its gates, waiting for the events sent before) on
// a goroutine of its own, so that the master keeps serving acks and exits
// meanwhile; the result comes back as a mail.
func (ex *execution) snapshotCoordinators(id int64) {
	bw, err := ex.storage.Begin(id)
	if err != nil {
		ex.perform(ex.cc.CoordinatorsSnapshotted(id, nil, err))
		return
	}
	w := jobstorage.NewPendingWriter(bw)
	ex.writers[id] = w
	coords, uids, ctx := ex.coords, ex.coordUIDs, ex.coordCtx
	done := func(hs []checkpoint.StateHandle, size int64, err error) {
		if ex.writers[id] != w {
			return // aborted meanwhile
		}
		if err == nil {
			ex.obs.CheckpointProgress(ex.slotIndex(), id, observe.CheckpointSizes{Written: size, Full: size})
		}
		ex.perform(ex.cc.CoordinatorsSnapshotted(id, hs, err))
	}
	if len(coords) == 0 {
		done(nil, 0, nil)
		return
	}
	// Snapshots and their state files are both taken off this goroutine;
	// the result comes back as a mail.
	ex.snapWG.Go(func() {
		var hs []checkpoint.StateHandle
		var size int64
		var err error
		for i, c := range coords {
			var d []byte
			if d, err = c.Checkpoint(ctx, id); err != nil {
				break
			}
			var h checkpoint.StateHandle
			if h, err = w.WriteState(checkpoint.CoordinatorOwner(uids[i]), d); err != nil {
				break
			}
			hs = append(hs, h)
			size += int64(len(d))
		}
		ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "coordinators snapshotted", Run: func() error {
			done(hs, size, err)
			return nil
		}})
	})
}

// closePebble drops the pebble backend's cache and working directory once
// the tasks are gone.
func (ex *execution) closePebble() {
	ex.pebbleMu.Lock()
	defer ex.pebbleMu.Unlock()
	if ex.pebble != nil {
		ex.obs.SetStateStats(nil)
		if n := ex.pebble.Open(); n > 0 {
			// A task the watchdog abandoned still has its DB open: its
			// directory is left to the next job on the state directory.
			ex.log.Warn("pebble state: DBs still open at the end of the job; their directory is left for the next job to remove", "dir", ex.pebble.Dir(), "open", n)
			ex.pebble = nil
			return
		}
		if err := ex.pebble.Close(); err != nil {
			ex.log.Warn("pebble state: remove the working directory", "dir", ex.pebble.Dir(), "err", err)
		}
		ex.pebble = nil
	}
}
