package runtime

import (
	"errors"
	"fmt"
	"reflect"
)

// Two-input operators (Flink's KeyedCoProcessFunction, interval join,
// window join) are the keyed operator over a sum type: each input's
// records are tagged into an either[A, B] by a map chained to the
// operator that produces them, and both tagged streams are inputs of one
// keyed operator node, each hash-partitioned by its own key function
// into the same key groups. A task with two inputs is what Union makes,
// so barrier alignment over both, the watermark as the minimum of the
// inputs, checkpoints, both state backends, restore and rescaling are the
// keyed operator's own. See DESIGN.md, "Two-input operators".

// either is a record of the first input (L) or, if Second, of the
// second (R). Its fields are exported so that a window join's list of
// records encodes with gob.
type either[A, B any] struct {
	L      A
	R      B
	Second bool
}

// ConnectedStreams are two keyed streams with the same key type, made by
// Connect, to be processed together by KeyedCoProcess, KeyedCoProcessPerSubtask,
// IntervalJoin or WindowJoin: records of both with equal keys reach the
// same subtask and see the same keyed state and timers.
type ConnectedStreams[K comparable, A, B any] struct {
	first  KeyedStream[K, A]
	second KeyedStream[K, B]
	errs   []error
}

// Connect connects two keyed streams of the same key type (Flink's
// connect on keyed streams). A key's hash must be the same on both
// sides, so both must be keyed with KeyBy (the stable murmur3 hash of
// the key's bytes), or both with KeyByHashed and the same hash function;
// otherwise the job is refused at Execute. The operator that processes
// them aligns checkpoint barriers over both inputs and its watermark is
// the minimum of the two inputs' watermarks (idle inputs do not hold it
// back), as for Union.
func Connect[K comparable, A, B any](first KeyedStream[K, A], second KeyedStream[K, B]) ConnectedStreams[K, A, B] {
	cs := ConnectedStreams[K, A, B]{first: first, second: second}
	for i, side := range []struct {
		keyFn bool
		err   error
	}{{first.keyFn != nil, first.err}, {second.keyFn != nil, second.err}} {
		if !side.keyFn {
			cs.errs = append(cs.errs, errNilFunction(fmt.Sprintf("key selector of input %d", i+1)))
		}
		if side.err != nil {
			cs.errs = append(cs.errs, fmt.Errorf("input %d: %w", i+1, side.err))
		}
	}
	if first.stream.env != second.stream.env {
		cs.errs = append(cs.errs, errors.New("cannot connect streams of different environments"))
	}
	switch {
	case first.hashed != second.hashed:
		cs.errs = append(cs.errs, errors.New("connected streams keyed with different hashes (one with KeyBy, the other with KeyByHashed): a key would go to different subtasks from each side; key both with KeyBy or both with KeyByHashed and one hash function"))
	case first.hashed && first.hash != nil && second.hash != nil &&
		reflect.ValueOf(first.hash).Pointer() != reflect.ValueOf(second.hash).Pointer():
		cs.errs = append(cs.errs, errors.New("connected streams keyed by KeyByHashed with different hash functions: a key would go to different subtasks from each side; pass the same hash function to both"))
	}
	return cs
}

// tagged is the keyed stream of both inputs tagged into either: two
// maps, chained to the inputs' operators (their parallelism, forward
// edges), named after the operator that consumes them.
func (cs ConnectedStreams[K, A, B]) tagged(name string) KeyedStream[K, either[A, B]] {
	env := cs.first.stream.env
	t1 := Map(DataStream[A]{env: env, node: cs.first.stream.node}, func(v A) (either[A, B], error) {
		return either[A, B]{L: v}, nil
	})
	t1.node.name, t1.node.parOf = name+": input 1", cs.first.stream.node
	t2 := Map(DataStream[B]{env: cs.second.stream.env, node: cs.second.stream.node}, func(v B) (either[A, B], error) {
		return either[A, B]{R: v, Second: true}, nil
	})
	t2.node.name, t2.node.parOf = name+": input 2", cs.second.stream.node
	k1, k2 := cs.first.keyFn, cs.second.keyFn
	keyFn := func(e either[A, B]) K {
		if e.Second {
			return k2(e.R)
		}
		return k1(e.L)
	}
	return KeyedStream[K, either[A, B]]{stream: t1, also: []DataStream[either[A, B]]{t2}, keyFn: keyFn, hash: cs.first.hash, hashed: cs.first.hashed}
}

// connected adds the keyed operator of cs named name, running the
// function newFn makes per subtask over the tagged inputs.
func connected[K comparable, A, B, O any](cs ConnectedStreams[K, A, B], name string, newFn func() KeyedProcessFunction[K, either[A, B], O]) DataStream[O] {
	ds := KeyedProcessPerSubtask(cs.tagged(name), newFn)
	ds.node.errs = append(ds.node.errs, cs.errs...)
	ds.node.name = name
	return ds
}

// KeyedCoProcessFunction processes two connected keyed streams with
// shared per-key state and timers (Flink's KeyedCoProcessFunction):
// ProcessElement1 gets the records of Connect's first input,
// ProcessElement2 those of its second, OnTimer the timers either
// registered. All methods run on the subtask's task goroutine, never
// concurrently. A function may also implement
// Open(*KeyedContext[K, O]) error, called once before the first record.
type KeyedCoProcessFunction[K comparable, A, B, O any] interface {
	ProcessElement1(ctx *KeyedContext[K, O], value A) error
	ProcessElement2(ctx *KeyedContext[K, O], value B) error
	OnTimer(ctx *KeyedContext[K, O], timer Timer) error
}

