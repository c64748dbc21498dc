package sinkop

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// TwoPhaseOperator is the writer and the committer of one subtask of a
// two-phase sink: Flink's Sink V2 SinkWriterOperator and
// CommitterOperator, exactly once with checkpoints on:
//
//   - Each subtask creates its Committer first, hands it every committable
//     of the restored checkpoint when it is a
//     connector.RestoredCommittablesListener, commits the committables
//     restored for this subtask, and only then creates its writer (a Kafka
//     writer fences the producers of older attempts when it starts, which
//     would make their prepared transactions uncommittable).
//   - At barrier N the writer is flushed (Flush(false)) and PrepareCommit(N)
//     hands over the committables of N; they are kept, by checkpoint, in
//     the subtask's state until committed, with the writer's own state
//     (SnapshotState) when the sink hides one. A Flush or PrepareCommit
//     error fails the task, which restarts from the last completed
//     checkpoint: the writer's transaction may be gone, so declining the
//     checkpoint would lose its records.
//   - When checkpoint N completes (its metadata is durable), every
//     committable of checkpoints <= N is committed (the commit rule).
//     RetryLater retries with backoff; SignalFailedWithKnownReason fails the
//     job for good with that error, since the data is lost; an unknown reason
//     or a Commit error fails the job, which then restarts per its strategy.
//     Then a committer that is a connector.CommitterCheckpointListener hears
//     of N, whether anything was due or not.
//   - A bounded job ends with a final checkpoint, so the last transactions
//     commit before Execute returns.
//
// Writer and committer run in the same task, one after the other, as a
// chained writer and committer would. Without checkpoints the writer's
// committables are prepared and committed at the end of input (Flink's
// committer does the same when checkpointing is off); such a sink fed by
// an unbounded source is therefore refused without checkpoints (runtime
// refuses the job graph), since that end never comes.
type TwoPhaseOperator[T, C any] struct {
	info engine.OpInfo
	sink connector.TwoPhaseCommittingSink[T, C]
	par  int
	// sinkType and committable name the user's sink and its committable
	// type in errors.
	sinkType, committable string
	// t is the task running the operator, given to Open: the commit
	// retries and the end of input use it.
	t         engine.Task
	writer    connector.CommittingSinkWriter[T, C]
	committer connector.Committer[C]
	wm        int64

	// pending committables, oldest first; committed once a checkpoint
	// at or after theirs completes.
	pending    []pendingCommittable[C]
	completed  int64 // newest completed checkpoint
	retryTimer *time.Timer
	backoff    time.Duration

	// Set for a sink whose writers keep state (Stateful).
	restoreWriter  func(connector.SinkInitContext, [][]byte) (connector.SinkWriter[T], error)
	snapshotWriter func(connector.SinkWriter[T], int64) ([]byte, error)
}

// NewTwoPhaseOperator returns the operator of subtask info.Subtask of par
// for sink; sinkType and committable name the user's sink and its
// committable type in errors.
func NewTwoPhaseOperator[T, C any](info engine.OpInfo, sink connector.TwoPhaseCommittingSink[T, C], par int, sinkType, committable string) *TwoPhaseOperator[T, C] {
	return &TwoPhaseOperator[T, C]{info: info, sink: sink, par: par, sinkType: sinkType, committable: committable}
}

// Stateful makes the operator checkpoint its writers' state: at each
// barrier, after PrepareCommit, the writer's SnapshotState is checkpointed
// with the committables; a subtask that restores writer state gets its
// writer from RestoreWriter (with the states of the old subtasks mapped to
// it), otherwise from CreateWriter.
func (s *TwoPhaseOperator[T, C]) Stateful(sink connector.StatefulSink[T, any], writerState string) {
	s.restoreWriter = func(ictx connector.SinkInitContext, blobs [][]byte) (connector.SinkWriter[T], error) {
		var states []any
		for _, b := range blobs {
			ws, err := engine.DecodeList(b, sink.WriterStateSerializer())
			if err != nil {
				return nil, fmt.Errorf("restore writer state: %w", err)
			}
			states = append(states, ws...)
		}
		var w connector.SinkWriter[T]
		var err error
		if len(blobs) == 0 {
			w, err = sink.CreateWriter(ictx)
		} else {
			w, err = sink.RestoreWriter(ictx, states)
		}
		if err != nil || w == nil {
			return w, err
		}
		if _, ok := w.(connector.StatefulSinkWriter[T, any]); !ok {
			_ = w.Close()
			return nil, &engine.UnrecoverableError{Err: invalidGraph("the writer %T of sink %s keeps no state: it is not a connector.StatefulSinkWriter of the sink's writer state type %s (SnapshotState), so no checkpoint would hold its state; implement SnapshotState on it",
				w, s.sinkType, writerState)}
		}
		return w, nil
	}
	s.snapshotWriter = func(w connector.SinkWriter[T], id int64) ([]byte, error) {
		sw, ok := w.(connector.StatefulSinkWriter[T, any])
		if !ok {
			return nil, fmt.Errorf("the writer %T of a stateful sink must implement connector.StatefulSinkWriter", w)
		}
		states, err := sw.SnapshotState(id)
		if err != nil {
			return nil, err
		}
		return engine.EncodeList(states, sink.WriterStateSerializer())
	}
}

