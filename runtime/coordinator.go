package runtime

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// operatorCoordinator is the job-wide half of an operator, running beside
// its subtasks (Flink's OperatorCoordinator). Today the only one is the
// source coordinator.
//
// It is the seam for checkpoints and failover, which come next. The
// checkpoint coordinator will call snapshotState for checkpoint N before it
// injects barrier N into the sources (invariant 4) and
// notifyCheckpointComplete afterwards; neither is called yet. Failover will
// add resetToCheckpoint (restore the enumerator from a snapshot) and
// subtaskReset (return to the enumerator, through AddSplitsBack, the splits
// assigned to a failed subtask after its last checkpoint), together with the
// SplitAssignmentTracker that books assignments (invariant 3) and the
// gateway that holds events back between a coordinator snapshot and the
// subtask's checkpoint (invariant 5). Until then assignments go straight to
// the reader's mailbox.
type operatorCoordinator interface {
	// run owns the coordinator goroutine until ctx is cancelled or the
	// coordinator fails; it closes the enumerator before returning.
	run(ctx context.Context)
	// snapshotState serializes the enumerator's state for checkpointID on
	// the coordinator goroutine. Not called yet.
	snapshotState(ctx context.Context, checkpointID int64) ([]byte, error)
	// notifyCheckpointComplete tells the enumerator checkpointID completed.
	// Not called yet.
	notifyCheckpointComplete(checkpointID int64)
}

// sourceCoordinator runs a source's SplitEnumerator on one goroutine of its
// own (invariant 2): every enumerator method and every CallAsync
// continuation runs there, taken one at a time from a queue. Readers'
// registrations, split requests and events are queued to it from the task
// goroutines; its answers (splits, no-more-splits, events) go into the
// reader tasks' mailboxes. Nothing of the enumerator needs a lock.
type sourceCoordinator[T any, S connector.Split, C any] struct {
	info        opInfo
	src         connector.Source[T, S, C]
	parallelism int
	readers     []*sourceOperator[T, S, C]
	mailboxes   []*mailbox
	fail        func(error)

	queue *mailbox

	// Coordinator goroutine only.
	enum       connector.SplitEnumerator[S, C]
	registered map[int]connector.ReaderInfo
	closing    bool

	asyncCtx    context.Context
	asyncCancel context.CancelFunc
	async       sync.WaitGroup
}

func newSourceCoordinator[T any, S connector.Split, C any](info opInfo, src connector.Source[T, S, C], parallelism int, fail func(error)) *sourceCoordinator[T, S, C] {
	return &sourceCoordinator[T, S, C]{
		info:        info,
		src:         src,
		parallelism: parallelism,
		readers:     make([]*sourceOperator[T, S, C], parallelism),
		mailboxes:   make([]*mailbox, parallelism),
		fail:        fail,
		queue:       newMailbox(),
		registered:  map[int]connector.ReaderInfo{},
	}
}

// post queues fn for the coordinator goroutine. Safe from any goroutine;
// dropped once the coordinator has stopped.
func (c *sourceCoordinator[T, S, C]) post(name string, fn func() error) {
	c.queue.put(priorityDefault, mail{name: name, run: fn})
}

func (c *sourceCoordinator[T, S, C]) run(ctx context.Context) {
	c.asyncCtx, c.asyncCancel = context.WithCancel(ctx)
	defer func() {
		if r := recover(); r != nil {
			c.fail(c.info.wrap(fmt.Errorf("panic: %v", r)))
		}
		c.shutdown()
	}()
	enum, err := c.src.CreateEnumerator(c)
	if err != nil {
		c.fail(c.info.wrap(fmt.Errorf("create enumerator: %w", err)))
		return
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
	for {
		for c.queue.hasMail() {
			m, ok := c.queue.take()
			if !ok {
				break
			}
			if err := m.run(); err != nil {
				c.fail(c.info.wrap(fmt.Errorf("%s: %w", m.name, err)))
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.queue.ready:
		}
	}
}

// shutdown closes the enumerator, cancels its asynchronous work and waits
// for it; continuations that arrive later are dropped with the queue.
func (c *sourceCoordinator[T, S, C]) shutdown() {
	c.closing = true
	c.asyncCancel()
	if c.enum != nil {
		if err := c.enum.Close(); err != nil {
			c.fail(c.info.wrap(fmt.Errorf("close enumerator: %w", err)))
		}
	}
	c.async.Wait()
	c.queue.close()
}

func (c *sourceCoordinator[T, S, C]) snapshotState(ctx context.Context, checkpointID int64) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	c.post("snapshot", func() error {
		if c.enum == nil {
			done <- result{nil, fmt.Errorf("source %q: no enumerator to snapshot", c.info.name)}
			return nil
		}
		st, err := c.enum.SnapshotState(checkpointID)
		if err == nil {
			var data []byte
			data, err = c.src.EnumeratorStateSerializer().Serialize(st)
			done <- result{data, err}
			return nil
		}
		done <- result{nil, err}
		return nil
	})
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *sourceCoordinator[T, S, C]) notifyCheckpointComplete(checkpointID int64) {
	c.post("notify checkpoint complete", func() error {
		if c.enum == nil {
			return nil
		}
		return c.enum.NotifyCheckpointComplete(checkpointID)
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
	op := c.readers[subtask]
	c.mailboxes[subtask].put(priorityDefault, mail{name: name, run: func() error { return fn(op) }})
}

func (c *sourceCoordinator[T, S, C]) AssignSplits(a connector.SplitsAssignment[S]) error {
	for s := range a.Assignment {
		if err := c.checkRegistered(s); err != nil {
			return err
		}
	}
	for s, splits := range a.Assignment {
		if len(splits) == 0 {
			continue
		}
		splits := splits
		c.toReader(s, "add splits", func(op *sourceOperator[T, S, C]) error { return op.addSplits(splits) })
	}
	return nil
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
			then := work(ctx)
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
