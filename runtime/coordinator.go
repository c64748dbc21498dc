package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// operatorCoordinator is the job-wide half of an operator, running beside
// its subtasks (Flink's OperatorCoordinator inside its
// OperatorCoordinatorHolder). Today the only one is the source
// coordinator. The checkpoint driver calls checkpoint for N before it
// injects barrier N into the sources (coordinators before barriers), and the
// notifications after; the failover calls subtaskFailed and subtaskReset for
// a restarted region. A global restart creates new coordinators from the
// checkpoint (Flink's resetToCheckpoint, which also replaces the enumerator).
type operatorCoordinator interface {
	// run owns the coordinator goroutine until ctx is cancelled or the
	// coordinator fails; it closes the enumerator before returning.
	run(ctx context.Context)
	// checkpoint snapshots the coordinator for id on its goroutine,
	// closes every subtask's gate and waits until the events sent before
	// the close have run on their subtasks (the gate).
	checkpoint(ctx context.Context, id int64) ([]byte, error)
	notifyCheckpointComplete(id int64)
	// notifyCheckpointAborted reopens the gates closed for id.
	notifyCheckpointAborted(id int64)
	// subtaskFailed drops the events held for or in flight to subtask s,
	// whose task is gone. Called at once, from the driver.
	subtaskFailed(s int)
	// subtaskReset gives the splits assigned to s after checkpoint id back
	// to the enumerator and lets events reach s's new task, bound since
	// subtaskFailed (Flink's subtaskReset).
	subtaskReset(s int, id int64)
	// observe gives the coordinator its metric group and the job's
	// logger; called before run.
	observe(g *metrics.Group, log *slog.Logger)
	// startShufflesAt gives the coordinator of a slot of a distributed
	// job the positions its job's start record holds, which the
	// enumerator's context offers as connector.ShuffleStarts; called
	// before run, never outside a slot.
	startShufflesAt(starts map[string][]int64)
}

// sourceCoordinator runs a source's SplitEnumerator on one goroutine of its
// own (the single-threaded enumerator): every enumerator method and every
// CallAsync continuation runs there, taken one at a time from a queue.
// Readers' registrations, split requests and events are queued to it from the
// task goroutines; its answers (splits, no-more-splits, events) go through
// the subtask gateways (gateway.go) into the reader tasks' mailboxes, and
// every assignment is booked in the splitAssignmentTracker (the booking
// rule). Nothing of the enumerator needs a lock.
type sourceCoordinator[T any, S connector.Split, C any] struct {
	info        opInfo
	src         connector.Source[T, S, C]
	parallelism int
	gateways    []*subtaskGateway[T, S, C]
	fail        func(error)
	// restored is the enumerator state to restore from, nil for a fresh
	// start; rescaled are the readers' checkpointed splits, by old
	// subtask, to hand to the enumerator (WithRescaledSplitsToEnumerator).
	restored []byte
	rescaled [][]byte

	queue *engine.Mailbox

	// Coordinator goroutine only.
	enum       connector.SplitEnumerator[S, C]
	registered map[int]connector.ReaderInfo
	closing    bool
	tracker    *splitAssignmentTracker[S]

	asyncCtx    context.Context
	asyncCancel context.CancelFunc
	async       sync.WaitGroup

	// Set by observe before run; nil in tests that build a coordinator
	// by hand.
	metrics *metrics.Group
	log     *slog.Logger
	// shuffleStarts is set by startShufflesAt before run; read only.
	shuffleStarts map[string][]int64
}

func (c *sourceCoordinator[T, S, C]) startShufflesAt(starts map[string][]int64) {
	c.shuffleStarts = starts
}

// ShuffleStart makes the enumerator's context a connector.ShuffleStarts:
// the positions the job's start record holds for channel, nil outside a
// slot of a distributed job.
func (c *sourceCoordinator[T, S, C]) ShuffleStart(channel string) []int64 {
	return c.shuffleStarts[channel]
}

func (c *sourceCoordinator[T, S, C]) observe(g *metrics.Group, log *slog.Logger) {
	c.metrics, c.log = g, log
}

