package srccoord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

var errNilEnum = errors.New("source returned a nil enumerator")

// Coordinator is the job-wide half of an operator, running beside
// its subtasks (Flink's OperatorCoordinator inside its
// OperatorCoordinatorHolder). Today the only one is the source
// coordinator. The checkpoint driver calls Checkpoint for N before it
// injects barrier N into the sources (coordinators before barriers), and the
// notifications after; the failover calls SubtaskFailed and SubtaskReset for
// a restarted region. A global restart creates new coordinators from the
// checkpoint (Flink's resetToCheckpoint, which also replaces the enumerator).
type Coordinator interface {
	// Run owns the coordinator goroutine until ctx is cancelled or the
	// coordinator fails; it closes the enumerator before returning.
	Run(ctx context.Context)
	// Checkpoint snapshots the coordinator for id on its goroutine,
	// closes every subtask's gate and waits until the events sent before
	// the close have run on their subtasks (the gate).
	Checkpoint(ctx context.Context, id int64) ([]byte, error)
	NotifyCheckpointComplete(id int64)
	// NotifyCheckpointAborted reopens the gates closed for id.
	NotifyCheckpointAborted(id int64)
	// SubtaskFailed drops the events held for or in flight to subtask s,
	// whose task is gone. Called at once, from the driver.
	SubtaskFailed(s int)
	// SubtaskReset gives the splits assigned to s after checkpoint id back
	// to the enumerator and lets events reach s's new task, bound since
	// SubtaskFailed (Flink's subtaskReset).
	SubtaskReset(s int, id int64)
	// Observe gives the coordinator its metric group and the job's
	// logger; called before Run.
	Observe(g *metrics.Group, log *slog.Logger)
	// StartShufflesAt gives the coordinator of a slot of a distributed
	// job the positions its job's start record holds, which the
	// enumerator's context offers as connector.ShuffleStarts; called
	// before Run, never outside a slot.
	StartShufflesAt(starts map[string][]int64)
}

// Operator is what a coordinator knows of its operator: the name its
// errors and logs give, how an error is attributed to the operator
// (runtime's OperatorError, subtask -1), and how a recovered panic
// becomes an error that carries the panic's stack.
type Operator struct {
	Name  string
	Wrap  func(error) error
	Panic func(what string, value any) error
}

// Source is a source's coordinator. It runs the source's SplitEnumerator
// on one goroutine of its own (the single-threaded enumerator): every
// enumerator method and every CallAsync continuation runs there, taken one
// at a time from a queue. Readers' registrations, split requests and
// events are queued to it from the task goroutines; its answers (splits,
// no-more-splits, events) go through the subtask gateways (Gateway) into
// the reader tasks' mailboxes, and every assignment is booked in the
// splitAssignmentTracker (the booking rule). Nothing of the enumerator
// needs a lock. It is the enumerator's connector.SplitEnumeratorContext.
type Source[T any, S connector.Split, C any] struct {
	info        Operator
	src         connector.Source[T, S, C]
	parallelism int
	gateways    []*Gateway[S]
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

	// Set by Observe before Run; nil in tests that build a coordinator
	// by hand.
	metrics *metrics.Group
	log     *slog.Logger
	// shuffleStarts is set by StartShufflesAt before Run; read only.
	shuffleStarts map[string][]int64
}

func (c *Source[T, S, C]) StartShufflesAt(starts map[string][]int64) {
	c.shuffleStarts = starts
}

// ShuffleStart makes the enumerator's context a connector.ShuffleStarts:
// the positions the job's start record holds for channel, nil outside a
// slot of a distributed job.
func (c *Source[T, S, C]) ShuffleStart(channel string) []int64 {
	return c.shuffleStarts[channel]
}

func (c *Source[T, S, C]) Observe(g *metrics.Group, log *slog.Logger) {
	c.metrics, c.log = g, log
}

// MetricGroup makes the enumerator's context a metrics.GroupProvider.
func (c *Source[T, S, C]) MetricGroup() *metrics.Group { return c.metrics }

// New returns the coordinator of src, an operator of the given
// parallelism, which reports its failures to fail, from a fresh start and
// booking every assignment; RestoreFrom and BookAssignments change that
// before Run.
func New[T any, S connector.Split, C any](info Operator, src connector.Source[T, S, C], parallelism int, fail func(error), gate GateOptions) *Source[T, S, C] {
	c := &Source[T, S, C]{
		info:        info,
		src:         src,
		parallelism: parallelism,
		gateways:    make([]*Gateway[S], parallelism),
		fail:        fail,
		queue:       engine.NewMailbox(),
		registered:  map[int]connector.ReaderInfo{},
		tracker:     newSplitAssignmentTracker[S](),
	}
	for i := range c.gateways {
		c.gateways[i] = &Gateway[S]{gateOff: gate.Off, delay: gate.Delay}
	}
	return c
}

