package connector

import (
	"context"
	"fmt"
	"reflect"
)

// TwoPhaseCapable is an optional capability of a Sink: a sink that commits
// in two phases in some configurations (a Kafka sink in exactly-once mode)
// says here whether it does in the one it has. runtime.SinkTo asks for it,
// so that one call runs the sink exactly-once when it is configured so and
// as a plain sink otherwise.
//
// Go cannot assert a Sink[T] to TwoPhaseCommittingSink[T, Comm] without
// naming Comm, so the sink hands over itself with its committable type
// hidden: implement TwoPhase with [HideCommittable].
//
//	func (s *MySink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
//		if !s.exactlyOnce {
//			return nil, false
//		}
//		return connector.HideCommittable[T, MyCommittable](s), true
//	}
//
// Hiding changes nothing in checkpoints: the committables are encoded by
// the sink's own CommittableSerializer, byte for byte as a job that names
// the committable type (runtime.SinkToTwoPhase) writes them, so a job may
// move from one call to the other and restore its checkpoints.
type TwoPhaseCapable[T any] interface {
	// TwoPhase returns the sink as a two-phase-committing sink, and false
	// when, as configured, its writes need no committer. It may be called
	// from any goroutine, and the answer must not change.
	TwoPhase() (HiddenTwoPhaseSink[T], bool)
}

// HiddenTwoPhaseSink is a TwoPhaseCommittingSink whose committables are
// held as values of type any; each holds a value of CommittableType. Its
// writers implement CommittingSinkWriter[T, any], its committers
// Committer[any]. Make one with [HideCommittable].
type HiddenTwoPhaseSink[T any] interface {
	TwoPhaseCommittingSink[T, any]

	// CommittableType is the type of the committables the sink hides. The
	// engine records its name in the job's fingerprint, as it does for a
	// sink whose committable type it is given, so that a checkpoint is
	// restored only by a sink with the same committable type.
	CommittableType() reflect.Type
}

// HideCommittable returns sink with its committable type hidden. Writers,
// committers and the serializer of the result pass every call through to
// sink's own, converting committables at the boundary; optional
// capabilities the engine asks of them (CheckpointListener on writers,
// RestoredCommittablesListener on committers) are passed through too.
// Writer state (StatefulSink) is not: a two-phase sink whose writers keep
// state runs with runtime.SinkToStatefulTwoPhase, and runtime.SinkTo
// refuses one that has RestoreWriter and WriterStateSerializer.
func HideCommittable[T, Comm any](sink TwoPhaseCommittingSink[T, Comm]) HiddenTwoPhaseSink[T] {
	return hiddenSink[T, Comm]{inner: sink}
}

type hiddenSink[T, Comm any] struct {
	inner TwoPhaseCommittingSink[T, Comm]
}

func (s hiddenSink[T, Comm]) CommittableType() reflect.Type { return reflect.TypeFor[Comm]() }

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

type hiddenSerializer[Comm any] struct {
	inner VersionedSerializer[Comm]
}

func (s hiddenSerializer[Comm]) Version() int { return s.inner.Version() }

func (s hiddenSerializer[Comm]) Serialize(v any) ([]byte, error) {
	c, ok := v.(Comm)
	if !ok {
		return nil, fmt.Errorf("committable %T is not a %s", v, reflect.TypeFor[Comm]())
	}
	return s.inner.Serialize(c)
}

func (s hiddenSerializer[Comm]) Deserialize(version int, data []byte) (any, error) {
	c, err := s.inner.Deserialize(version, data)
	if err != nil {
		return nil, err
	}
	return c, nil
}