// MetricGroup makes the enumerator's context a metrics.GroupProvider.
func (c *sourceCoordinator[T, S, C]) MetricGroup() *metrics.Group { return c.metrics }

func newSourceCoordinator[T any, S connector.Split, C any](info opInfo, src connector.Source[T, S, C], parallelism int, fail func(error), gate gateOptions) *sourceCoordinator[T, S, C] {
	c := &sourceCoordinator[T, S, C]{
		info:        info,
		src:         src,
		parallelism: parallelism,
		gateways:    make([]*subtaskGateway[T, S, C], parallelism),
		fail:        fail,
		queue:       engine.NewMailbox(),
		registered:  map[int]connector.ReaderInfo{},
		tracker:     newSplitAssignmentTracker[S](),
	}
	for i := range c.gateways {
		c.gateways[i] = &subtaskGateway[T, S, C]{gateOff: gate.off, delay: gate.delay}
	}
	return c
}

// post queues fn for the coordinator goroutine. Safe from any goroutine;
// dropped once the coordinator has stopped.
func (c *sourceCoordinator[T, S, C]) post(name string, fn func() error) {
	c.queue.Put(engine.PriorityDefault, engine.Mail{Name: name, Run: fn})
}

func (c *sourceCoordinator[T, S, C]) run(ctx context.Context) {
	c.asyncCtx, c.asyncCancel = context.WithCancel(ctx)
	defer func() {
		if r := recover(); r != nil {
			c.fail(c.info.wrap(newPanicError("panic", r)))
		}
		c.shutdown()
	}()
	var enum connector.SplitEnumerator[S, C]
	var err error
	if c.restored != nil {
		var st C
		st, err = engine.DecodeVersioned(c.restored, c.src.EnumeratorStateSerializer())
		if err == nil {
			enum, err = c.src.RestoreEnumerator(c, st)
		}
		if err != nil {
			c.fail(c.info.wrap(fmt.Errorf("restore enumerator: %w", err)))
			return
		}
	} else {
		enum, err = c.src.CreateEnumerator(c)
		if err != nil {
			c.fail(c.info.wrap(fmt.Errorf("create enumerator: %w", err)))
			return
		}
	}
	if enum == nil {
		c.fail(c.info.wrap(errNilEnum))
		return
	}
	c.enum = enum
	if err := enum.Start(); err != nil {
		c.fail(c.info.wrap(fmt.Errorf("start enumerator: %w", err)))
		return
	}
	for old, b := range c.rescaled {
		if b == nil {
			continue
		}
		splits, err := engine.DecodeList(b, c.src.SplitSerializer())
		if err == nil && len(splits) > 0 {
			err = enum.AddSplitsBack(splits, old)
		}
		if err != nil {
			c.fail(c.info.wrap(fmt.Errorf("hand rescaled splits of old subtask %d to the enumerator: %w", old, err)))
			return
		}
	}
	for {
		for c.queue.HasMail() {
			m, ok := c.queue.Take()
			if !ok {
				break
			}
			if err := m.Run(); err != nil {
				c.fail(c.info.wrap(fmt.Errorf("%s: %w", m.Name, err)))
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.queue.Ready:
		}
	}
}

// shutdown closes the enumerator, cancels its asynchronous work and waits
// for it; continuations that arrive later are dropped with the queue.
// A panic in Close fails the coordinator like an error; the shutdown
// completes anyway.
func (c *sourceCoordinator[T, S, C]) shutdown() {
	c.closing = true
	c.asyncCancel()
	if c.enum != nil {
		if err := c.closeEnumerator(); err != nil {
			c.fail(c.info.wrap(fmt.Errorf("close enumerator: %w", err)))
		}
	}
	c.async.Wait()
	c.queue.Close()
}

func (c *sourceCoordinator[T, S, C]) closeEnumerator() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("panic", r)
		}
	}()
	return c.enum.Close()
}

// runAsync runs an enumerator's async work off the coordinator goroutine;
// a panic there fails the coordinator (with its stack, as a task's does)
// instead of the process, and ok is false.
func (c *sourceCoordinator[T, S, C]) runAsync(ctx context.Context, work connector.AsyncWork) (then func() error, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			c.fail(c.info.wrap(newPanicError("async work: panic", r)))
			then, ok = nil, false
		}
	}()
	return work(ctx), true
}