// RestoreFrom has the coordinator start from a checkpoint: restored is
// the enumerator state to restore from (nil for a fresh start), rescaled
// the readers' checkpointed splits, by old subtask, to hand to the
// enumerator (WithRescaledSplitsToEnumerator). Called before Run.
func (c *Source[T, S, C]) RestoreFrom(restored []byte, rescaled [][]byte) {
	c.restored, c.rescaled = restored, rescaled
}

// BookAssignments says whether the splitAssignmentTracker books the
// assignments: only a job that can restart reads them. Called before Run.
func (c *Source[T, S, C]) BookAssignments(book bool) { c.tracker.off = !book }

// Gateway is the gateway to subtask's reader: its task binds it and
// opens the gate after its snapshot.
func (c *Source[T, S, C]) Gateway(subtask int) *Gateway[S] { return c.gateways[subtask] }

// Uncheckpointed counts the splits booked as assigned since the last
// coordinator snapshot. Tests only, once the coordinator has stopped: the
// tracker belongs to its goroutine.
func (c *Source[T, S, C]) Uncheckpointed() int {
	n := 0
	for _, splits := range c.tracker.uncheckpointed {
		n += len(splits)
	}
	return n
}

// post queues fn for the coordinator goroutine. Safe from any goroutine;
// dropped once the coordinator has stopped.
func (c *Source[T, S, C]) post(name string, fn func() error) {
	c.queue.Put(engine.PriorityDefault, engine.Mail{Name: name, Run: fn})
}

func (c *Source[T, S, C]) Run(ctx context.Context) {
	c.asyncCtx, c.asyncCancel = context.WithCancel(ctx)
	defer func() {
		if r := recover(); r != nil {
			c.fail(c.info.Wrap(c.info.Panic("panic", r)))
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
			c.fail(c.info.Wrap(fmt.Errorf("restore enumerator: %w", err)))
			return
		}
	} else {
		enum, err = c.src.CreateEnumerator(c)
		if err != nil {
			c.fail(c.info.Wrap(fmt.Errorf("create enumerator: %w", err)))
			return
		}
	}
	if enum == nil {
		c.fail(c.info.Wrap(errNilEnum))
		return
	}
	c.enum = enum
	if err := enum.Start(); err != nil {
		c.fail(c.info.Wrap(fmt.Errorf("start enumerator: %w", err)))
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
			c.fail(c.info.Wrap(fmt.Errorf("hand rescaled splits of old subtask %d to the enumerator: %w", old, err)))
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
				c.fail(c.info.Wrap(fmt.Errorf("%s: %w", m.Name, err)))
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
func (c *Source[T, S, C]) shutdown() {
	c.closing = true
	c.asyncCancel()
	if c.enum != nil {
		if err := c.closeEnumerator(); err != nil {
			c.fail(c.info.Wrap(fmt.Errorf("close enumerator: %w", err)))
		}
	}
	c.async.Wait()
	c.queue.Close()
}

func (c *Source[T, S, C]) closeEnumerator() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.info.Panic("panic", r)
		}
	}()
	return c.enum.Close()
}

// runAsync runs an enumerator's async work off the coordinator goroutine;
// a panic there fails the coordinator (with its stack, as a task's does)
// instead of the process, and ok is false.
func (c *Source[T, S, C]) runAsync(ctx context.Context, work connector.AsyncWork) (then func() error, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			c.fail(c.info.Wrap(c.info.Panic("async work: panic", r)))
			then, ok = nil, false
		}
	}()
	return work(ctx), true
}