// KeyedCoProcessFuncs adapts plain functions to KeyedCoProcessFunction.
// Element1 and Element2 are required; Setup (called by Open, once per
// subtask) and Timer may be nil.
type KeyedCoProcessFuncs[K comparable, A, B, O any] struct {
	Setup    func(ctx *KeyedContext[K, O]) error
	Element1 func(ctx *KeyedContext[K, O], value A) error
	Element2 func(ctx *KeyedContext[K, O], value B) error
	Timer    func(ctx *KeyedContext[K, O], timer Timer) error
}

// Open calls Setup, if any.
func (f KeyedCoProcessFuncs[K, A, B, O]) Open(ctx *KeyedContext[K, O]) error {
	if f.Setup == nil {
		return nil
	}
	return f.Setup(ctx)
}

func (f KeyedCoProcessFuncs[K, A, B, O]) ProcessElement1(ctx *KeyedContext[K, O], v A) error {
	return f.Element1(ctx, v)
}

func (f KeyedCoProcessFuncs[K, A, B, O]) ProcessElement2(ctx *KeyedContext[K, O], v B) error {
	return f.Element2(ctx, v)
}

func (f KeyedCoProcessFuncs[K, A, B, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	if f.Timer == nil {
		return nil
	}
	return f.Timer(ctx, t)
}

// coProcessFn runs a KeyedCoProcessFunction as the keyed operator's
// function over the tagged inputs.
type coProcessFn[K comparable, A, B, O any] struct {
	f KeyedCoProcessFunction[K, A, B, O]
}

func (c coProcessFn[K, A, B, O]) Open(ctx *KeyedContext[K, O]) error {
	if o, ok := c.f.(keyedOpener[K, O]); ok {
		return o.Open(ctx)
	}
	return nil
}

func (c coProcessFn[K, A, B, O]) ProcessElement(ctx *KeyedContext[K, O], e either[A, B]) error {
	if e.Second {
		return c.f.ProcessElement2(ctx, e.R)
	}
	return c.f.ProcessElement1(ctx, e.L)
}

func (c coProcessFn[K, A, B, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	return c.f.OnTimer(ctx, t)
}

// handlesTimers: KeyedCoProcess with OnTimer says it handles timers, as
// KeyedProcess with OnTimer does (handlesTimers in process.go).
func (c coProcessFn[K, A, B, O]) handlesTimers() bool {
	f, ok := c.f.(KeyedCoProcessFuncs[K, A, B, O])
	return ok && f.Timer != nil
}

// KeyedCoProcess runs fn1 on every record of the first connected stream and
// fn2 on every record of the second, with the record's key current
// (ctx.Key()), per-key state reached through state descriptors
// (state.NewValueState, NewMapState, NewListState, NewReducingState,
// NewAggregatingState), and event- and processing-time timers that fire the function
// OnTimer gives. State and timers belong to the key, not to the side: a
// value fn1 stores, fn2 reads for the same key. Like KeyedProcess's function,
// fn1 and fn2 are shared by every subtask and must keep nothing of their
// own between calls; a function with fields needs KeyedCoProcessPerSubtask.
//
// The operator's default name (and so its default UID) is "CoProcess",
// not the function's name: default UIDs are written in checkpoints; the
// two maps that tag the inputs run chained to the operators that
// produce them.
func KeyedCoProcess[K comparable, A, B, O any](cs ConnectedStreams[K, A, B], fn1 func(ctx *KeyedContext[K, O], value A) error, fn2 func(ctx *KeyedContext[K, O], value B) error, opts ...KeyedProcessOption[K, O]) DataStream[O] {
	var o processOptions[K, O]
	for _, opt := range opts {
		if opt != nil {
			opt.applyProcess(&o)
		}
	}
	funcs := KeyedCoProcessFuncs[K, A, B, O]{Element1: fn1, Element2: fn2, Timer: o.onTimer}
	ds := KeyedCoProcessPerSubtask(cs, func() KeyedCoProcessFunction[K, A, B, O] { return funcs })
	if fn1 == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("process function of input 1"))
	}
	if fn2 == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("process function of input 2"))
	}
	for _, opt := range opts {
		if opt == nil {
			ds.node.errs = append(ds.node.errs, errNilFunction("process option"))
		}
	}
	return ds
}

// KeyedCoProcessPerSubtask runs a KeyedCoProcessFunction made per subtask:
// newFn is called once by each subtask, on its task goroutine, before
// Open, so the function may keep fields of its own (state handles,
// counters) that no other subtask sees.
func KeyedCoProcessPerSubtask[K comparable, A, B, O any](cs ConnectedStreams[K, A, B], newFn func() KeyedCoProcessFunction[K, A, B, O]) DataStream[O] {
	ds := connected(cs, "CoProcess", func() KeyedProcessFunction[K, either[A, B], O] {
		if newFn == nil {
			return nil
		}
		f := newFn()
		if f == nil {
			return nil // the operator fails to open, naming the factory
		}
		return coProcessFn[K, A, B, O]{f: f}
	})
	if newFn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("co-process function factory"))
	}
	return ds
}
