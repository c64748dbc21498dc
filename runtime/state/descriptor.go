package state

import (
	"fmt"
	"iter"
	"sync/atomic"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
)

// State descriptors: keyed state declared once, in a package variable,
// and used from any keyed function's context. A descriptor holds no
// state: on its first use in an operator subtask it declares the state
// there (registered by name with the operator, so checkpoints, restore,
// rescaling and both backends see it like the operator's own states),
// and keeps the subtask's handle in the subtask, found again by
// the descriptor's id. So one descriptor serves every subtask and every
// operator that uses it, each with a state of its own, and may be used
// from any number of goroutines.
//
// Go methods take no type parameters, so a descriptor's methods cannot
// name the stream's key type K: the state they reach is declared over a
// key type the runtime knows, a view of the operator's keyed state with
// the same current key, key groups and entries (canonicalState). For a
// key of a basic kind (a string, an integer, a float or a bool, or a
// named type over one that does not encode itself) that is the basic
// type under K (string for `type word string`); for any other key type
// (a struct, an array, a type that encodes itself) it is any, holding
// K's values, whose checkpoint columns and pebble keys are written in
// K's own encoding (viewBoxed). Either way the checkpointed bytes are
// those a state declared over K itself would have.

// Context is the context a descriptor's state is reached through:
// the *runtime.KeyedContext of a keyed function (runtime.KeyedProcess,
// runtime.KeyedProcessPerSubtask, runtime.KeyedCoProcess), in the call
// of a record or a timer, or in a runtime.KeyedProcessFunction's Open.
// It is implemented by runtime.KeyedContext only.
type Context interface{ scoped }

// scoped is unexported so that Context shows no method of the engine's.
type scoped = keyed.Scoped

func hostOf(ctx Context) keyed.Host { return keyed.HostOf(ctx) }

// descriptorIDs numbers descriptors, for their handles in subtasks.
var descriptorIDs atomic.Int64

// ValueStateDescriptor declares a ValueState: one value of type V per key
// (Flink's ValueStateDescriptor). Make it once, with NewValueState, in a
// package variable or a field of the job, and use it from every keyed
// function and subtask: each operator subtask that uses it has its own
// state, declared on first use. Its methods may be called only during a
// keyed function's call, with that call's context.
type ValueStateDescriptor[V any] struct {
	spec keyed.ValueSpec[V]
}

// NewValueState describes the value state called name, whose values are
// encoded in checkpoints (and held, with the pebble backend) by the serde
// WithSerde gives, by default DefaultSerde[V]: a compact binary encoding
// for strings, byte slices, integers, floats and bools, encoding/gob for
// other types.
//
// The value type is checked here, once: a type the chosen encoding would
// not bring back whole (for gob, DefaultSerde's rule: an
// unexported, func or chan field at any depth, unless the type encodes
// itself; for JSON see JSONSerde) makes NewValueState panic with a
// *TypeError, as regexp.MustCompile panics on a bad expression:
// descriptors live in package variables, so the mistake stops the program
// when it starts, before any job runs. So does an empty name, or a serde
// of another type.
func NewValueState[V any](name string, opts ...Option) *ValueStateDescriptor[V] {
	o := stateOptionsOf(name, opts)
	d := &ValueStateDescriptor[V]{spec: keyed.ValueSpec[V]{ID: int(descriptorIDs.Add(1)) - 1, Name: name,
		Vals: mustCodec[V](name, "value type", o.serde, "WithSerde"), TTL: o.ttl, Dropped: o.dropped}}
	if o.mapKeySerde != nil {
		panic(fmt.Sprintf("state %q: WithMapKeySerde applies to a MapState", name))
	}
	if o.ttl != nil {
		o.ttl.Check(name)
	}
	return d
}

// Name is the state's name.
func (d *ValueStateDescriptor[V]) Name() string { return d.spec.Name }

func (d *ValueStateDescriptor[V]) state(ctx Context) (ValueState[V], *keyed.Common, error) {
	return d.spec.State(hostOf(ctx))
}

// Get returns the current key's value and whether it has one. An error
// (the state could not be declared in this operator, or the pebble
// backend could not read it) also fails the call.
func (d *ValueStateDescriptor[V]) Get(ctx Context) (V, bool, error) {
	s, c, err := d.state(ctx)
	if err != nil {
		var zero V
		return zero, false, err
	}
	v, ok := s.Value()
	if c.Err != nil {
		var zero V
		return zero, false, c.Err
	}
	return v, ok, nil
}

// Set sets the current key's value. An error also fails the call.
func (d *ValueStateDescriptor[V]) Set(ctx Context, v V) error {
	s, c, err := d.state(ctx)
	if err != nil {
		return err
	}
	s.Update(v)
	return c.Err
}

// Clear removes the current key's value. An error also fails the call.
func (d *ValueStateDescriptor[V]) Clear(ctx Context) error {
	s, c, err := d.state(ctx)
	if err != nil {
		return err
	}
	s.Clear()
	return c.Err
}

// Handle returns the subtask's ValueState itself, which follows the
// current key: for a function that reads and writes it many times a call.
func (d *ValueStateDescriptor[V]) Handle(ctx Context) (ValueState[V], error) {
	s, _, err := d.state(ctx)
	return s, err
}

// MapStateDescriptor declares a MapState: a map from UK to UV per key,
// like ValueStateDescriptor.
type MapStateDescriptor[UK comparable, UV any] struct {
	spec keyed.MapSpec[UK, UV]
}