func (c *sourceCoordinator[T, S, C]) checkpoint(ctx context.Context, id int64) ([]byte, error) {
	type result struct {
		data  []byte
		err   error
		gates []<-chan struct{}
	}
	done := make(chan result, 1)
	c.post("checkpoint", func() error {
		if c.enum == nil {
			done <- result{err: fmt.Errorf("source %q: no enumerator to snapshot", c.info.name)}
			return nil
		}
		st, err := c.enum.SnapshotState(id)
		var data []byte
		if err == nil {
			data, err = engine.EncodeVersioned(st, c.src.EnumeratorStateSerializer())
		}
		if err != nil {
			done <- result{err: err}
			return nil
		}
		// Files the assignments made so far under id, then closes the
		// gates: later assignments are "after id" both here and in the
		// readers, since they reach a reader only after its snapshot.
		c.tracker.OnCheckpoint(id)
		r := result{data: data}
		for _, g := range c.gateways {
			r.gates = append(r.gates, g.close(id))
		}
		done <- r
		return nil
	})
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	for _, g := range r.gates {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r.data, nil
}

func (c *sourceCoordinator[T, S, C]) notifyCheckpointComplete(id int64) {
	c.post("notify checkpoint complete", func() error {
		c.tracker.OnCheckpointComplete(id)
		if c.enum == nil {
			return nil
		}
		return c.enum.NotifyCheckpointComplete(id)
	})
}

func (c *sourceCoordinator[T, S, C]) notifyCheckpointAborted(id int64) {
	for _, g := range c.gateways {
		g.open(id)
	}
}

func (c *sourceCoordinator[T, S, C]) subtaskFailed(s int) { c.gateways[s].failed() }

func (c *sourceCoordinator[T, S, C]) subtaskReset(s int, id int64) {
	gen := c.gateways[s].generation()
	c.post("subtask reset", func() error {
		splits := c.tracker.TakeAssignmentsAfter(s, id)
		delete(c.registered, s)
		c.gateways[s].activate(gen)
		if len(splits) == 0 || c.enum == nil {
			return nil
		}
		return c.enum.AddSplitsBack(splits, s)
	})
}

// Events from readers, queued from their task goroutines.

func (c *sourceCoordinator[T, S, C]) registerReader(subtask int) {
	c.post("register reader", func() error {
		c.registered[subtask] = connector.ReaderInfo{SubtaskIndex: subtask, Location: "local"}
		return c.enum.AddReader(subtask)
	})
}

func (c *sourceCoordinator[T, S, C]) splitRequest(subtask int) {
	c.post("split request", func() error { return c.enum.HandleSplitRequest(subtask) })
}

func (c *sourceCoordinator[T, S, C]) sourceEvent(subtask int, ev connector.SourceEvent) {
	c.post("source event", func() error { return c.enum.HandleSourceEvent(subtask, ev) })
}

// SplitEnumeratorContext, called on the coordinator goroutine.

func (c *sourceCoordinator[T, S, C]) CurrentParallelism() int { return c.parallelism }

// Context is cancelled when the coordinator stops.
func (c *sourceCoordinator[T, S, C]) Context() context.Context {
	if c.asyncCtx == nil {
		return context.Background()
	}
	return c.asyncCtx
}

func (c *sourceCoordinator[T, S, C]) RegisteredReaders() map[int]connector.ReaderInfo {
	return maps.Clone(c.registered)
}

func (c *sourceCoordinator[T, S, C]) checkRegistered(subtask int) error {
	if _, ok := c.registered[subtask]; !ok {
		return fmt.Errorf("source %q: subtask %d has no registered reader (parallelism %d)", c.info.name, subtask, c.parallelism)
	}
	return nil
}

// toReader puts a mail into subtask's task mailbox. A subtask that already
// finished drops it: a bounded reader that ended needs no more work.
func (c *sourceCoordinator[T, S, C]) toReader(subtask int, name string, fn func(*sourceOperator[T, S, C]) error) {
	c.gateways[subtask].send(name, fn)
}

func (c *sourceCoordinator[T, S, C]) AssignSplits(a connector.SplitsAssignment[S]) error {
	for s := range a.Assignment {
		if err := c.checkRegistered(s); err != nil {
			return err
		}
	}
	c.tracker.RecordAssignment(a)
	for s, splits := range a.Assignment {
		if len(splits) == 0 {
			continue
		}
		splits, err := c.copySplits(splits)
		if err != nil {
			return err
		}
		if c.log != nil {
			ids := make([]string, len(splits))
			for i, sp := range splits {
				ids[i] = sp.SplitID()
			}
			c.log.Info("splitflow: splits assigned", "source", c.info.name, "subtask", s, "splits", ids)
		}
		c.toReader(s, "add splits", func(op *sourceOperator[T, S, C]) error { return op.addSplits(splits) })
	}
	return nil
}

// copySplits gives a reader its own copies of the assigned splits, through
// the source's serializer, as a split crossing the network would be: a
// reader advances its splits in place, while the tracker keeps the
// assigned ones to hand back unchanged if the reader's subtask is reset.
// Without a serializer the splits are shared.
func (c *sourceCoordinator[T, S, C]) copySplits(splits []S) ([]S, error) {
	ser := c.src.SplitSerializer()
	if ser == nil {
		return splits, nil
	}
	out := make([]S, len(splits))
	for i, sp := range splits {
		b, err := ser.Serialize(sp)
		if err != nil {
			return nil, fmt.Errorf("source %q: serialize split %s: %w", c.info.name, sp.SplitID(), err)
		}
		if out[i], err = ser.Deserialize(ser.Version(), b); err != nil {
			return nil, fmt.Errorf("source %q: deserialize split %s: %w", c.info.name, sp.SplitID(), err)
		}
	}
	return out, nil
}

func (c *sourceCoordinator[T, S, C]) AssignSplit(split S, subtask int) error {
	return c.AssignSplits(connector.SplitsAssignment[S]{Assignment: map[int][]S{subtask: {split}}})
}

func (c *sourceCoordinator[T, S, C]) SignalNoMoreSplits(subtask int) error {
	if err := c.checkRegistered(subtask); err != nil {
		return err
	}
	c.toReader(subtask, "no more splits", (*sourceOperator[T, S, C]).noMoreSplits)
	return nil
}

func (c *sourceCoordinator[T, S, C]) SendEventToSourceReader(subtask int, ev connector.SourceEvent) error {
	if err := c.checkRegistered(subtask); err != nil {
		return err
	}
	c.toReader(subtask, "source event", func(op *sourceOperator[T, S, C]) error { return op.handleSourceEvent(ev) })
	return nil
}

func (c *sourceCoordinator[T, S, C]) CallAsync(work connector.AsyncWork) {
	c.CallAsyncPeriodically(work, 0, 0)
}

func (c *sourceCoordinator[T, S, C]) CallAsyncPeriodically(work connector.AsyncWork, initialDelay, period time.Duration) {
	if c.closing {
		return
	}
	ctx := c.asyncCtx
	c.async.Add(1)
	go func() {
		defer c.async.Done()
		delay := initialDelay
		for {
			if delay > 0 {
				tm := time.NewTimer(delay)
				select {
				case <-ctx.Done():
					tm.Stop()
					return
				case <-tm.C:
				}
			}
			if ctx.Err() != nil {
				return
			}
			then, ok := c.runAsync(ctx, work)
			if !ok {
				return
			}
			// The next run starts only after this continuation ran on
			// the coordinator goroutine, so runs never overlap.
			ran := make(chan struct{})
			c.post("async continuation", func() error {
				defer close(ran)
				if then == nil || ctx.Err() != nil {
					return nil
				}
				return then()
			})
			if period <= 0 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ran:
			}
			delay = period
		}
	}()
}

func (c *sourceCoordinator[T, S, C]) RunInCoordinatorThread(fn func() error) {
	c.post("run in coordinator thread", fn)
}
