package runtime

import "fmt"

// KV is a key with a value: what Count emits, a key with its running
// count.
type KV[K, V any] struct {
	Key   K
	Value V
}

// AggregateFunction folds the records of a key into an accumulator and
// makes a result of it (Flink's AggregateFunction without merge). Its
// methods run on the task goroutine of the subtask that owns the key,
// never concurrently, and must not keep the accumulator between calls:
// it lives in keyed state, checkpointed and restored with the job.
type AggregateFunction[T, A, R any] interface {
	// CreateAccumulator returns the accumulator of a key that has none.
	CreateAccumulator() A
	// Add folds v into acc and returns the new accumulator.
	Add(v T, acc A) A
	// GetResult is the result of acc, emitted after every record.
	GetResult(acc A) R
}

// AggregateFuncs adapts plain functions to AggregateFunction; all three
// are required.
type AggregateFuncs[T, A, R any] struct {
	Create     func() A
	Accumulate func(v T, acc A) A
	Result     func(acc A) R
}

func (f AggregateFuncs[T, A, R]) CreateAccumulator() A { return f.Create() }
func (f AggregateFuncs[T, A, R]) Add(v T, acc A) A     { return f.Accumulate(v, acc) }
func (f AggregateFuncs[T, A, R]) GetResult(acc A) R    { return f.Result(acc) }

// Reduce emits, for every record, the running reduction of its key's
// records so far: the first record itself, then fn(previous, record)
// (Flink's KeyedStream#reduce, without windows). The reduction is keyed
// state, so T must follow DefaultSerde's rule; it is checkpointed and
// restored on either state backend, also at another parallelism. Records
// keep their timestamps.
func Reduce[K comparable, T any](ks KeyedStream[K, T], fn func(a, b T) T) DataStream[T] {
	ds := rolling(ks, "Reduce", "reduce", func(acc T, has bool, v T) (T, T) {
		if has {
			v = fn(acc, v)
		}
		return v, v
	})
	if fn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("reduce function"))
	}
	return ds
}

// Aggregate emits, for every record, its key and agg's result of the
// key's accumulator after adding the record (Kafka Streams' aggregate of a
// grouped stream, whose table keeps the key; Flink keeps
// AggregateFunction for windows). The accumulator is keyed state, so A
// must follow DefaultSerde's rule; it is checkpointed and restored on
// either state backend, also at another parallelism.
func Aggregate[K comparable, T, A, R any](ks KeyedStream[K, T], agg AggregateFunction[T, A, R]) DataStream[KV[K, R]] {
	var key func(T) K = ks.keyFn
	ds := rolling(ks, "Aggregate", "aggregate", func(acc A, has bool, v T) (A, KV[K, R]) {
		if !has {
			acc = agg.CreateAccumulator()
		}
		acc = agg.Add(v, acc)
		return acc, KV[K, R]{Key: key(v), Value: agg.GetResult(acc)}
	})
	if agg == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("aggregate function"))
	} else if f, ok := agg.(AggregateFuncs[T, A, R]); ok && (f.Create == nil || f.Accumulate == nil || f.Result == nil) {
		ds.node.errs = append(ds.node.errs, fmt.Errorf("AggregateFuncs needs Create, Accumulate and Result"))
	}
	return ds
}

// Count emits, for every record, its key and the number of records of the
// key so far, 1 for the first. The count is keyed state (an int64 per
// key), checkpointed and restored like any.
func Count[K comparable, T any](ks KeyedStream[K, T]) DataStream[KV[K, int64]] {
	var key func(T) K = ks.keyFn
	return rolling(ks, "Count", "count", func(n int64, _ bool, v T) (int64, KV[K, int64]) {
		n++
		return n, KV[K, int64]{Key: key(v), Value: n}
	})
}

// rolling is a keyed operator that keeps one value per key, in the value
// state called state: step gets the key's value (has: whether it has one)
// and the record, and returns the new value and the record to emit. The
// node is a KeyedProcess (its state signature and restore rules are those
// of a keyed process function) named after the aggregation. Count's state
// is "count", an int64 per key: the state of a KeyedProcess that counted into
// NewValueState[int64]("count") restores into Count under the same UID.
func rolling[K comparable, T, A, O any](ks KeyedStream[K, T], name, state string, step func(acc A, has bool, v T) (A, O)) DataStream[O] {
	ds := KeyedProcessPerSubtask(ks, func() KeyedProcessFunction[K, T, O] { return &rollingFunc[K, T, A, O]{name: state, step: step} })
	ds.node.name = name
	return ds
}

// rollingFunc is the function of rolling, one per subtask: it keeps the
// handle of its state.
type rollingFunc[K comparable, T, A, O any] struct {
	name  string
	step  func(acc A, has bool, v T) (A, O)
	state ValueState[A]
}

func (f *rollingFunc[K, T, A, O]) Open(ctx *KeyedContext[K, O]) error {
	var err error
	f.state, err = declareValueTTL(ctx.op, f.name, codecFor[A](), nil)
	return err
}

func (f *rollingFunc[K, T, A, O]) ProcessElement(ctx *KeyedContext[K, O], v T) error {
	acc, has := f.state.Value()
	acc, out := f.step(acc, has, v)
	f.state.Update(acc)
	ctx.Collect(out)
	return nil
}

func (f *rollingFunc[K, T, A, O]) OnTimer(*KeyedContext[K, O], Timer) error { return nil }