type pendingCommittable[C any] struct {
	checkpoint int64
	c          C
	retries    int
}

const (
	commitBackoffMin = 10 * time.Millisecond
	commitBackoffMax = time.Second
)

func (s *TwoPhaseOperator[T, C]) Info() *engine.OpInfo { return &s.info }

func (s *TwoPhaseOperator[T, C]) Open(t engine.Task) error {
	s.t = t
	s.wm = connector.NoTimestamp
	ictx := newInitContext(t, s.info, s.par)
	ictx.committer = true
	committer, err := s.sink.CreateCommitter(ictx)
	if err != nil {
		return s.info.Wrap(fmt.Errorf("create committer: %w", err))
	}
	if committer == nil {
		return s.info.Wrap(errors.New("sink returned a nil committer"))
	}
	s.committer = committer
	old, err := t.Restored().Subtasks(s.info.UID)
	if err != nil {
		return s.info.Wrap(err)
	}
	// A savepoint whose job committed its output (and may have reused
	// the committables' transactional ids since) hands over none: they
	// are neither committed again nor spared by a writer's cleanup.
	restoreCommittables := !t.Restored().OutputCommitted()
	if l, ok := committer.(connector.RestoredCommittablesListener[C]); ok && t.Restored().ID() > 0 && restoreCommittables {
		all, err := s.restoredCommittables(old)
		if err != nil {
			return err
		}
		l.RestoredCommittables(all)
	}
	var writerBlobs [][]byte
	for _, blob := range engine.ForSubtask(old, s.info.Subtask, s.par) {
		parts, err := stateformat.SplitFrames(blob, 2)
		if err != nil {
			return s.info.Wrap(fmt.Errorf("restore sink state: %w", err))
		}
		b := parts[0]
		if len(parts[1]) > 0 {
			writerBlobs = append(writerBlobs, parts[1])
		}
		if !restoreCommittables {
			continue
		}
		cs, err := engine.DecodeList(b, s.sink.CommittableSerializer())
		if err != nil {
			return s.info.Wrap(fmt.Errorf("restore committables: %w", err))
		}
		for _, c := range cs {
			s.pending = append(s.pending, pendingCommittable[C]{checkpoint: t.Restored().ID(), c: c})
		}
	}
	// Restored committables belong to a completed checkpoint: commit them
	// before the writer exists, retrying until they are settled.
	if err := s.settleUpTo(t.Restored().ID()); err != nil {
		return err
	}
	s.backoff = 0
	var w connector.SinkWriter[T]
	if s.restoreWriter != nil {
		w, err = s.restoreWriter(ictx, writerBlobs)
	} else {
		w, err = s.sink.CreateWriter(ictx)
	}
	if err != nil {
		return s.info.Wrap(err)
	}
	if w == nil {
		return s.info.Wrap(errNilWriter)
	}
	cw, ok := w.(connector.CommittingSinkWriter[T, C])
	if !ok {
		// The writer's half of the contract, which Go shows only now:
		// run without PrepareCommit, nothing it writes would ever be
		// committed, on any attempt.
		_ = w.Close()
		return s.info.Wrap(&engine.UnrecoverableError{Err: invalidGraph("the writer %T of sink %s prepares no committables: it is not a connector.CommittingSinkWriter of the sink's committable type %s (PrepareCommit), so nothing it writes would ever be committed; implement PrepareCommit on it, or have the sink's TwoPhase return false in a configuration that commits in one phase",
			w, s.sinkType, s.committable)})
	}
	s.writer = cw
	s.retryTimer = t.NewTimer("retry commit", s.retry)
	return nil
}

