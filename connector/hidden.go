package connector

import (
	"context"
	"fmt"
	"reflect"
)

// TwoPhaseCapable is how a sink tells the engine that it commits in two
// phases: runtime.SinkTo, the one way to add a sink to a job, asks every
// sink for it. A sink that commits in two phases in some configurations
// only (a Kafka sink in exactly-once mode) says here whether it does in
// the one it has; SinkTo then runs it with its committer, or as a plain
// sink.
//
// Go cannot assert a Sink[T] to TwoPhaseCommittingSink[T, Comm] without
// naming Comm, so the sink hands over itself with its committable type
// (and its writer state type) hidden: implement TwoPhase with
// [HideCommittable], or [HideCommittableAndWriterState] for a
// [StatefulTwoPhaseSink].
//
//	func (s *MySink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
//		if !s.exactlyOnce {
//			return nil, false
//		}
//		return connector.HideCommittable[T, MyCommittable](s), true
//	}
//
// A sink that has CreateCommitter or CommittableSerializer and is not
// TwoPhaseCapable is refused by runtime.SinkTo: its committer would never
// run. So is one whose writers keep state (RestoreWriter,
// WriterStateSerializer) unless its TwoPhase hides that state too.
//
// Hiding changes nothing in checkpoints: the committables and writer
// states are encoded by the sink's own serializers, and the engine names
// the hidden types in the job's fingerprint as it names types it is given.
type TwoPhaseCapable[T any] interface {
	// TwoPhase returns the sink as a two-phase-committing sink, and false
	// when, as configured, its writes need no committer. It may be called
	// from any goroutine, and the answer must not change.
	TwoPhase() (HiddenTwoPhaseSink[T], bool)
}

// HiddenTwoPhaseSink is a TwoPhaseCommittingSink whose committables are
// held as values of type any; each holds a value of CommittableType. Its
// writers implement CommittingSinkWriter[T, any], its committers
// Committer[any]. When WriterStateType is not nil it is also a
// StatefulSink[T, any], whose writer states each hold a value of that
// type, and its writers are StatefulSinkWriter[T, any] too. Make one with
// [HideCommittable] or [HideCommittableAndWriterState].
type HiddenTwoPhaseSink[T any] interface {
	TwoPhaseCommittingSink[T, any]

	// CommittableType is the type of the committables the sink hides. The
	// engine records its name in the job's fingerprint, so that a
	// checkpoint is restored only by a sink with the same committable
	// type.
	CommittableType() reflect.Type

	// WriterStateType is the type of the writer states the sink hides, or
	// nil when its writers keep none. The engine records its name in the
	// fingerprint too.
	WriterStateType() reflect.Type
}

// HideCommittable returns sink with its committable type hidden. Writers,
// committers and the serializer of the result pass every call through to
// sink's own, converting committables at the boundary; optional
// capabilities the engine asks of them (CheckpointListener on writers,
// RestoredCommittablesListener and CommitterCheckpointListener on
// committers) are passed through too.
// Writer state is not: a sink whose writers keep state hides it with
// [HideCommittableAndWriterState].
func HideCommittable[T, Comm any](sink TwoPhaseCommittingSink[T, Comm]) HiddenTwoPhaseSink[T] {
	return hiddenSink[T, Comm]{inner: sink}
}

// HideCommittableAndWriterState is [HideCommittable] for a sink whose
// writers keep state: the result is also a StatefulSink[T, any], whose
// RestoreWriter hands sink's RestoreWriter the states as W, and whose
// writers' SnapshotState passes the writer's states on.
func HideCommittableAndWriterState[T, Comm, W any](sink StatefulTwoPhaseSink[T, Comm, W]) HiddenTwoPhaseSink[T] {
	return hiddenStatefulSink[T, Comm, W]{hiddenSink: hiddenSink[T, Comm]{inner: sink}, stateful: sink}
}

type hiddenSink[T, Comm any] struct {
	inner TwoPhaseCommittingSink[T, Comm]
}

func (s hiddenSink[T, Comm]) CommittableType() reflect.Type { return reflect.TypeFor[Comm]() }

func (s hiddenSink[T, Comm]) WriterStateType() reflect.Type { return nil }

