package runtime

// KV is a key with a value: what Count emits, a key with its running
// count.
type KV[K, V any] struct {
	Key   K
	Value V
}

// Aggregator folds records into an accumulator of type A and turns it
// into a result of type R (Flink's AggregateFunction): the one spelling of
// an aggregation, for a keyed stream's rolling Aggregate, a window's
// WindowAggregate and NewAggregatingState. Create, Add and Result are
// required; Merge, which combines the accumulators of two sessions that a
// record joins, is needed by Session windows only and unused elsewhere.
// The functions run on the task goroutine of the subtask that owns the
// key, never concurrently, and must not keep the accumulator between
// calls: it lives in keyed state, checkpointed in the encoding its serde
// gives A (DefaultSerde unless chosen). Add may return its argument
// changed or a new value; Merge may return either of its arguments
// changed.
type Aggregator[T, A, R any] struct {
	Create func() A
	Add    func(acc A, v T) A
	Merge  func(a, b A) A
	Result func(acc A) R
}

// missing names the required functions agg lacks, nil if none.
func (agg Aggregator[T, A, R]) missing() []string {
	var m []string
	for _, f := range []struct {
		name string
		nil  bool
	}{{"Create", agg.Create == nil}, {"Add", agg.Add == nil}, {"Result", agg.Result == nil}} {
		if f.nil {
			m = append(m, f.name)
		}
	}
	return m
}

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
// grouped stream, whose table keeps the key; Flink keeps its
// AggregateFunction for windows). The accumulator is keyed state, so A
// must follow DefaultSerde's rule; it is checkpointed and restored on
// either state backend, also at another parallelism.
func Aggregate[K comparable, T, A, R any](ks KeyedStream[K, T], agg Aggregator[T, A, R]) DataStream[KV[K, R]] {
	var key func(T) K = ks.keyFn
	ds := rolling(ks, "Aggregate", "aggregate", func(acc A, has bool, v T) (A, KV[K, R]) {
		if !has {
			acc = agg.Create()
		}
		acc = agg.Add(acc, v)
		return acc, KV[K, R]{Key: key(v), Value: agg.Result(acc)}
	})
	for _, name := range agg.missing() {
		ds.node.errs = append(ds.node.errs, errNilFunction("aggregator's "+name))
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
