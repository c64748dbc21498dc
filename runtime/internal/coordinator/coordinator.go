package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Action is something the Coordinator asks its driver to do. The driver
// performs the actions of one step in order before it feeds the next event.
type Action interface{ isAction() }

// SnapshotCoordinators asks the driver to snapshot every operator
// coordinator for checkpoint ID, write each snapshot with the checkpoint's
// Writer, and report with CoordinatorsSnapshotted. No barrier of ID has been
// asked for yet (coordinators before barriers).
type SnapshotCoordinators struct {
	ID        int64
	Timestamp time.Time
	Final     bool
}

// InjectBarriers asks the driver to send barrier ID into every running
// source task. Every operator coordinator has snapshotted ID by now.
type InjectBarriers struct {
	ID        int64
	Timestamp time.Time
	Final     bool
}

// PersistMetadata asks the driver to commit checkpoint ID's metadata
// (Writer.Commit with States and the job fingerprint) and report the result
// with Persisted. Every expected task has acknowledged. Nothing is told to
// commit until Persisted(ID, nil) (atomic checkpoints).
type PersistMetadata struct {
	ID        int64
	Timestamp time.Time
	Final     bool
	// States are the coordinators' and tasks' state handles, sorted by
	// owner.
	States []checkpoint.StateHandle
}

// NotifyComplete tells every task and operator coordinator that checkpoint
// ID is durable: sinks commit the transactions of every checkpoint up to
// ID. Final marks the final checkpoint of a bounded job: after it has been
// delivered the engine may end the job.
type NotifyComplete struct {
	ID    int64
	Final bool
}

// NotifyAborted tells tasks and coordinators that checkpoint ID will never
// complete, and the driver to Abort its Writer. Err is an *AbortError.
// Aborting loses no data: what a sink prepared for ID is committed with
// the next completed checkpoint. A Final checkpoint that aborts is retried
// at the next Tick.
type NotifyAborted struct {
	ID    int64
	Final bool
	Err   error
}

// FailJob asks the driver to fail the job (and restart it per the restart
// strategy): too many checkpoints failed in a row. Err matches
// ErrTooManyFailures. The Coordinator ignores events until Restore.
type FailJob struct {
	Err error
}

func (SnapshotCoordinators) isAction() {}
func (InjectBarriers) isAction()       {}
func (PersistMetadata) isAction()      {}
func (NotifyComplete) isAction()       {}
func (NotifyAborted) isAction()        {}
func (FailJob) isAction()              {}

// phase is where a pending checkpoint stands. It only moves forward.
type phase int

const (
	// snapshotting: SnapshotCoordinators emitted, waiting for
	// CoordinatorsSnapshotted.
	snapshotting phase = iota
	// acking: InjectBarriers emitted, waiting for acknowledgements.
	acking
	// acked: every expected task acknowledged; waiting for its turn to
	// persist (one persist at a time, oldest first).
	acked
	// persisting: PersistMetadata emitted, waiting for Persisted.
	persisting
)

type pendingCheckpoint struct {
	id        int64
	triggered time.Time
	final     bool
	phase     phase
	// awaiting are the tasks whose acknowledgement is still missing.
	awaiting map[checkpoint.TaskID]bool
	states   []checkpoint.StateHandle
}

// Coordinator is the checkpoint coordinator's deterministic core (Flink's
// CheckpointCoordinator with its PendingCheckpoint and
// CheckpointFailureManager, without threads or timers). It reads no
// clock, starts no goroutine and does no I/O: the driver feeds it events,
// with the time where time matters, and performs the actions each event
// returns, in order. One goroutine owns it; it is not safe for concurrent
// use.
//
// Events that do not fit the state (an acknowledgement for an unknown,
// aborted or completed checkpoint, a second acknowledgement, a Persisted
// nobody asked for) are ignored and return no actions: they are the
// normal debris of timeouts and restarts, not errors.
type Coordinator struct {
	cfg coordinatorConfig

	tasks    []checkpoint.TaskID
	known    map[checkpoint.TaskID]bool
	finished map[checkpoint.TaskID]bool

	nextID        int64
	lastCompleted int64
	// pending is ordered by id.
	pending   []*pendingCheckpoint
	persistID int64 // the checkpoint in phase persisting, or 0

	scheduled   bool // nextTrigger is set
	nextTrigger time.Time
	// A checkpoint that ends inside an event without a time (Ack,
	// Persisted, ...) gets the time of the next Tick as its end: the pause
	// after it can only come out longer than configured, never shorter.
	endUntimed bool
	ended      bool
	lastEnd    time.Time

	failures int
	failed   bool

	finalRequested bool
	finalDone      bool
}