// CreateWriter wraps the inner writer when it is a committing one. One that
// is not is returned as it is, so that the engine reports the inner type
// as not implementing CommittingSinkWriter.
func (s hiddenSink[T, Comm]) CreateWriter(ctx SinkInitContext) (SinkWriter[T], error) {
	w, err := s.inner.CreateWriter(ctx)
	if err != nil || w == nil {
		return w, err
	}
	cw, ok := w.(CommittingSinkWriter[T, Comm])
	if !ok {
		return w, nil
	}
	return hiddenWriter[T, Comm]{cw}, nil
}

func (s hiddenSink[T, Comm]) CreateCommitter(ctx SinkInitContext) (Committer[any], error) {
	c, err := s.inner.CreateCommitter(ctx)
	if err != nil || c == nil {
		return nil, err
	}
	if l, ok := c.(RestoredCommittablesListener[Comm]); ok {
		return hiddenListeningCommitter[Comm]{hiddenCommitter[Comm]{c}, l}, nil
	}
	return hiddenCommitter[Comm]{c}, nil
}

func (s hiddenSink[T, Comm]) CommittableSerializer() VersionedSerializer[any] {
	ser := s.inner.CommittableSerializer()
	if ser == nil {
		return nil
	}
	return hiddenSerializer[Comm]{ser}
}

// hiddenStatefulSink is a hidden sink whose writers keep state of type W.
type hiddenStatefulSink[T, Comm, W any] struct {
	hiddenSink[T, Comm]
	stateful StatefulSink[T, W]
}

func (s hiddenStatefulSink[T, Comm, W]) WriterStateType() reflect.Type { return reflect.TypeFor[W]() }

// CreateWriter wraps the inner writer when it is both a committing and a
// stateful one. One that is not is returned as it is, so that the engine
// reports the inner type and what it lacks.
func (s hiddenStatefulSink[T, Comm, W]) CreateWriter(ctx SinkInitContext) (SinkWriter[T], error) {
	w, err := s.inner.CreateWriter(ctx)
	if err != nil || w == nil {
		return w, err
	}
	if hw, ok := hideStatefulWriter[T, Comm, W](w); ok {
		return hw, nil
	}
	return w, nil
}

func (s hiddenStatefulSink[T, Comm, W]) RestoreWriter(ctx SinkInitContext, states []any) (StatefulSinkWriter[T, any], error) {
	ws := make([]W, 0, len(states))
	for _, a := range states {
		st, ok := a.(W)
		if !ok {
			// Only the hidden serializer makes states, so this is a bug
			// of the engine, not of the sink.
			return nil, fmt.Errorf("writer state %T is not a %s", a, reflect.TypeFor[W]())
		}
		ws = append(ws, st)
	}
	w, err := s.stateful.RestoreWriter(ctx, ws)
	if err != nil || w == nil {
		return nil, err
	}
	hw, ok := hideStatefulWriter[T, Comm, W](w)
	if !ok {
		_ = w.Close()
		return nil, fmt.Errorf("the writer %T restored by sink %T is not a connector.CommittingSinkWriter[%s, %s] (PrepareCommit): nothing it writes would be committed; implement PrepareCommit on it: %w",
			w, s.inner, reflect.TypeFor[T](), reflect.TypeFor[Comm](), ErrInvalidConfiguration)
	}
	return hw, nil
}

func (s hiddenStatefulSink[T, Comm, W]) WriterStateSerializer() VersionedSerializer[any] {
	ser := s.stateful.WriterStateSerializer()
	if ser == nil {
		return nil
	}
	return hiddenSerializer[W]{ser}
}

// hideStatefulWriter hides a writer that both prepares committables and
// keeps state, and reports false for one that does not.
func hideStatefulWriter[T, Comm, W any](w SinkWriter[T]) (hiddenStatefulWriter[T, Comm, W], bool) {
	cw, ok := w.(CommittingSinkWriter[T, Comm])
	if !ok {
		return hiddenStatefulWriter[T, Comm, W]{}, false
	}
	sw, ok := w.(StatefulSinkWriter[T, W])
	if !ok {
		return hiddenStatefulWriter[T, Comm, W]{}, false
	}
	return hiddenStatefulWriter[T, Comm, W]{hiddenWriter: hiddenWriter[T, Comm]{cw}, state: sw}, true
}

type hiddenStatefulWriter[T, Comm, W any] struct {
	hiddenWriter[T, Comm]
	state StatefulSinkWriter[T, W]
}

