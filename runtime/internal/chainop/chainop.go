// Package chainop holds the operators a chain runs that keep nothing
// between records and need nothing of their task: map, filter, flatMap,
// forward (a union's and a side output's operator) and the fan-out to
// several consumers of one stream. Package runtime builds them from its
// DataStream API (datastream.go, sideoutput.go, graph.go) and runs them
// through runtime/internal/engine's operator contract; each is a plain
// method call from its predecessor, with no copy of the record.
package chainop

import "github.com/splitflow/splitflow/runtime/internal/engine"

// Base is embedded by operators that need no open, end or close: it is
// their identity and their engine.Lifecycle.
type Base struct{ Op engine.OpInfo }

func (b *Base) Info() *engine.OpInfo   { return &b.Op }
func (b *Base) Open(engine.Task) error { return nil }
func (b *Base) EndInput() error        { return nil }
func (b *Base) Close() error           { return nil }

// Map applies a one-to-one function; the record keeps its timestamp.
type Map[I, O any] struct {
	Base
	fn  func(I) (O, error)
	out engine.Output[O]
}

func NewMap[I, O any](info engine.OpInfo, fn func(I) (O, error), out engine.Output[O]) *Map[I, O] {
	return &Map[I, O]{Base: Base{info}, fn: fn, out: out}
}

func (m *Map[I, O]) Collect(v I, ts int64) error {
	m.Op.Records++
	o, err := m.fn(v)
	if err != nil {
		return m.Op.Wrap(err)
	}
	return m.out.Collect(o, ts)
}
func (m *Map[I, O]) EmitWatermark(wm int64) error { return m.out.EmitWatermark(wm) }
func (m *Map[I, O]) EmitStatus(idle bool) error   { return m.out.EmitStatus(idle) }

// Forward passes everything on unchanged.
type Forward[T any] struct {
	Base
	out engine.Output[T]
}

func NewForward[T any](info engine.OpInfo, out engine.Output[T]) *Forward[T] {
	return &Forward[T]{Base: Base{info}, out: out}
}

func (f *Forward[T]) Collect(v T, ts int64) error {
	f.Op.Records++
	return f.out.Collect(v, ts)
}
func (f *Forward[T]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *Forward[T]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// Filter keeps the records its predicate accepts.
type Filter[T any] struct {
	Base
	fn  func(T) (bool, error)
	out engine.Output[T]
}

func NewFilter[T any](info engine.OpInfo, fn func(T) (bool, error), out engine.Output[T]) *Filter[T] {
	return &Filter[T]{Base: Base{info}, fn: fn, out: out}
}

func (f *Filter[T]) Collect(v T, ts int64) error {
	f.Op.Records++
	keep, err := f.fn(v)
	if err != nil {
		return f.Op.Wrap(err)
	}
	if !keep {
		return nil
	}
	return f.out.Collect(v, ts)
}
func (f *Filter[T]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *Filter[T]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// Collector is what a flatMap function emits to: runtime's Collector has
// the same method, so the function runtime's FlatMap is given takes it.
type Collector[T any] interface {
	Collect(v T)
}

// FlatMap applies a one-to-many function. Every emitted record gets the
// input record's timestamp.
type FlatMap[I, O any] struct {
	Base
	fn  func(I, Collector[O]) error
	out engine.Output[O]
	c   timestamped[O]
}

func NewFlatMap[I, O any](info engine.OpInfo, fn func(I, Collector[O]) error, out engine.Output[O]) *FlatMap[I, O] {
	return &FlatMap[I, O]{Base: Base{info}, fn: fn, out: out}
}

// timestamped forwards to an output with a fixed timestamp and remembers
// the first error, which the operator returns once the user function is
// done (Collect itself cannot return one).
type timestamped[O any] struct {
	out engine.Output[O]
	ts  int64
	err error
}

func (c *timestamped[O]) Collect(v O) {
	if c.err == nil {
		c.err = c.out.Collect(v, c.ts)
	}
}

func (f *FlatMap[I, O]) Collect(v I, ts int64) error {
	f.Op.Records++
	f.c.out, f.c.ts, f.c.err = f.out, ts, nil
	if err := f.fn(v, &f.c); err != nil {
		return f.Op.Wrap(err)
	}
	return f.c.err
}
func (f *FlatMap[I, O]) EmitWatermark(wm int64) error { return f.out.EmitWatermark(wm) }
func (f *FlatMap[I, O]) EmitStatus(idle bool) error   { return f.out.EmitStatus(idle) }

// FanOut sends everything to several outputs: a stream consumed by more
// than one operator. It stops at the first output that fails.
type FanOut[T any] []engine.Output[T]

func (f FanOut[T]) Collect(v T, ts int64) error {
	for _, o := range f {
		if err := o.Collect(v, ts); err != nil {
			return err
		}
	}
	return nil
}

func (f FanOut[T]) EmitWatermark(wm int64) error {
	for _, o := range f {
		if err := o.EmitWatermark(wm); err != nil {
			return err
		}
	}
	return nil
}

func (f FanOut[T]) EmitStatus(idle bool) error {
	for _, o := range f {
		if err := o.EmitStatus(idle); err != nil {
			return err
		}
	}
	return nil
}
