package runtime

import (
	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
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