// restoredCommittables decodes the committables of every old subtask of
// the restored checkpoint, for connector.RestoredCommittablesListener.
func (s *TwoPhaseOperator[T, C]) restoredCommittables(old [][]byte) ([]C, error) {
	var all []C
	for _, blob := range old {
		if blob == nil {
			continue
		}
		parts, err := stateformat.SplitFrames(blob, 2)
		if err != nil {
			return nil, s.info.Wrap(fmt.Errorf("restore sink state: %w", err))
		}
		cs, err := engine.DecodeList(parts[0], s.sink.CommittableSerializer())
		if err != nil {
			return nil, s.info.Wrap(fmt.Errorf("restore committables: %w", err))
		}
		all = append(all, cs...)
	}
	return all, nil
}

func (s *TwoPhaseOperator[T, C]) sleep() error {
	s.backoff = min(max(2*s.backoff, commitBackoffMin), commitBackoffMax)
	tm := time.NewTimer(s.backoff)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-s.t.Context().Done():
		return engine.ErrTaskCancelled
	}
}

func (s *TwoPhaseOperator[T, C]) Collect(v T, ts int64) error {
	s.info.Records++
	return s.info.Wrap(s.writer.Write(v, connector.WriteContext{Timestamp: ts, CurrentWatermark: s.wm}))
}

func (s *TwoPhaseOperator[T, C]) EmitWatermark(wm int64) error {
	s.wm = wm
	return nil
}

func (s *TwoPhaseOperator[T, C]) EmitStatus(bool) error { return nil }

// CommitsOutput makes the operator an engine.OutputCommitter.
func (s *TwoPhaseOperator[T, C]) CommitsOutput() {}

// prepare flushes the writer and takes the committables of checkpoint id.
func (s *TwoPhaseOperator[T, C]) prepare(id int64) error {
	if err := s.writer.Flush(false); err != nil {
		return s.info.Wrap(err)
	}
	cs, err := s.writer.PrepareCommit(id)
	if err != nil {
		return s.info.Wrap(fmt.Errorf("prepare commit (checkpoint %d): %w", id, err))
	}
	for _, c := range cs {
		s.pending = append(s.pending, pendingCommittable[C]{checkpoint: id, c: c})
	}
	return nil
}

// PrepareSnapshotPreBarrier: barrier id. A failure fails the task: the
// writer's transaction may be gone (see engine.Preparer).
func (s *TwoPhaseOperator[T, C]) PrepareSnapshotPreBarrier(id int64) error { return s.prepare(id) }

// SnapshotState: barrier id, after PrepareSnapshotPreBarrier. The state is
// every committable not yet committed, so that a restore commits them
// again (commits are idempotent); a failure here declines the
// checkpoint and loses nothing, since they stay pending for the next one.
// The committables and the writer's state are two frames of one blob
// (stateformat's frames), which Open splits.
func (s *TwoPhaseOperator[T, C]) SnapshotState(id int64) ([]byte, error) {
	cs := make([]C, len(s.pending))
	for i, p := range s.pending {
		cs[i] = p.c
	}
	data, err := engine.EncodeList(cs, s.sink.CommittableSerializer())
	if err != nil {
		return nil, s.info.Wrap(fmt.Errorf("serialize committables: %w", err))
	}
	var ws []byte
	if s.snapshotWriter != nil {
		if ws, err = s.snapshotWriter(s.writer, id); err != nil {
			return nil, s.info.Wrap(fmt.Errorf("snapshot writer: %w", err))
		}
	}
	return stateformat.AppendFrames(data, ws), nil
}

func (s *TwoPhaseOperator[T, C]) NotifyCheckpointComplete(id int64) error {
	s.completed = max(s.completed, id)
	if err := s.commitDue(); err != nil {
		return err
	}
	if l, ok := s.committer.(connector.CommitterCheckpointListener); ok {
		if err := l.CheckpointCompleted(s.t.Context(), id); err != nil {
			return s.info.Wrap(fmt.Errorf("committer: %w", err))
		}
	}
	if l, ok := s.writer.(connector.CheckpointListener); ok {
		if err := l.NotifyCheckpointComplete(id); err != nil {
			return s.info.Wrap(err)
		}
	}
	s.scheduleRetry()
	return nil
}

func (s *TwoPhaseOperator[T, C]) retry() error {
	if err := s.commitDue(); err != nil {
		return err
	}
	s.scheduleRetry()
	if !s.CommitsPending() {
		s.t.CommitsSettled()
	}
	return nil
}

