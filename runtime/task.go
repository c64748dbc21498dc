package runtime

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/slotrun"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// errTaskCancelled is how a task ends when the job is stopped hard; the
// job reports the error that caused the stop, never this one. It is
// engine's, which operators outside runtime return too.
var errTaskCancelled = engine.ErrTaskCancelled

// task runs one subtask of a chain on one goroutine: Flink's StreamTask with
// its MailboxProcessor. The loop alternates between the mailbox and the
// default action, and suspends the default action whenever the output is
// backpressured or no input is available, waiting then on the mailbox or on
// the availability it lacks. A mail therefore never waits behind a full
// output or an empty input.
//
// Everything in a task is owned by its goroutine: the operators, their
// state, the record writers, the source reader (the task-goroutine rule).
// Other goroutines reach it only through mb.
type task struct {
	name        string // the chain, "Source: a -> Map b -> Sink c"
	head        *engine.OpInfo
	subtask     int
	parallelism int
	cfg         *config

	mb      *engine.Mailbox
	ops     []engine.Lifecycle // head first
	input   engine.Input
	outputs []engine.NetworkOutput
	timers  []*time.Timer

	ended bool // input ended and end of partition emitted; draining outputs

	// suspended holds work an operator stopped because the output became
	// unavailable (timers fired by a watermark); it is resumed, in order,
	// before any further input is processed. endPending: the input ended
	// meanwhile, and the chain ends once that work is done.
	suspended  []resumable
	endPending bool

	flushTimer *time.Timer

	// Checkpointing; see checkpoint.go.
	ex       *execution
	id       checkpoint.TaskID
	region   int // the subtask index in a job of independent pipelines
	isSource bool
	// shuffleChannel: the task's source reads this shuffle channel.
	shuffleChannel string
	restored       *engine.RestoredState
	attempt        int
	gate           channelBlocker // nil for source tasks
	// awaitFinish keeps a task whose input ended alive, serving mails,
	// until the final checkpoint has completed (checkpoints on).
	awaitFinish     bool
	finishRequested bool
	// sinkNotified is the newest checkpoint the chain's sinks heard of,
	// sinkReported the newest reported to the master as committed (task
	// goroutine); committedID is that report and releasedID the newest
	// checkpoint the other operators were told of (master goroutine). See
	// notify.go.
	sinkNotified, sinkReported int64
	committedID, releasedID    int64
	// lastBarrier is the newest checkpoint this task snapshotted or saw
	// aborted; older barriers are dropped.
	lastBarrier int64
	// aligning is the checkpoint whose barrier arrived on some channels;
	// those channels are blocked until it arrived on all open ones.
	aligning     int64
	alignBarrier engine.CheckpointBarrier
	arrived      map[int]bool
	alignStart   time.Time
	// encoding is the checkpoint whose encoders run, if any (barrier.go).
	encoding *asyncSnapshot

	// ctx is the context run was given; stopCtx cancels it (failover).
	ctx     context.Context
	stopCtx context.CancelFunc
	exited  bool
	// cancelledAt is when the master cancelled the task, abandoned that
	// the watchdog gave up waiting for its exit (master goroutine);
	// goroutine is the id of the task's goroutine, for its stack
	// (watchdog.go).
	cancelledAt time.Time
	abandoned   bool
	goroutine   atomic.Int64
	// startedAt is when the master started the task: its attempt's start,
	// for the startup failure timeout (master goroutine).
	startedAt time.Time

	// activity is the time the task could make progress; sources measure
	// idleness on it.
	activity activityClock

	// vertex is the chain's id in the job graph; meter counts for the
	// task's metrics and status (metrics.go).
	vertex int
	meter  taskMeter

	// hooks for tests; nil in production. beforeEncode runs on the
	// encoder goroutine of checkpoint id before the encoders; abandoned
	// closes when the task abandons them.
	onOutputBlocked func()
	beforeEncode    func(id int64, abandoned <-chan struct{})
}

