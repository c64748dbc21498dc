package runtime

import (
	"context"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/slotrun"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// fanOut sends everything to several outputs: a stream consumed by more
// than one operator.
type fanOut[T any] struct{ outs []engine.Output[T] }

func (f *fanOut[T]) Collect(v T, ts int64) error {
	for _, o := range f.outs {
		if err := o.Collect(v, ts); err != nil {
			return err
		}
	}
	return nil
}

func (f *fanOut[T]) EmitWatermark(wm int64) error {
	for _, o := range f.outs {
		if err := o.EmitWatermark(wm); err != nil {
			return err
		}
	}
	return nil
}

func (f *fanOut[T]) EmitStatus(idle bool) error {
	for _, o := range f.outs {
		if err := o.EmitStatus(idle); err != nil {
			return err
		}
	}
	return nil
}

// The capabilities runtime's operators have, checked at compile time: the
// task finds each by type assertion, so a method that stopped matching
// would otherwise just stop being called.
var (
	_ engine.Preparer           = (*sinkOperator[int])(nil)
	_ engine.CheckpointNotified = (*sinkOperator[int])(nil)
	_ engine.OutputCommitter    = (*sinkOperator[int])(nil)
	_ taskBound                 = (*sinkOperator[int])(nil)

	_ engine.Preparer           = (*twoPhaseSinkOperator[int, int])(nil)
	_ engine.Snapshotter        = (*twoPhaseSinkOperator[int, int])(nil)
	_ engine.CheckpointNotified = (*twoPhaseSinkOperator[int, int])(nil)
	_ engine.Committing         = (*twoPhaseSinkOperator[int, int])(nil)
	_ engine.OutputCommitter    = (*twoPhaseSinkOperator[int, int])(nil)
	_ taskBound                 = (*twoPhaseSinkOperator[int, int])(nil)

	_ engine.Preparer         = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.Snapshotter      = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.AsyncSnapshotter = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.NewFileBytes     = (*keyedProcessOperator[int, int, int])(nil)
	_ resumable               = (*keyedProcessOperator[int, int, int])(nil)
	_ taskBound               = (*keyedProcessOperator[int, int, int])(nil)

	_ engine.Snapshotter        = (*sourceOperator[int, connector.Split, int])(nil)
	_ engine.CheckpointNotified = (*sourceOperator[int, connector.Split, int])(nil)
	_ taskBound                 = (*sourceOperator[int, connector.Split, int])(nil)

	_ taskBound = (*processOperator[int, int])(nil)
)

// noLifecycle is embedded by operators that need no open, end or close.
type noLifecycle struct{ info engine.OpInfo }

func (n *noLifecycle) Info() *engine.OpInfo   { return &n.info }
func (n *noLifecycle) Open(engine.Task) error { return nil }
func (n *noLifecycle) EndInput() error        { return nil }
func (n *noLifecycle) Close() error           { return nil }

// mapOperator applies a one-to-one function; the record keeps its timestamp.
type mapOperator[I, O any] struct {
	noLifecycle
	fn  func(I) (O, error)
	out engine.Output[O]
}

func (m *mapOperator[I, O]) Collect(v I, ts int64) error {
	m.info.Records++
	o, err := m.fn(v)
	if err != nil {
		return m.info.Wrap(err)
	}
	return m.out.Collect(o, ts)
}
func (m *mapOperator[I, O]) EmitWatermark(wm int64) error { return m.out.EmitWatermark(wm) }
func (m *mapOperator[I, O]) EmitStatus(idle bool) error   { return m.out.EmitStatus(idle) }

// forwardOperator passes everything on unchanged: the union.
type forwardOperator[T any] struct {
	noLifecycle
	out engine.Output[T]
}

func (f *forwardOperator[T]) Collect(v T, ts int64) error {
	f.info.Records++
	return f.out.Collect(v, ts)
}
func (f *forwardOperator[T]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *forwardOperator[T]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// filterOperator keeps the records its predicate accepts.
type filterOperator[T any] struct {
	noLifecycle
	fn  func(T) (bool, error)
	out engine.Output[T]
}

func (f *filterOperator[T]) Collect(v T, ts int64) error {
	f.info.Records++
	keep, err := f.fn(v)
	if err != nil {
		return f.info.Wrap(err)
	}
	if !keep {
		return nil
	}
	return f.out.Collect(v, ts)
}
func (f *filterOperator[T]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *filterOperator[T]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// Collector receives the records a function emits. It is valid only during
// the call it was passed to.
type Collector[T any] interface {
	Collect(v T)
}

// flatMapOperator applies a one-to-many function. Every emitted record gets
// the input record's timestamp.
type flatMapOperator[I, O any] struct {
	noLifecycle
	fn  func(I, Collector[O]) error
	out engine.Output[O]
	c   timestampedCollector[O]
}

// timestampedCollector forwards to an output with a fixed timestamp and
// remembers the first error, which the operator returns once the user
// function is done (Collect itself cannot return one).
type timestampedCollector[O any] struct {
	out engine.Output[O]
	ts  int64
	err error
}

func (c *timestampedCollector[O]) Collect(v O) {
	if c.err == nil {
		c.err = c.out.Collect(v, c.ts)
	}
}

func (f *flatMapOperator[I, O]) Collect(v I, ts int64) error {
	f.info.Records++
	f.c.out, f.c.ts, f.c.err = f.out, ts, nil
	if err := f.fn(v, &f.c); err != nil {
		return f.info.Wrap(err)
	}
	return f.c.err
}
func (f *flatMapOperator[I, O]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *flatMapOperator[I, O]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// sinkOperator drives one connector.SinkWriter: Write per record,
// Flush(false) at every barrier, Flush(true) at the end of input, Close
// always.
type sinkOperator[T any] struct {
	info   engine.OpInfo
	sink   connector.Sink[T]
	writer connector.SinkWriter[T]
	par    int
	wm     int64
	// t is the task running the operator (bindTask).
	t *task
}

func (s *sinkOperator[T]) Info() *engine.OpInfo { return &s.info }

func (s *sinkOperator[T]) bindTask(t *task) { s.t = t }

func (s *sinkOperator[T]) Open(engine.Task) error {
	t := s.t
	s.wm = connector.NoTimestamp
	w, err := s.sink.CreateWriter(newSinkInitContext(t, s.info, s.par))
	if err != nil {
		return s.info.Wrap(err)
	}
	if w == nil {
		return s.info.Wrap(errNilWriter)
	}
	s.writer = w
	return nil
}

func (s *sinkOperator[T]) Collect(v T, ts int64) error {
	s.info.Records++
	if err := s.writer.Write(v, connector.WriteContext{Timestamp: ts, CurrentWatermark: s.wm}); err != nil {
		return s.info.Wrap(err)
	}
	return nil
}

func (s *sinkOperator[T]) EmitWatermark(wm int64) error {
	s.wm = wm
	return nil
}

func (s *sinkOperator[T]) EmitStatus(bool) error { return nil }

// CommitsOutput makes the operator an engine.OutputCommitter.
func (s *sinkOperator[T]) CommitsOutput() {}

// PrepareSnapshotPreBarrier flushes the writer at a barrier (at-least-once
// for a sink without two-phase commit); it keeps no state. A failed flush
// may have dropped records, so it fails the task (see engine.Preparer).
func (s *sinkOperator[T]) PrepareSnapshotPreBarrier(int64) error {
	return s.info.Wrap(s.writer.Flush(false))
}

func (s *sinkOperator[T]) NotifyCheckpointComplete(id int64) error {
	if l, ok := s.writer.(connector.CheckpointListener); ok {
		return s.info.Wrap(l.NotifyCheckpointComplete(id))
	}
	return nil
}

func (s *sinkOperator[T]) EndInput() error {
	return s.info.Wrap(s.writer.Flush(true))
}

func (s *sinkOperator[T]) Close() error {
	if s.writer == nil {
		return nil
	}
	return s.info.Wrap(s.writer.Close())
}

// sinkInitContext is the connector.SinkInitContext of one sink subtask;
// it also implements connector.CheckpointConfigProvider, so that a sink can
// check its transaction timeout against the checkpoint and restart
// configuration.
type sinkInitContext struct {
	subtask, parallelism, attempt int
	restoredID                    int64
	cp                            connector.CheckpointConfig
	metrics                       *metrics.Group
	ctx                           context.Context
	// committer: the writer runs with its sink's committer (the
	// two-phase sink operator), for connector.CommitterInfo.
	committer bool
	// claim is the epoch of the process's claim on the slot the subtask
	// runs in (a distributed job), 0 otherwise: connector.ClaimInfo.
	claim int64
	// incarnation names the run of the job that numbers claim:
	// connector.ClaimIncarnation.
	incarnation string
	// job and distributed are connector.JobInfo's.
	job         string
	distributed bool
}

func newSinkInitContext(t *task, info engine.OpInfo, par int) sinkInitContext {
	c := sinkInitContext{subtask: info.Subtask, parallelism: par}
	if t == nil {
		return c
	}
	c.metrics = t.metricGroup(info)
	c.ctx = t.ctx
	c.attempt = t.attempt
	c.restoredID = t.restored.ID()
	cp := &t.cfg.cp
	c.cp = connector.CheckpointConfig{
		Interval: cp.interval, Timeout: cp.timeout, MinPause: cp.minPause, TolerableFailures: cp.tolerable,
		MaxRestartDelay: cp.restartStrategy().MaxDelay(),
	}
	if t.cfg.dist != nil {
		c.job, c.distributed = t.cfg.dist.Job, true
	}
	if t.ex != nil {
		if !c.distributed {
			c.job = t.ex.name
		}
		c.cp.Unbounded = unboundedJob(t.ex.g)
		if t.ex.slot != nil {
			c.claim, c.incarnation = t.ex.slot.Epoch, t.ex.slot.Incarnation
			c.cp.Takeover = takeoverOf(t.cfg)
		}
	}
	return c
}

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

func (c sinkInitContext) SubtaskIndex() int  { return c.subtask }
func (c sinkInitContext) Parallelism() int   { return c.parallelism }
func (c sinkInitContext) AttemptNumber() int { return c.attempt }
func (c sinkInitContext) RestoredCheckpointID() (int64, bool) {
	return c.restoredID, c.restoredID > 0
}
func (c sinkInitContext) CheckpointConfig() connector.CheckpointConfig { return c.cp }

// ClaimEpoch makes the context a connector.ClaimInfo.
func (c sinkInitContext) ClaimEpoch() int64 { return c.claim }

// ClaimIncarnation makes the context a connector.ClaimIncarnation.
func (c sinkInitContext) ClaimIncarnation() string { return c.incarnation }

// JobName and DistributedJob make the context a connector.JobInfo.
func (c sinkInitContext) JobName() string      { return c.job }
func (c sinkInitContext) DistributedJob() bool { return c.distributed }

// CommitterRuns makes the context a connector.CommitterInfo.
func (c sinkInitContext) CommitterRuns() bool { return c.committer }

// Context is the task's: cancelled on failover and hard stop, and when the
// task ends.
func (c sinkInitContext) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// MetricGroup makes the context a metrics.GroupProvider.
func (c sinkInitContext) MetricGroup() *metrics.Group { return c.metrics }

var (
	_ connector.CheckpointConfigProvider = sinkInitContext{}
	_ connector.CommitterInfo            = sinkInitContext{}
	_ connector.ClaimInfo                = sinkInitContext{}
	_ connector.ClaimIncarnation         = sinkInitContext{}
	_ metrics.GroupProvider              = sinkInitContext{}
)