// NewCoordinator returns a coordinator for a job made of tasks, every one of
// which must acknowledge each checkpoint until it finishes. The first
// checkpoint is triggered one interval after the first Tick.
func NewCoordinator(tasks []checkpoint.TaskID, opts ...CoordinatorOption) (*Coordinator, error) {
	cfg := defaultCoordinatorConfig()
	for _, o := range opts {
		o.applyCoordinator(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, errors.New("checkpoint coordinator: no tasks; a job has at least one")
	}
	known := make(map[checkpoint.TaskID]bool, len(tasks))
	for _, t := range tasks {
		if t.UID == "" || t.Subtask < 0 {
			return nil, fmt.Errorf("checkpoint coordinator: invalid %s: need a UID and a subtask >= 0", t)
		}
		if known[t] {
			return nil, fmt.Errorf("checkpoint coordinator: %s listed twice", t)
		}
		known[t] = true
	}
	return &Coordinator{
		cfg:      cfg,
		tasks:    slices.Clone(tasks),
		known:    known,
		finished: map[checkpoint.TaskID]bool{},
		nextID:   1,
	}, nil
}

// LastCompletedID is the newest completed checkpoint (or the one given to
// Restore), 0 if none.
func (c *Coordinator) LastCompletedID() int64 { return c.lastCompleted }

// NextTrigger returns when the next periodic checkpoint is due, false
// before the first Tick (which schedules it) or once no periodic one will
// come. A checkpoint due is triggered by the first Tick at or after that
// time, if the pause and the number pending allow.
func (c *Coordinator) NextTrigger() (time.Time, bool) {
	if !c.scheduled || c.failed || c.finalDone || c.finalRequested {
		return time.Time{}, false
	}
	return c.nextTrigger, true
}

// PendingIDs lists the checkpoints triggered and not yet completed or
// aborted, oldest first.
func (c *Coordinator) PendingIDs() []int64 {
	ids := make([]int64, len(c.pending))
	for i, p := range c.pending {
		ids[i] = p.id
	}
	return ids
}

// Tick advances time: it aborts checkpoints that timed out and triggers the
// next one when the interval has passed, the pause after the previous one
// is over and fewer than the maximum are pending (and no periodic one once
// every task has finished). A checkpoint whose
// metadata is being persisted does not time out: only Persisted can tell
// whether it became durable.
func (c *Coordinator) Tick(now time.Time) []Action {
	if c.failed || c.finalDone {
		return nil
	}
	var acts []Action
	for _, p := range slices.Clone(c.pending) {
		if p.phase != persisting && !now.Before(p.triggered.Add(c.cfg.timeout)) {
			acts = c.abort(acts, p, &checkpoint.AbortError{ID: p.id, Reason: checkpoint.ErrTimeout, Err: fmt.Errorf("not complete %v after its trigger", c.cfg.timeout)})
			if c.failed {
				return acts
			}
		}
	}
	c.stampEnd(now)
	if !c.scheduled {
		c.scheduled = true
		c.nextTrigger = now.Add(c.cfg.interval)
	}
	if c.finalRequested {
		if !c.finalPending() {
			acts = c.trigger(acts, now, true)
		}
		return acts
	}
	if c.running() == 0 || len(c.pending) >= c.cfg.maxConcurrent || now.Before(c.nextTrigger) {
		return acts
	}
	if c.ended && now.Before(c.lastEnd.Add(c.cfg.minPause)) {
		return acts
	}
	return c.triggerScheduling(acts, now, false, true)
}

// TriggerFinal triggers the final checkpoint of a bounded job now, whatever
// the interval, the pause and the number pending: its completion
// (NotifyComplete with Final) is what lets the last sink transactions
// commit before the job ends. No periodic checkpoint is triggered after it;
// if it aborts, the next Tick triggers another final one. A second call
// while one is pending does nothing.
func (c *Coordinator) TriggerFinal(now time.Time) []Action {
	if c.failed || c.finalDone || (c.finalRequested && c.finalPending()) {
		return nil
	}
	c.finalRequested = true
	c.stampEnd(now)
	return c.trigger(nil, now, true)
}

// TriggerNow triggers a checkpoint at once, whatever the interval and the
// pause, for a savepoint the user asked for. It returns the checkpoint's
// id and its actions, or 0 and nil when none can start now: one is
// pending (at most the configured number run at a time), the job failed,
// every task has finished, or a final checkpoint was requested (it is the
// job's last). The caller asks again later; the periodic schedule goes on
// from this trigger.
func (c *Coordinator) TriggerNow(now time.Time) (int64, []Action) {
	if c.failed || c.finalDone || c.finalRequested || c.running() == 0 || len(c.pending) >= c.cfg.maxConcurrent {
		return 0, nil
	}
	c.stampEnd(now)
	c.scheduled = true
	id := c.nextID
	return id, c.trigger(nil, now, false)
}

// CoordinatorsSnapshotted reports that every operator coordinator
// snapshotted checkpoint id (states are their handles), or that one failed
// (err != nil, which aborts the checkpoint). On success barriers are
// injected next.
func (c *Coordinator) CoordinatorsSnapshotted(id int64, states []checkpoint.StateHandle, err error) []Action {
	p := c.find(id)
	if c.failed || p == nil || p.phase != snapshotting {
		return nil
	}
	if err != nil {
		return c.abort(nil, p, &checkpoint.AbortError{ID: id, Reason: checkpoint.ErrCoordinatorSnapshotFailed, Err: err})
	}
	p.states = append(p.states, states...)
	p.phase = acking
	acts := []Action{InjectBarriers{ID: id, Timestamp: p.triggered, Final: p.final}}
	return c.checkAcked(acts, p)
}

// Ack records that task snapshotted checkpoint id; states are the handles
// it wrote. When the last expected task acknowledges, the metadata is to be
// persisted.
func (c *Coordinator) Ack(id int64, task checkpoint.TaskID, states []checkpoint.StateHandle) []Action {
	p := c.find(id)
	if c.failed || p == nil || p.phase != acking || !p.awaiting[task] {
		return nil
	}
	delete(p.awaiting, task)
	p.states = append(p.states, states...)
	return c.checkAcked(nil, p)
}

// Decline aborts checkpoint id because task could not take part in it
// (Flink's DeclineCheckpoint); it counts as a checkpoint failure.
func (c *Coordinator) Decline(id int64, task checkpoint.TaskID, reason error) []Action {
	p := c.find(id)
	if c.failed || p == nil || p.phase > acking || !p.awaiting[task] {
		return nil
	}
	return c.abort(nil, p, &checkpoint.AbortError{ID: id, Reason: checkpoint.ErrDeclined, Task: task, Err: reason})
}

// Persisted reports the outcome of PersistMetadata for id. Only on success
// does the checkpoint complete and NotifyComplete go out; older pending
// checkpoints are then aborted as subsumed. On failure the checkpoint is
// aborted and counts as a failure.
func (c *Coordinator) Persisted(id int64, err error) []Action {
	p := c.find(id)
	if c.failed || p == nil || p.phase != persisting {
		return nil
	}
	c.persistID = 0
	var acts []Action
	if err != nil {
		acts = c.abort(acts, p, &checkpoint.AbortError{ID: id, Reason: checkpoint.ErrPersistFailed, Err: err})
		if c.failed {
			return acts
		}
		return c.persistNext(acts)
	}
	// Older checkpoints can no longer be of use: everything they would
	// restore, id restores more recently.
	for _, old := range slices.Clone(c.pending) {
		if old.id < id {
			acts = c.abort(acts, old, &checkpoint.AbortError{ID: old.id, Reason: checkpoint.ErrSubsumed})
		}
	}
	c.remove(p)
	c.lastCompleted = id
	c.failures = 0
	c.endUntimed = true
	acts = append(acts, NotifyComplete{ID: id, Final: p.final})
	if p.final {
		c.finalDone = true
		return acts
	}
	return c.persistNext(acts)
}

// TaskFinished removes a task that reached the end of its input (a bounded
// source and what it alone fed) from the tasks every checkpoint waits for,
// including the pending ones.
func (c *Coordinator) TaskFinished(task checkpoint.TaskID) []Action {
	if c.failed || !c.known[task] || c.finished[task] {
		return nil
	}
	c.finished[task] = true
	var acts []Action
	for _, p := range slices.Clone(c.pending) {
		if p.awaiting[task] {
			delete(p.awaiting, task)
			acts = c.checkAcked(acts, p)
		}
	}
	return acts
}

// Restore resets the coordinator for a job restarted from checkpoint
// lastCompletedID (0 when starting without one): pending checkpoints are
// aborted (not counted as failures), the failure count, finished tasks and
// a requested final checkpoint are forgotten, and the next trigger comes
// one interval after the next Tick. Ids keep increasing: the next one
// exceeds both lastCompletedID and every id triggered before. Pass the
// highest id Storage.List returns, which may be newer than the checkpoint
// actually restored when a newer one was invalid.
func (c *Coordinator) Restore(lastCompletedID int64) []Action {
	var acts []Action
	for _, p := range slices.Clone(c.pending) {
		acts = c.abort(acts, p, &checkpoint.AbortError{ID: p.id, Reason: checkpoint.ErrRestarted})
	}
	c.pending = nil
	c.persistID = 0
	c.lastCompleted = lastCompletedID
	c.nextID = max(c.nextID, lastCompletedID+1)
	c.finished = map[checkpoint.TaskID]bool{}
	c.scheduled, c.ended, c.endUntimed = false, false, false
	c.failures, c.failed = 0, false
	c.finalRequested, c.finalDone = false, false
	return acts
}

func (c *Coordinator) trigger(acts []Action, now time.Time, final bool) []Action {
	return c.triggerScheduling(acts, now, final, false)
}

// triggerScheduling starts checkpoint nextID at now. onGrid says it is the
// periodic one: the next is due at the grid's next point after now (the
// grid of one interval from the first Tick), so a trigger that came late,
// at the Tick after its due time or held back by one pending, does not
// move the ones after it. Otherwise (a savepoint, a final checkpoint) the
// grid starts again one interval after now.
func (c *Coordinator) triggerScheduling(acts []Action, now time.Time, final, onGrid bool) []Action {
	p := &pendingCheckpoint{id: c.nextID, triggered: now, final: final, awaiting: map[checkpoint.TaskID]bool{}}
	c.nextID++
	for _, t := range c.tasks {
		if !c.finished[t] {
			p.awaiting[t] = true
		}
	}
	c.pending = append(c.pending, p)
	if onGrid && !c.nextTrigger.After(now) {
		missed := now.Sub(c.nextTrigger) / c.cfg.interval
		c.nextTrigger = c.nextTrigger.Add((missed + 1) * c.cfg.interval)
	} else {
		c.nextTrigger = now.Add(c.cfg.interval)
	}
	return append(acts, SnapshotCoordinators{ID: p.id, Timestamp: now, Final: final})
}

// checkAcked moves p on once nobody is left to acknowledge.
func (c *Coordinator) checkAcked(acts []Action, p *pendingCheckpoint) []Action {
	if p.phase != acking || len(p.awaiting) > 0 {
		return acts
	}
	p.phase = acked
	return c.persistNext(acts)
}

// persistNext starts persisting the oldest fully acknowledged checkpoint,
// one at a time: completions then happen in id order, so a newer
// checkpoint never completes while an older one's metadata is being
// written.
func (c *Coordinator) persistNext(acts []Action) []Action {
	if c.persistID != 0 {
		return acts
	}
	for _, p := range c.pending {
		if p.phase == acked {
			p.phase = persisting
			c.persistID = p.id
			states := slices.Clone(p.states)
			slices.SortStableFunc(states, func(a, b checkpoint.StateHandle) int { return a.Owner.Compare(b.Owner) })
			return append(acts, PersistMetadata{ID: p.id, Timestamp: p.triggered, Final: p.final, States: states})
		}
	}
	return acts
}

// abort ends p with NotifyAborted and counts the failure; past the
// tolerable count it fails the job, aborting everything else pending.
func (c *Coordinator) abort(acts []Action, p *pendingCheckpoint, why *checkpoint.AbortError) []Action {
	c.remove(p)
	c.endUntimed = true
	acts = append(acts, NotifyAborted{ID: p.id, Final: p.final, Err: why})
	if !countsAsFailure(why) {
		return acts
	}
	c.failures++
	if c.failures <= c.cfg.tolerable {
		return acts
	}
	c.failed = true
	for _, other := range slices.Clone(c.pending) {
		c.remove(other)
		acts = append(acts, NotifyAborted{ID: other.id, Final: other.final, Err: &checkpoint.AbortError{ID: other.id, Reason: checkpoint.ErrJobFailing}})
	}
	return append(acts, FailJob{Err: &checkpoint.TooManyFailuresError{Consecutive: c.failures, Tolerable: c.cfg.tolerable, Last: why}})
}

func (c *Coordinator) remove(p *pendingCheckpoint) {
	c.pending = slices.DeleteFunc(c.pending, func(q *pendingCheckpoint) bool { return q == p })
	if c.persistID == p.id {
		c.persistID = 0
	}
}

func (c *Coordinator) find(id int64) *pendingCheckpoint {
	for _, p := range c.pending {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (c *Coordinator) finalPending() bool {
	return slices.ContainsFunc(c.pending, func(p *pendingCheckpoint) bool { return p.final })
}

func (c *Coordinator) running() int { return len(c.tasks) - len(c.finished) }

// stampEnd gives checkpoints that ended since the last timed event their
// end time.
func (c *Coordinator) stampEnd(now time.Time) {
	if c.endUntimed {
		c.endUntimed = false
		c.ended = true
		c.lastEnd = now
	}
}

// CoordinatorOption configures NewCoordinator.
type CoordinatorOption interface{ applyCoordinator(*coordinatorConfig) }

type coordinatorOptionFunc func(*coordinatorConfig)

func (f coordinatorOptionFunc) applyCoordinator(c *coordinatorConfig) { f(c) }

type coordinatorConfig struct {
	interval      time.Duration
	timeout       time.Duration
	minPause      time.Duration
	maxConcurrent int
	tolerable     int
}

func defaultCoordinatorConfig() coordinatorConfig {
	return coordinatorConfig{
		interval:      10 * time.Second,
		timeout:       2 * time.Minute,
		minPause:      0,
		maxConcurrent: 1,
		tolerable:     0,
	}
}

// validate is the one place options are checked.
func (c *coordinatorConfig) validate() error {
	switch {
	case c.interval <= 0:
		return fmt.Errorf("checkpoint coordinator: interval %v must be positive", c.interval)
	case c.timeout <= 0:
		return fmt.Errorf("checkpoint coordinator: timeout %v must be positive", c.timeout)
	case c.minPause < 0:
		return fmt.Errorf("checkpoint coordinator: min pause %v must not be negative", c.minPause)
	case c.maxConcurrent < 1:
		return fmt.Errorf("checkpoint coordinator: max concurrent checkpoints %d must be at least 1", c.maxConcurrent)
	case c.minPause > 0 && c.maxConcurrent > 1:
		// A pause between checkpoints and overlapping checkpoints
		// contradict each other; Flink silently drops to one, we say so.
		return fmt.Errorf("checkpoint coordinator: min pause %v needs max concurrent checkpoints 1, not %d", c.minPause, c.maxConcurrent)
	case c.tolerable < 0:
		return fmt.Errorf("checkpoint coordinator: tolerable failures %d must not be negative", c.tolerable)
	}
	return nil
}

// WithInterval sets how often a checkpoint is triggered (default 10s;
// Flink's execution.checkpointing.interval). Sinks commit once per
// checkpoint, so it bounds how late exactly-once output becomes visible.
func WithInterval(d time.Duration) CoordinatorOption {
	return coordinatorOptionFunc(func(c *coordinatorConfig) { c.interval = d })
}

// WithTimeout aborts a checkpoint not acknowledged by every task this long
// after its trigger (default 2m; Flink's execution.checkpointing.timeout,
// whose 10m default is shortened here so that interval + timeout + restart
// fits well under Kafka's maximum transaction timeout of 15 minutes).
func WithTimeout(d time.Duration) CoordinatorOption {
	return coordinatorOptionFunc(func(c *coordinatorConfig) { c.timeout = d })
}

// WithMinPause leaves at least d between the end of one checkpoint
// (completed or aborted) and the trigger of the next (default 0; Flink's
// execution.checkpointing.min-pause), so that a slow checkpoint cannot
// leave the job doing nothing but checkpoints. It requires max concurrent
// checkpoints 1.
func WithMinPause(d time.Duration) CoordinatorOption {
	return coordinatorOptionFunc(func(c *coordinatorConfig) { c.minPause = d })
}

// WithMaxConcurrent allows n checkpoints pending at once (default 1;
// Flink's execution.checkpointing.max-concurrent-checkpoints). The final
// checkpoint of a bounded job is triggered regardless.
func WithMaxConcurrent(n int) CoordinatorOption {
	return coordinatorOptionFunc(func(c *coordinatorConfig) { c.maxConcurrent = n })
}

// WithTolerableFailures lets n checkpoints in a row fail (decline, timeout,
// coordinator snapshot or persist failure) before the job is failed; the
// next failure fails it, a completion resets the count (default 0: the
// first failure fails the job; Flink's
// execution.checkpointing.tolerable-failed-checkpoints).
func WithTolerableFailures(n int) CoordinatorOption {
	return coordinatorOptionFunc(func(c *coordinatorConfig) { c.tolerable = n })
}

// countsAsFailure tells the tolerable-failure count which aborts are the
// checkpoint's own fault. Subsumption and restarts are not: counting them
// would fail a healthy job for being restarted (Flink's
// CheckpointFailureManager ignores the same kinds of reasons).
func countsAsFailure(e *checkpoint.AbortError) bool {
	return !errors.Is(e.Reason, checkpoint.ErrSubsumed) && !errors.Is(e.Reason, checkpoint.ErrRestarted) && !errors.Is(e.Reason, checkpoint.ErrJobFailing)
}