// run is the task goroutine's body. The returned error is an
// *OperatorError, errTaskCancelled, or nil when the task finished.
func (t *task) run(ctx context.Context) (err error) {
	t.ctx = ctx
	defer func() {
		if r := recover(); r != nil {
			err = &OperatorError{Operator: t.name, UID: t.head.UID, Subtask: t.subtask,
				Err: newPanicError("panic", r)}
		}
		err = errors.Join(err, t.shutdown())
		if err != nil && !errors.Is(err, errTaskCancelled) {
			// A close error after a real failure must not hide it.
			var oe *OperatorError
			if !errors.As(err, &oe) {
				err = t.head.Wrap(err)
			}
		}
		// The last publication: the master reads these totals once it
		// has the exit, which happens after this.
		t.publish()
	}()
	t.meter.started = time.Now()
	// One signal of room for all outputs: the task waits on it whichever
	// is unavailable, and room on any target wakes it.
	if len(t.outputs) > 1 {
		space := make(chan struct{}, 1)
		for _, o := range t.outputs {
			o.ShareSpace(space)
		}
	}
	for i := len(t.ops) - 1; i >= 0; i-- {
		if err := t.ops[i].Open(t); err != nil {
			return t.ops[i].Info().Wrap(err)
		}
	}
	t.restored.Opened()
	if len(t.outputs) > 0 && t.cfg.flushTimeout > 0 {
		t.flushTimer = t.newTimer("flush", t.flushMail)
		t.flushTimer.Reset(t.cfg.flushTimeout)
	}
	if t.meter.stats != nil {
		t.meter.timer = t.newTimer("publish metrics", t.publishMail)
		t.meter.timer.Reset(observe.PublishInterval)
	}
	return t.loop(ctx)
}

func (t *task) loop(ctx context.Context) error {
	for {
		for t.mb.HasMail() {
			m, ok := t.mb.Take()
			if !ok {
				break
			}
			if err := m.Run(); err != nil {
				if errors.Is(err, errTaskCancelled) {
					return err
				}
				return t.head.Wrap(err)
			}
		}
		if !t.outputsAvailable() {
			// Backpressured: mails (a periodic watermark among them) run
			// meanwhile, but none of this counts as time in which the
			// source found nothing to read.
			t.activity.pause()
			if t.retryOutputs() {
				continue
			}
			if t.onOutputBlocked != nil {
				t.onOutputBlocked()
			}
			w := time.Now()
			select {
			case <-ctx.Done():
				// The wait ends here too; unbooked, it would pass for busy
				// time in the task's last publication.
				t.meter.bpNs += int64(time.Since(w))
				return errTaskCancelled
			case <-t.mb.Ready:
			case <-t.blockedOutput():
			}
			t.meter.bpNs += int64(time.Since(w))
			continue
		}
		t.activity.resume()
		if len(t.suspended) > 0 {
			r := t.suspended[0]
			n := copy(t.suspended, t.suspended[1:])
			t.suspended[n] = nil
			t.suspended = t.suspended[:n]
			if err := r.resume(); err != nil {
				return t.head.Wrap(err)
			}
			if t.cfg.flushTimeout == 0 {
				t.flushOutputs()
			}
			if len(t.suspended) == 0 && t.endPending {
				t.endPending = false
				if err := t.endInput(); err != nil {
					return err
				}
			}
			continue
		}
		if t.ended {
			if !t.awaitFinish {
				return nil
			}
			w := time.Now()
			select {
			case <-ctx.Done():
				t.meter.idleNs += int64(time.Since(w))
				return errTaskCancelled
			case <-t.mb.Ready:
			}
			t.meter.idleNs += int64(time.Since(w))
			continue
		}
		st, err := t.input.Step()
		if err != nil {
			return t.head.Wrap(err)
		}
		if t.cfg.flushTimeout == 0 {
			t.flushOutputs()
		}
		switch st {
		case engine.InputNothing:
			if !t.outputsAvailable() {
				// Deliver what this step left pending first; the top of
				// the loop waits for space.
				continue
			}
			w := time.Now()
			select {
			case <-ctx.Done():
				t.meter.idleNs += int64(time.Since(w))
				return errTaskCancelled
			case <-t.mb.Ready:
			case <-t.input.Ready():
			}
			t.meter.idleNs += int64(time.Since(w))
		case engine.InputEnd:
			if len(t.suspended) > 0 {
				t.endPending = true // after the suspended work
				continue
			}
			if err := t.endInput(); err != nil {
				return err
			}
		}
	}
}

// resumable is work an operator of the chain stopped because the task's
// output was unavailable: timers that a watermark made due. Its operator
// registers it with suspend; the task calls resume, on its goroutine, when
// the output is available again and before it processes more input, so
// the records of one step stay bounded (the backpressure rule) and events
// keep their order. resume may suspend the work again.
type resumable interface {
	resume() error
}

// The task as its operators see it (engine.Task). Runtime's own operators
// that need more of it (runtime's configuration, the execution) get the
// *task itself once built (taskBound).
var _ engine.Task = (*task)(nil)

func (t *task) Restored() *engine.RestoredState { return t.restored }

func (t *task) DrainingForSavepoint() bool {
	return t != nil && t.ex != nil && t.ex.drainingForSavepoint.Load()
}

func (t *task) ShuffleDrained(channel string) {
	if t != nil && t.ex != nil {
		t.ex.shuffleDrained(channel)
	}
}

// What runtime/internal's operators use of their task (engine.Task).

func (t *task) Context() context.Context {
	if t.ctx == nil {
		return context.Background() // a task driven by hand in a test
	}
	return t.ctx
}