func (w hiddenStatefulWriter[T, Comm, W]) SnapshotState(checkpointID int64) ([]any, error) {
	ws, err := w.state.SnapshotState(checkpointID)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(ws))
	for i, s := range ws {
		out[i] = s
	}
	return out, nil
}

type hiddenWriter[T, Comm any] struct {
	inner CommittingSinkWriter[T, Comm]
}

func (w hiddenWriter[T, Comm]) Write(element T, ctx WriteContext) error {
	return w.inner.Write(element, ctx)
}
func (w hiddenWriter[T, Comm]) Flush(endOfInput bool) error { return w.inner.Flush(endOfInput) }
func (w hiddenWriter[T, Comm]) Close() error                { return w.inner.Close() }

func (w hiddenWriter[T, Comm]) PrepareCommit(checkpointID int64) ([]any, error) {
	cs, err := w.inner.PrepareCommit(checkpointID)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out, nil
}

// NotifyCheckpointComplete passes the notification on to a writer that
// listens; to one that does not, it is nothing.
func (w hiddenWriter[T, Comm]) NotifyCheckpointComplete(checkpointID int64) error {
	if l, ok := w.inner.(CheckpointListener); ok {
		return l.NotifyCheckpointComplete(checkpointID)
	}
	return nil
}

type hiddenCommitter[Comm any] struct {
	inner Committer[Comm]
}

func (c hiddenCommitter[Comm]) Commit(ctx context.Context, requests []CommitRequest[any]) error {
	reqs := make([]CommitRequest[Comm], 0, len(requests))
	for _, r := range requests {
		comm, ok := r.Committable().(Comm)
		if !ok {
			// Only the hidden writer and serializer make committables,
			// so this is a bug of the engine, not of the sink.
			r.SignalFailedWithUnknownReason(fmt.Errorf("committable %T is not a %s", r.Committable(), reflect.TypeFor[Comm]()))
			continue
		}
		reqs = append(reqs, hiddenRequest[Comm]{CommitRequest: r, c: comm})
	}
	if len(reqs) == 0 {
		return nil
	}
	return c.inner.Commit(ctx, reqs)
}

func (c hiddenCommitter[Comm]) Close() error { return c.inner.Close() }

// CheckpointCompleted passes the notification on to an inner committer
// that listens for it. Every hidden committer has it: a call the inner one
// does not want costs nothing.
func (c hiddenCommitter[Comm]) CheckpointCompleted(ctx context.Context, checkpointID int64) error {
	if l, ok := c.inner.(CommitterCheckpointListener); ok {
		return l.CheckpointCompleted(ctx, checkpointID)
	}
	return nil
}

// hiddenListeningCommitter is the hidden committer of a committer that
// listens for restored committables. A separate type, so that the engine
// decodes the committables of the whole checkpoint only for a committer
// that wants them, as it does for the unhidden one.
type hiddenListeningCommitter[Comm any] struct {
	hiddenCommitter[Comm]
	l RestoredCommittablesListener[Comm]
}

func (c hiddenListeningCommitter[Comm]) RestoredCommittables(all []any) {
	var cs []Comm
	for _, a := range all {
		if comm, ok := a.(Comm); ok {
			cs = append(cs, comm)
		}
	}
	c.l.RestoredCommittables(cs)
}

// hiddenRequest is a request of the engine seen with its committable's
// type.
type hiddenRequest[Comm any] struct {
	CommitRequest[any]
	c Comm
}

func (r hiddenRequest[Comm]) Committable() Comm { return r.c }

func (r hiddenRequest[Comm]) UpdateAndRetryLater(committable Comm) {
	r.CommitRequest.UpdateAndRetryLater(committable)
}

// hiddenSerializer is the serializer of hidden committables or writer
// states of type V.
type hiddenSerializer[V any] struct {
	inner VersionedSerializer[V]
}

func (s hiddenSerializer[V]) Version() int { return s.inner.Version() }

func (s hiddenSerializer[V]) Serialize(v any) ([]byte, error) {
	c, ok := v.(V)
	if !ok {
		return nil, fmt.Errorf("value %T is not a %s", v, reflect.TypeFor[V]())
	}
	return s.inner.Serialize(c)
}

func (s hiddenSerializer[V]) Deserialize(version int, data []byte) (any, error) {
	c, err := s.inner.Deserialize(version, data)
	if err != nil {
		return nil, err
	}
	return c, nil
}