// NewMapState describes the map state called name, as NewValueState:
// WithMapKeySerde chooses the map keys' serde, WithSerde the map values',
// and a type the chosen encoding would not bring back whole makes it
// panic with a *TypeError. With the pebble backend map keys are
// found by their bytes, so a map key serde must give equal keys equal
// bytes.
func NewMapState[UK comparable, UV any](name string, opts ...Option) *MapStateDescriptor[UK, UV] {
	o := stateOptionsOf(name, opts)
	if o.ttl != nil {
		o.ttl.Check(name)
	}
	return &MapStateDescriptor[UK, UV]{spec: keyed.MapSpec[UK, UV]{ID: int(descriptorIDs.Add(1)) - 1, Name: name,
		UKeys: mustCodec[UK](name, "map key type", o.mapKeySerde, "WithMapKeySerde"),
		UVals: mustCodec[UV](name, "map value type", o.serde, "WithSerde"), TTL: o.ttl, Dropped: o.dropped}}
}

// Name is the state's name.
func (d *MapStateDescriptor[UK, UV]) Name() string { return d.spec.Name }

// Handle returns the subtask's MapState, which follows the current key.
// Its methods report no errors; a failed read or write of the pebble
// backend fails the call after the function returns.
func (d *MapStateDescriptor[UK, UV]) Handle(ctx Context) (MapState[UK, UV], error) {
	s, _, err := d.spec.State(hostOf(ctx))
	return s, err
}

// Get returns the current key's entry for k and whether there is one.
func (d *MapStateDescriptor[UK, UV]) Get(ctx Context, k UK) (UV, bool, error) {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		var zero UV
		return zero, false, err
	}
	v, ok := s.Get(k)
	if c.Err != nil {
		var zero UV
		return zero, false, c.Err
	}
	return v, ok, nil
}

// Put sets the current key's entry for k.
func (d *MapStateDescriptor[UK, UV]) Put(ctx Context, k UK, v UV) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Put(k, v)
	return c.Err
}

// Remove removes the current key's entry for k.
func (d *MapStateDescriptor[UK, UV]) Remove(ctx Context, k UK) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Remove(k)
	return c.Err
}

// Clear removes the current key's map.
func (d *MapStateDescriptor[UK, UV]) Clear(ctx Context) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Clear()
	return c.Err
}

// ListState is a list of values per key (Flink's ListState): appended to
// one value at a time, read in the order of the appends.
type ListState[T any] interface {
	// Add appends v to the current key's list.
	Add(v T)
	// AddAll appends vs, in order.
	AddAll(vs []T)
	// Get iterates the current key's list, in the order of its appends.
	// Values added while it runs may or may not be seen.
	Get() iter.Seq[T]
	// Update replaces the current key's list by vs; an empty vs removes
	// it.
	Update(vs []T)
	// Clear removes the current key's list.
	Clear()
}

// ListStateDescriptor declares a ListState, like ValueStateDescriptor.
type ListStateDescriptor[T any] struct {
	spec keyed.ListSpec[T]
}

// NewListState describes the list state called name, as NewValueState:
// WithSerde chooses the elements' serde (default DefaultSerde[T]), and a
// type the chosen encoding would not bring back whole makes it panic
// with a *TypeError. WithTTL gives each element a time to live of
// its own: an element expires ttl after it was added (or, with
// TTLOnReadAndWrite, last read), and Get never returns expired elements.
func NewListState[T any](name string, opts ...Option) *ListStateDescriptor[T] {
	o := stateOptionsOf(name, opts)
	if o.mapKeySerde != nil {
		panic(fmt.Sprintf("state %q: WithMapKeySerde applies to a MapState", name))
	}
	if o.ttl != nil {
		o.ttl.Check(name)
	}
	return &ListStateDescriptor[T]{spec: keyed.ListSpec[T]{ID: int(descriptorIDs.Add(1)) - 1, Name: name,
		Elems: mustCodec[T](name, "element type", o.serde, "WithSerde"), TTL: o.ttl, Dropped: o.dropped}}
}

// Name is the state's name.
func (d *ListStateDescriptor[T]) Name() string { return d.spec.Name }

// Handle returns the subtask's ListState, which follows the current key.
// Its methods report no errors; a failed read or write of the pebble
// backend fails the call after the function returns.
func (d *ListStateDescriptor[T]) Handle(ctx Context) (ListState[T], error) {
	s, _, err := d.spec.State(hostOf(ctx))
	return s, err
}

// Add appends v to the current key's list.
func (d *ListStateDescriptor[T]) Add(ctx Context, v T) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Add(v)
	return c.Err
}

// AddAll appends vs to the current key's list.
func (d *ListStateDescriptor[T]) AddAll(ctx Context, vs []T) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.AddAll(vs)
	return c.Err
}

// Get iterates the current key's list in append order. A read that fails
// during the iteration ends it and fails the call.
func (d *ListStateDescriptor[T]) Get(ctx Context) (iter.Seq[T], error) {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return func(func(T) bool) {}, err
	}
	return s.Get(), c.Err
}

// Update replaces the current key's list by vs.
func (d *ListStateDescriptor[T]) Update(ctx Context, vs []T) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Update(vs)
	return c.Err
}

// Clear removes the current key's list.
func (d *ListStateDescriptor[T]) Clear(ctx Context) error {
	s, c, err := d.spec.State(hostOf(ctx))
	if err != nil {
		return err
	}
	s.Clear()
	return c.Err
}