func (t *task) NewTimer(name string, fn func() error) *time.Timer { return t.newTimer(name, fn) }

func (t *task) MetricGroup(info engine.OpInfo) *metrics.Group { return t.metricGroup(info) }

func (t *task) JobFacts() engine.JobFacts {
	cp := &t.cfg.cp
	f := engine.JobFacts{Attempt: t.attempt, CheckpointsEnabled: cp.enabled(),
		Checkpoints: connector.CheckpointConfig{
			Interval: cp.interval, Timeout: cp.timeout, MinPause: cp.minPause, TolerableFailures: cp.tolerable,
			MaxRestartDelay: cp.restartStrategy().MaxDelay(),
		}}
	if t.cfg.dist != nil {
		f.Job, f.Distributed = t.cfg.dist.Job, true
	}
	if t.ex != nil {
		if !f.Distributed {
			f.Job = t.ex.name
		}
		f.Checkpoints.Unbounded = unboundedJob(t.ex.g)
		if t.ex.slot != nil {
			f.ClaimEpoch, f.ClaimIncarnation = t.ex.slot.Epoch, t.ex.slot.Incarnation
			f.Checkpoints.Takeover = takeoverOf(t.cfg)
		}
	}
	return f
}

func (t *task) CommitsSettled() {
	t.reportCommitted()
	if t.finishRequested {
		t.tryFinish()
	}
}

func (t *task) EndOfInputCommit(sink string) error { return t.ex.endOfInputCommit(t, sink) }

// takeoverOf is what a takeover of a slot of the distributed job cfg
// runs may take: the membership's session and rebalance timeouts, the
// claim's confirmation, and one checkpoint timeout for the restore.
func takeoverOf(cfg *config) connector.Takeover {
	if cfg.dist == nil {
		return connector.Takeover{}
	}
	d := *cfg.dist
	d.withDefaults()
	return connector.Takeover{SessionTimeout: d.SessionTimeout, RebalanceTimeout: slots.DefaultRebalanceTimeout,
		Claim: slotrun.ClaimConfirmTimeout, Restore: cfg.cp.timeout}
}

// unboundedJob reports whether some source of g never ends.
func unboundedJob(g *jobGraph) bool {
	if g == nil {
		return false
	}
	for _, n := range g.nodes {
		if b, ok := n.source.(interface{ boundedness() connector.Boundedness }); ok && b.boundedness() != connector.Bounded {
			return true
		}
	}
	return false
}

func (t *task) ActivityTime() time.Time { return t.activity.now() }

func (t *task) CountLag(r connector.LagReporter) (uncount func()) {
	if t.ex == nil {
		return nil
	}
	// The key is only this reader's entry in the gauge: a new one each call.
	return t.ex.env.observer().AddLag(new(int), r)
}

func (t *task) SourceSettings() engine.SourceSettings {
	s := engine.SourceSettings{WatermarkInterval: t.cfg.autoWatermarkInterval, RescaledToEnumerator: t.cfg.cp.rescaledToEnumerator}
	if t.ex != nil && t.ex.slot != nil {
		s.ClaimEpoch = t.ex.slot.Epoch
	}
	return s
}

// taskBound is an operator of runtime's that uses more of its task than
// engine.Task gives: buildTasks gives it its task when it builds it, before
// Open. Without it, Open would have to take runtime's *task back out of the
// engine.Task it is given.
type taskBound interface {
	bindTask(t *task)
}

// suspend registers r to be resumed.
func (t *task) suspend(r resumable) { t.suspended = append(t.suspended, r) }

// endInput finishes the chain head first, then tells every downstream
// subtask that this partition ended (which flushes the buffers first).
func (t *task) endInput() error {
	for _, op := range t.ops {
		if err := op.EndInput(); err != nil {
			return op.Info().Wrap(err)
		}
	}
	stopped := t.input.Stopped()
	for _, o := range t.outputs {
		o.BroadcastEvent(engine.Event{Kind: engine.EventEndOfPartition, Stopped: stopped})
	}
	t.ended = true
	if t.ex != nil && t.ex.cc != nil {
		t.awaitFinish = true
		t.ex.taskEnded(t)
	}
	return nil
}

// shutdown stops the task's timers, closes its mailbox (later puts fail,
// so a coordinator or a timer cannot reach a gone task) and closes every
// operator, head first, whatever happened before.
func (t *task) shutdown() error {
	for _, tm := range t.timers {
		tm.Stop()
	}
	t.abandonEncoding()
	t.mb.Close()
	var errs []error
	for _, op := range t.ops {
		if err := op.Close(); err != nil {
			errs = append(errs, op.Info().Wrap(err))
		}
	}
	return errors.Join(errs...)
}

func (t *task) outputsAvailable() bool {
	for _, o := range t.outputs {
		if !o.Available() {
			return false
		}
	}
	return true
}