func (c *Source[T, S, C]) Checkpoint(ctx context.Context, id int64) ([]byte, error) {
	type result struct {
		data  []byte
		err   error
		gates []<-chan struct{}
	}
	done := make(chan result, 1)
	c.post("checkpoint", func() error {
		if c.enum == nil {
			done <- result{err: fmt.Errorf("source %q: no enumerator to snapshot", c.info.Name)}
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

func (c *Source[T, S, C]) NotifyCheckpointComplete(id int64) {
	c.post("notify checkpoint complete", func() error {
		c.tracker.OnCheckpointComplete(id)
		if c.enum == nil {
			return nil
		}
		return c.enum.NotifyCheckpointComplete(id)
	})
}

func (c *Source[T, S, C]) NotifyCheckpointAborted(id int64) {
	for _, g := range c.gateways {
		g.Open(id)
	}
}

func (c *Source[T, S, C]) SubtaskFailed(s int) { c.gateways[s].failed() }

func (c *Source[T, S, C]) SubtaskReset(s int, id int64) {
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

// RegisterReader tells the enumerator of subtask's reader.
func (c *Source[T, S, C]) RegisterReader(subtask int) {
	c.post("register reader", func() error {
		c.registered[subtask] = connector.ReaderInfo{SubtaskIndex: subtask, Location: "local"}
		return c.enum.AddReader(subtask)
	})
}

// SplitRequest is a reader's connector.SourceReaderContext.SendSplitRequest.
func (c *Source[T, S, C]) SplitRequest(subtask int) {
	c.post("split request", func() error { return c.enum.HandleSplitRequest(subtask) })
}

// SourceEvent is a reader's connector.SourceReaderContext.SendSourceEvent.
func (c *Source[T, S, C]) SourceEvent(subtask int, ev connector.SourceEvent) {
	c.post("source event", func() error { return c.enum.HandleSourceEvent(subtask, ev) })
}

// SplitEnumeratorContext, called on the coordinator goroutine.

func (c *Source[T, S, C]) CurrentParallelism() int { return c.parallelism }

// Context is cancelled when the coordinator stops.
func (c *Source[T, S, C]) Context() context.Context {
	if c.asyncCtx == nil {
		return context.Background()
	}
	return c.asyncCtx
}

func (c *Source[T, S, C]) RegisteredReaders() map[int]connector.ReaderInfo {
	return maps.Clone(c.registered)
}

func (c *Source[T, S, C]) checkRegistered(subtask int) error {
	if _, ok := c.registered[subtask]; !ok {
		return fmt.Errorf("source %q: subtask %d has no registered reader (parallelism %d)", c.info.Name, subtask, c.parallelism)
	}
	return nil
}

// toReader puts a mail into subtask's task mailbox. A subtask that already
// finished drops it: a bounded reader that ended needs no more work.
func (c *Source[T, S, C]) toReader(subtask int, name string, fn func(Reader[S]) error) {
	c.gateways[subtask].send(name, fn)
}

func (c *Source[T, S, C]) AssignSplits(a connector.SplitsAssignment[S]) error {
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
			c.log.Info("splitflow: splits assigned", "source", c.info.Name, "subtask", s, "splits", ids)
		}
		c.toReader(s, "add splits", func(r Reader[S]) error { return r.AddSplits(splits) })
	}
	return nil
}

// copySplits gives a reader its own copies of the assigned splits, through
// the source's serializer, as a split crossing the network would be: a
// reader advances its splits in place, while the tracker keeps the
// assigned ones to hand back unchanged if the reader's subtask is reset.
// Without a serializer the splits are shared.
func (c *Source[T, S, C]) copySplits(splits []S) ([]S, error) {
	ser := c.src.SplitSerializer()
	if ser == nil {
		return splits, nil
	}
	out := make([]S, len(splits))
	for i, sp := range splits {
		b, err := ser.Serialize(sp)
		if err != nil {
			return nil, fmt.Errorf("source %q: serialize split %s: %w", c.info.Name, sp.SplitID(), err)
		}
		if out[i], err = ser.Deserialize(ser.Version(), b); err != nil {
			return nil, fmt.Errorf("source %q: deserialize split %s: %w", c.info.Name, sp.SplitID(), err)
		}
	}
	return out, nil
}

func (c *Source[T, S, C]) AssignSplit(split S, subtask int) error {
	return c.AssignSplits(connector.SplitsAssignment[S]{Assignment: map[int][]S{subtask: {split}}})
}

func (c *Source[T, S, C]) SignalNoMoreSplits(subtask int) error {
	if err := c.checkRegistered(subtask); err != nil {
		return err
	}
	c.toReader(subtask, "no more splits", Reader[S].NoMoreSplits)
	return nil
}

func (c *Source[T, S, C]) SendEventToSourceReader(subtask int, ev connector.SourceEvent) error {
	if err := c.checkRegistered(subtask); err != nil {
		return err
	}
	c.toReader(subtask, "source event", func(r Reader[S]) error { return r.HandleSourceEvent(ev) })
	return nil
}

func (c *Source[T, S, C]) CallAsync(work connector.AsyncWork) {
	c.CallAsyncPeriodically(work, 0, 0)
}

func (c *Source[T, S, C]) CallAsyncPeriodically(work connector.AsyncWork, initialDelay, period time.Duration) {
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

func (c *Source[T, S, C]) RunInCoordinatorThread(fn func() error) {
	c.post("run in coordinator thread", fn)
}
