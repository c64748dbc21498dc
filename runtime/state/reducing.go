package state

import "fmt"

// ReducingState and AggregatingState fold every value added into one
// value per key (Flink's ReducingState and AggregatingState). Both are a
// ValueState underneath, of T for a ReducingState and of the accumulator
// for an AggregatingState, and are checkpointed as one: so they work on
// both backends and rescale as value states do, and a state may change
// between a ValueState and a ReducingState of the same type, under its
// name, across versions of a job.

// ReducingState is one value per key, the reduction of every value added.
type ReducingState[T any] interface {
	// Add folds v into the current key's value: v itself for a key with
	// none, reduce(value, v) otherwise.
	Add(v T)
	// Get returns the current key's value and whether it has one.
	Get() (T, bool)
	// Clear removes the current key's value.
	Clear()
}

// AggregatingState is one accumulator per key, every value added folded
// into it by an Aggregator; Get returns its result.
type AggregatingState[IN, OUT any] interface {
	// Add folds v into the current key's accumulator (a new one, by
	// the Aggregator's Create, for a key with none).
	Add(v IN)
	// Get returns the result of the current key's accumulator, and
	// whether it has one.
	Get() (OUT, bool)
	// Clear removes the current key's accumulator.
	Clear()
}

type reducingState[T any] struct {
	v      ValueState[T]
	reduce func(a, b T) T
}

func (s reducingState[T]) Add(v T) {
	if cur, ok := s.v.Value(); ok {
		v = s.reduce(cur, v)
	}
	s.v.Update(v)
}
func (s reducingState[T]) Get() (T, bool) { return s.v.Value() }
func (s reducingState[T]) Clear()         { s.v.Clear() }

type aggregatingState[IN, A, OUT any] struct {
	v   ValueState[A]
	agg Aggregator[IN, A, OUT]
}

func (s aggregatingState[IN, A, OUT]) Add(v IN) {
	acc, ok := s.v.Value()
	if !ok {
		acc = s.agg.Create()
	}
	s.v.Update(s.agg.Add(acc, v))
}

func (s aggregatingState[IN, A, OUT]) Get() (OUT, bool) {
	acc, ok := s.v.Value()
	if !ok {
		var zero OUT
		return zero, false
	}
	return s.agg.Result(acc), true
}

func (s aggregatingState[IN, A, OUT]) Clear() { s.v.Clear() }

// ReducingStateDescriptor declares a ReducingState, like
// ValueStateDescriptor.
type ReducingStateDescriptor[T any] struct {
	v      *ValueStateDescriptor[T]
	reduce func(a, b T) T
}

// NewReducingState describes the reducing state called name, as
// NewValueState (WithSerde chooses the value's serde); a nil reduce
// panics.
func NewReducingState[T any](name string, reduce func(a, b T) T, opts ...Option) *ReducingStateDescriptor[T] {
	if reduce == nil {
		panic(fmt.Sprintf("state %q: NewReducingState needs a reduce function", name))
	}
	return &ReducingStateDescriptor[T]{v: NewValueState[T](name, opts...), reduce: reduce}
}

// Name is the state's name.
func (d *ReducingStateDescriptor[T]) Name() string { return d.v.spec.Name }

// Handle returns the subtask's ReducingState, which follows the current
// key.
func (d *ReducingStateDescriptor[T]) Handle(ctx Context) (ReducingState[T], error) {
	v, err := d.v.Handle(ctx)
	if err != nil {
		return nil, err
	}
	return reducingState[T]{v: v, reduce: d.reduce}, nil
}

// Add folds v into the current key's value.
func (d *ReducingStateDescriptor[T]) Add(ctx Context, v T) error {
	s, c, err := d.v.state(ctx)
	if err != nil {
		return err
	}
	reducingState[T]{v: s, reduce: d.reduce}.Add(v)
	return c.Err
}

// Get returns the current key's value and whether it has one.
func (d *ReducingStateDescriptor[T]) Get(ctx Context) (T, bool, error) { return d.v.Get(ctx) }

// Clear removes the current key's value.
func (d *ReducingStateDescriptor[T]) Clear(ctx Context) error { return d.v.Clear(ctx) }

// AggregatingStateDescriptor declares an AggregatingState, like
// ValueStateDescriptor.
type AggregatingStateDescriptor[IN, A, OUT any] struct {
	v   *ValueStateDescriptor[A]
	agg Aggregator[IN, A, OUT]
}

// NewAggregatingState describes the aggregating state called name, as
// NewValueState (WithSerde chooses the accumulator's serde); an agg
// without Create, Add or Result panics (Merge is not used).
func NewAggregatingState[IN, A, OUT any](name string, agg Aggregator[IN, A, OUT], opts ...Option) *AggregatingStateDescriptor[IN, A, OUT] {
	if m := agg.Missing(); m != nil {
		panic(fmt.Sprintf("state %q: NewAggregatingState needs an Aggregator with Create, Add and Result; it has no %v", name, m))
	}
	return &AggregatingStateDescriptor[IN, A, OUT]{v: NewValueState[A](name, opts...), agg: agg}
}

// Name is the state's name.
func (d *AggregatingStateDescriptor[IN, A, OUT]) Name() string { return d.v.spec.Name }

// Handle returns the subtask's AggregatingState, which follows the
// current key.
func (d *AggregatingStateDescriptor[IN, A, OUT]) Handle(ctx Context) (AggregatingState[IN, OUT], error) {
	v, err := d.v.Handle(ctx)
	if err != nil {
		return nil, err
	}
	return aggregatingState[IN, A, OUT]{v: v, agg: d.agg}, nil
}

// Add folds v into the current key's accumulator.
func (d *AggregatingStateDescriptor[IN, A, OUT]) Add(ctx Context, v IN) error {
	s, c, err := d.v.state(ctx)
	if err != nil {
		return err
	}
	aggregatingState[IN, A, OUT]{v: s, agg: d.agg}.Add(v)
	return c.Err
}

// Get returns the result of the current key's accumulator and whether it
// has one.
func (d *AggregatingStateDescriptor[IN, A, OUT]) Get(ctx Context) (OUT, bool, error) {
	s, c, err := d.v.state(ctx)
	var zero OUT
	if err != nil {
		return zero, false, err
	}
	out, ok := aggregatingState[IN, A, OUT]{v: s, agg: d.agg}.Get()
	if c.Err != nil {
		return zero, false, c.Err
	}
	return out, ok, nil
}

// Clear removes the current key's accumulator.
func (d *AggregatingStateDescriptor[IN, A, OUT]) Clear(ctx Context) error { return d.v.Clear(ctx) }
