// Package sinkop holds the operators that drive a job's sinks: Operator
// runs one connector.SinkWriter (at least once), TwoPhaseOperator the
// writer and the committer of a two-phase sink (exactly once with
// checkpoints on; docs/design/two-phase-sinks.md). Package runtime builds
// them where SinkTo adds a sink (datastream.go, twophase.go) and runs them
// as any chained operator, through runtime/internal/engine's operator
// contract. Of their task they use the restored state, its context, timers
// and metric groups, the job and checkpoint facts a sink's init context
// hands over (engine.JobFacts), the report that commits held back to retry
// settled, and the end-of-input commit of a job without checkpoints.
package sinkop

import (
	"context"
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// The capabilities of the sink operators, checked at compile time: the
// task finds each by type assertion, so a method that stopped matching
// would otherwise just stop being called.
var (
	_ engine.Preparer           = (*Operator[int])(nil)
	_ engine.CheckpointNotified = (*Operator[int])(nil)
	_ engine.OutputCommitter    = (*Operator[int])(nil)

	_ engine.Preparer           = (*TwoPhaseOperator[int, int])(nil)
	_ engine.Snapshotter        = (*TwoPhaseOperator[int, int])(nil)
	_ engine.CheckpointNotified = (*TwoPhaseOperator[int, int])(nil)
	_ engine.Committing         = (*TwoPhaseOperator[int, int])(nil)
	_ engine.OutputCommitter    = (*TwoPhaseOperator[int, int])(nil)
)

var errNilWriter = errors.New("sink returned a nil writer")

// invalidGraph is an error of runtime.ErrInvalidGraph, which a sink's
// writer makes when Go shows only as it is created that it lacks a
// method of its sink's contract.
func invalidGraph(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrInvalidGraph, fmt.Sprintf(format, args...))
}

// Operator drives one connector.SinkWriter: Write per record,
// Flush(false) at every barrier, Flush(true) at the end of input, Close
// always.
type Operator[T any] struct {
	info   engine.OpInfo
	sink   connector.Sink[T]
	writer connector.SinkWriter[T]
	par    int
	wm     int64
}

// NewOperator returns the operator of subtask info.Subtask of par for sink.
func NewOperator[T any](info engine.OpInfo, sink connector.Sink[T], par int) *Operator[T] {
	return &Operator[T]{info: info, sink: sink, par: par}
}

func (s *Operator[T]) Info() *engine.OpInfo { return &s.info }

func (s *Operator[T]) Open(t engine.Task) error {
	s.wm = connector.NoTimestamp
	w, err := s.sink.CreateWriter(newInitContext(t, s.info, s.par))
	if err != nil {
		return s.info.Wrap(err)
	}
	if w == nil {
		return s.info.Wrap(errNilWriter)
	}
	s.writer = w
	return nil
}

func (s *Operator[T]) Collect(v T, ts int64) error {
	s.info.Records++
	if err := s.writer.Write(v, connector.WriteContext{Timestamp: ts, CurrentWatermark: s.wm}); err != nil {
		return s.info.Wrap(err)
	}
	return nil
}

func (s *Operator[T]) EmitWatermark(wm int64) error {
	s.wm = wm
	return nil
}

func (s *Operator[T]) EmitStatus(bool) error { return nil }

// CommitsOutput makes the operator an engine.OutputCommitter.
func (s *Operator[T]) CommitsOutput() {}

// PrepareSnapshotPreBarrier flushes the writer at a barrier (at-least-once
// for a sink without two-phase commit); it keeps no state. A failed flush
// may have dropped records, so it fails the task (see engine.Preparer).
func (s *Operator[T]) PrepareSnapshotPreBarrier(int64) error {
	return s.info.Wrap(s.writer.Flush(false))
}

func (s *Operator[T]) NotifyCheckpointComplete(id int64) error {
	if l, ok := s.writer.(connector.CheckpointListener); ok {
		return s.info.Wrap(l.NotifyCheckpointComplete(id))
	}
	return nil
}

func (s *Operator[T]) EndInput() error {
	return s.info.Wrap(s.writer.Flush(true))
}

func (s *Operator[T]) Close() error {
	if s.writer == nil {
		return nil
	}
	return s.info.Wrap(s.writer.Close())
}

// initContext is the connector.SinkInitContext of one sink subtask; it
// also implements connector.CheckpointConfigProvider, so that a sink can
// check its transaction timeout against the checkpoint and restart
// configuration.
type initContext struct {
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

func newInitContext(t engine.Task, info engine.OpInfo, par int) initContext {
	f := t.JobFacts()
	return initContext{
		subtask: info.Subtask, parallelism: par, attempt: f.Attempt,
		restoredID: t.Restored().ID(), cp: f.Checkpoints,
		metrics: t.MetricGroup(info), ctx: t.Context(),
		claim: f.ClaimEpoch, incarnation: f.ClaimIncarnation,
		job: f.Job, distributed: f.Distributed,
	}
}

func (c initContext) SubtaskIndex() int  { return c.subtask }
func (c initContext) Parallelism() int   { return c.parallelism }
func (c initContext) AttemptNumber() int { return c.attempt }
func (c initContext) RestoredCheckpointID() (int64, bool) {
	return c.restoredID, c.restoredID > 0
}
func (c initContext) CheckpointConfig() connector.CheckpointConfig { return c.cp }

// ClaimEpoch makes the context a connector.ClaimInfo.
func (c initContext) ClaimEpoch() int64 { return c.claim }

// ClaimIncarnation makes the context a connector.ClaimIncarnation.
func (c initContext) ClaimIncarnation() string { return c.incarnation }

// JobName and DistributedJob make the context a connector.JobInfo.
func (c initContext) JobName() string      { return c.job }
func (c initContext) DistributedJob() bool { return c.distributed }

// CommitterRuns makes the context a connector.CommitterInfo.
func (c initContext) CommitterRuns() bool { return c.committer }

// Context is the task's: cancelled on failover and hard stop, and when the
// task ends.
func (c initContext) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// MetricGroup makes the context a metrics.GroupProvider.
func (c initContext) MetricGroup() *metrics.Group { return c.metrics }

var (
	_ connector.CheckpointConfigProvider = initContext{}
	_ connector.CommitterInfo            = initContext{}
	_ connector.ClaimInfo                = initContext{}
	_ connector.ClaimIncarnation         = initContext{}
	_ connector.JobInfo                  = initContext{}
	_ metrics.GroupProvider              = initContext{}
)