func (t *task) retryOutputs() bool {
	ok := true
	for _, o := range t.outputs {
		if !o.RetryPending() {
			ok = false
		}
	}
	return ok
}

func (t *task) blockedOutput() <-chan struct{} {
	for _, o := range t.outputs {
		if !o.Available() {
			return o.SpaceReady()
		}
	}
	return nil
}

func (t *task) flushOutputs() {
	for _, o := range t.outputs {
		o.Flush()
	}
}

func (t *task) flushMail() error {
	t.flushOutputs()
	t.flushTimer.Reset(t.cfg.flushTimeout)
	return nil
}

// newTimer returns a stopped timer whose expiry puts fn into the mailbox,
// so fn runs on the task goroutine. The task stops it when it ends.
func (t *task) newTimer(name string, fn func() error) *time.Timer {
	tm := time.AfterFunc(time.Duration(math.MaxInt64), func() {
		t.mb.Put(engine.PriorityDefault, engine.Mail{Name: name, Run: fn})
	})
	tm.Stop()
	t.timers = append(t.timers, tm)
	return tm
}

// cancel makes the task return at its next look at the mailbox. The task
// context stops a task that waits; this mail stops one that is busy (a
// source that always has more), without a context check per record.
func (t *task) cancel() {
	t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "cancel", Run: func() error { return errTaskCancelled }})
}

// requestStop asks the task to end gracefully: sources stop reading, and
// the end of their partitions drains the rest of the job.
func (t *task) requestStop() {
	t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "stop", Run: func() error {
		t.input.Stop()
		return nil
	}})
}

// gateInput is the default action of a task fed by other tasks: take one
// batch from the gate, push its records through the chain, then act on its
// trailing event.
type gateInput[T any] struct {
	t     *task
	gate  *engine.InputGate[T]
	head  engine.Output[T]
	valve *engine.WatermarkValve
	// done is the batch processed last, handed back to its channel for
	// reuse on the next poll.
	done   *engine.Batch[T]
	doneCh int
	// stoppedUp: some channel ended because its upstream was stopped.
	stoppedUp bool
}

func (g *gateInput[T]) Step() (engine.InputStatus, error) {
	ch, b, ok := g.gate.Poll(g.done, g.doneCh)
	g.done = nil
	if !ok {
		return engine.InputNothing, nil
	}
	g.done, g.doneCh = b, ch
	for i := range b.Records {
		r := &b.Records[i]
		if err := g.head.Collect(r.Value, r.TS); err != nil {
			return engine.InputMore, err
		}
	}
	switch b.Ev.Kind {
	case engine.EventWatermark:
		if err := g.valve.InputWatermark(ch, b.Ev.Watermark); err != nil {
			return engine.InputMore, err
		}
	case engine.EventStatus:
		if err := g.valve.InputStatus(ch, b.Ev.Idle); err != nil {
			return engine.InputMore, err
		}
	case engine.EventBarrier:
		if err := g.t.onBarrier(ch, g.valve.Open(), b.Ev.Barrier); err != nil {
			return engine.InputMore, err
		}
	case engine.EventEndOfPartition:
		g.stoppedUp = g.stoppedUp || b.Ev.Stopped
		allEnded, err := g.valve.EndOfPartition(ch, b.Ev.Stopped)
		if err != nil {
			return engine.InputMore, err
		}
		// A channel that ends no longer owes the barrier being aligned.
		if err := g.t.maybeAligned(g.valve.Open()); err != nil {
			return engine.InputMore, err
		}
		if allEnded {
			return engine.InputEnd, nil
		}
	}
	return engine.InputMore, nil
}

// CurrentWatermark is the watermark the valve passed into the chain last
// (noWatermark before the first); the task's metrics read it.
func (g *gateInput[T]) CurrentWatermark() int64 { return g.valve.Last }

func (g *gateInput[T]) Ready() <-chan struct{} { return g.gate.Notify }
func (g *gateInput[T]) Stop()                  {}
func (g *gateInput[T]) Stopped() bool          { return g.stoppedUp }

// activityClock is a clock that stands still while its task is
// backpressured: it reads the wall clock minus the time the task's output
// was unavailable. Task goroutine only.
type activityClock struct {
	pausedFor time.Duration
	pausedAt  time.Time // zero while running
}

func (c *activityClock) now() time.Time {
	n := time.Now()
	if !c.pausedAt.IsZero() {
		n = c.pausedAt
	}
	return n.Add(-c.pausedFor)
}

func (c *activityClock) pause() {
	if c.pausedAt.IsZero() {
		c.pausedAt = time.Now()
	}
}

func (c *activityClock) resume() {
	if !c.pausedAt.IsZero() {
		c.pausedFor += time.Since(c.pausedAt)
		c.pausedAt = time.Time{}
	}
}