func (s *TwoPhaseOperator[T, C]) CommitsPending() bool { return s.due() > 0 }

func (s *TwoPhaseOperator[T, C]) scheduleRetry() {
	if s.due() == 0 {
		s.backoff = 0
		return
	}
	s.backoff = min(max(2*s.backoff, commitBackoffMin), commitBackoffMax)
	s.retryTimer.Reset(s.backoff)
}

// due counts the committables whose checkpoint completed.
func (s *TwoPhaseOperator[T, C]) due() int {
	n := 0
	for _, p := range s.pending {
		if p.checkpoint <= s.completed {
			n++
		}
	}
	return n
}

// commitDue commits every committable whose checkpoint completed and
// keeps those to retry.
func (s *TwoPhaseOperator[T, C]) commitDue() error {
	var reqs []*commitRequest[C]
	var keep []pendingCommittable[C]
	for _, p := range s.pending {
		if p.checkpoint <= s.completed {
			reqs = append(reqs, &commitRequest[C]{p: p})
		} else {
			keep = append(keep, p)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	creqs := make([]connector.CommitRequest[C], len(reqs))
	for i, r := range reqs {
		creqs[i] = r
	}
	if err := s.committer.Commit(s.t.Context(), creqs); err != nil {
		return s.info.Wrap(fmt.Errorf("commit: %w", err))
	}
	var retry []pendingCommittable[C]
	for _, r := range reqs {
		switch r.outcome {
		case commitKnownFailure:
			return s.info.Wrap(&engine.UnrecoverableError{Err: fmt.Errorf("committing %v failed, its data is lost: %w", r.p.c, r.err)})
		case commitUnknownFailure:
			return s.info.Wrap(fmt.Errorf("committing %v failed: %w", r.p.c, r.err))
		case commitRetry:
			r.p.retries++
			retry = append(retry, r.p)
		}
	}
	s.pending = append(retry, keep...)
	return nil
}

// EndInput flushes the writer. With checkpoints on, the final checkpoint
// prepares and commits the rest; without, it happens here.
func (s *TwoPhaseOperator[T, C]) EndInput() error {
	if err := s.writer.Flush(true); err != nil {
		return s.info.Wrap(err)
	}
	if s.t.JobFacts().CheckpointsEnabled {
		return nil
	}
	if err := s.prepare(math.MaxInt64); err != nil {
		return err
	}
	if err := s.t.EndOfInputCommit(fmt.Sprintf("sink %q (uid %q) subtask %d", s.info.Name, s.info.UID, s.info.Subtask)); err != nil {
		return err
	}
	return s.settleUpTo(math.MaxInt64)
}

// settleUpTo marks every checkpoint up to id completed and commits their
// committables, retrying (with the backoff) until all are settled.
func (s *TwoPhaseOperator[T, C]) settleUpTo(id int64) error {
	s.completed = id
	for s.due() > 0 {
		if err := s.commitDue(); err != nil {
			return err
		}
		if s.due() > 0 {
			if err := s.sleep(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *TwoPhaseOperator[T, C]) Close() error {
	var errs []error
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
	}
	if s.committer != nil {
		errs = append(errs, s.committer.Close())
	}
	return s.info.Wrap(errors.Join(errs...))
}

type commitOutcome uint8

const (
	commitDone commitOutcome = iota
	commitRetry
	commitKnownFailure
	commitUnknownFailure
)

// commitRequest is one committable handed to Committer.Commit. Without a
// signal it counts as committed.
type commitRequest[C any] struct {
	p       pendingCommittable[C]
	outcome commitOutcome
	err     error
}

func (r *commitRequest[C]) Committable() C       { return r.p.c }
func (r *commitRequest[C]) NumberOfRetries() int { return r.p.retries }
func (r *commitRequest[C]) SignalFailedWithKnownReason(err error) {
	r.outcome, r.err = commitKnownFailure, err
}
func (r *commitRequest[C]) SignalFailedWithUnknownReason(err error) {
	r.outcome, r.err = commitUnknownFailure, err
}
func (r *commitRequest[C]) RetryLater() { r.outcome = commitRetry }
func (r *commitRequest[C]) UpdateAndRetryLater(c C) {
	r.p.c, r.outcome = c, commitRetry
}
func (r *commitRequest[C]) SignalAlreadyCommitted() { r.outcome = commitDone }
