package runtime

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/state"
)

// KV is a key with a value: what Count emits, a key with its running
// count.
type KV[K, V any] struct {
	Key   K
	Value V
}

// Reduce emits, for every record, the running reduction of its key's
// records so far: the first record itself, then fn(previous, record)
// (Flink's KeyedStream#reduce, without windows). The reduction is keyed
// state, so T must follow state.DefaultSerde's rule; it is checkpointed and
// restored on either state backend, also at another parallelism. Records
// keep their timestamps. With EmitLatest it emits each changed key's
// latest reduction once per checkpoint instead.
func Reduce[K comparable, T any](ks KeyedStream[K, T], fn func(a, b T) T, opts ...RollingOption) DataStream[T] {
	ds := rolling(ks, "Reduce", "reduce", opts, func(acc T, has bool, v T) T {
		if has {
			v = fn(acc, v)
		}
		return v
	}, func(_ K, acc T) T { return acc })
	if fn == nil {
		ds.node.errs = append(ds.node.errs, errNilFunction("reduce function"))
	}
	return ds
}

// Aggregate emits, for every record, its key and agg's result of the
// key's accumulator after adding the record (Kafka Streams' aggregate of a
// grouped stream, whose table keeps the key; Flink keeps its
// AggregateFunction for windows). The accumulator is keyed state, so A
// must follow state.DefaultSerde's rule; it is checkpointed and restored on
// either state backend, also at another parallelism. With EmitLatest it
// emits each changed key's latest result once per checkpoint instead.
func Aggregate[K comparable, T, A, R any](ks KeyedStream[K, T], agg state.Aggregator[T, A, R], opts ...RollingOption) DataStream[KV[K, R]] {
	ds := rolling(ks, "Aggregate", "aggregate", opts, func(acc A, has bool, v T) A {
		if !has {
			acc = agg.Create()
		}
		return agg.Add(acc, v)
	}, func(k K, acc A) KV[K, R] { return KV[K, R]{Key: k, Value: agg.Result(acc)} })
	for _, name := range agg.Missing() {
		ds.node.errs = append(ds.node.errs, errNilFunction("aggregator's "+name))
	}
	return ds
}

// Count emits, for every record, its key and the number of records of the
// key so far, 1 for the first. The count is keyed state (an int64 per
// key), checkpointed and restored like any. With EmitLatest it emits each
// changed key's count once per checkpoint instead: the word count's
// table of latest counts, not its changelog.
func Count[K comparable, T any](ks KeyedStream[K, T], opts ...RollingOption) DataStream[KV[K, int64]] {
	return rolling(ks, "Count", "count", opts, func(n int64, _ bool, _ T) int64 {
		return n + 1
	}, func(k K, n int64) KV[K, int64] { return KV[K, int64]{Key: k, Value: n} })
}

// RollingOption configures Count, Reduce and Aggregate.
type RollingOption interface{ applyRolling(*rollingOptions) }

type rollingOptions struct {
	latest *latestConfig // EmitLatest; nil: emit every update
}

type rollingOptionFunc func(*rollingOptions)

func (f rollingOptionFunc) applyRolling(o *rollingOptions) { f(o) }

// EmitLatest makes a rolling aggregation emit each key's latest value
// once per checkpoint rather than after every record (Kafka Streams'
// record cache, Flink's mini-batch aggregation): a key changed since the
// last emission is remembered with its latest value (the one keyed state
// holds), which is emitted before the next checkpoint barrier leaves the
// operator, at the end of input, and early when a bound given by opts is
// reached. Without opts the bounds are MaxPendingKeys(100_000) and no
// time bound; MaxPendingKeys bounds the values held too.
//
// Exactly-once holds as without it: what a checkpoint's barrier follows
// downstream includes every change the checkpoint's state holds, so a
// two-phase sink commits, with checkpoint N, each changed key's value as
// of N. A read_committed consumer sees, for a count, strictly increasing
// counts per key ending at the exact total, though not every step; after
// a failure, output for a key never goes back and never skips a committed
// value. The pending keys are not checkpointed: they are emitted before
// every barrier, so at every checkpoint there are none.
//
// The number of pending keys is the gauge
// splitflow_rolling_pending_keys of the operator subtask.
func EmitLatest(opts ...LatestOption) RollingOption {
	return rollingOptionFunc(func(o *rollingOptions) {
		c := &latestConfig{maxKeys: defaultMaxPendingKeys}
		for _, opt := range opts {
			if opt == nil {
				c.errs = append(c.errs, errNilFunction("EmitLatest option"))
				continue
			}
			opt.applyLatest(c)
		}
		o.latest = c
	})
}

// defaultMaxPendingKeys bounds what a subtask holds between checkpoints
// with EmitLatest: a map entry and a value per key, a few MB at most for
// a count, while with 1 s commits a job with fewer changed keys than this
// per second emits each key once per checkpoint (Kafka Streams' default cache of 10 MB holds
// some 100k small records as well).
const defaultMaxPendingKeys = 100_000

// LatestOption sets a bound of EmitLatest.
type LatestOption interface{ applyLatest(*latestConfig) }

type latestConfig struct {
	maxKeys int           // MaxPendingKeys
	maxTime time.Duration // MaxPendingTime; 0: none
	errs    []error
}

type latestOptionFunc func(*latestConfig)

func (f latestOptionFunc) applyLatest(c *latestConfig) { f(c) }

// MaxPendingKeys emits the pending keys early, between checkpoints, once
// n keys of a subtask are pending; default 100_000. It bounds the memory
// of the pending set and how many records a barrier waits for. It must be
// at least 1 (1 emits every update).
func MaxPendingKeys(n int) LatestOption {
	return latestOptionFunc(func(c *latestConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("EmitLatest: MaxPendingKeys(%d) must be at least 1", n))
			return
		}
		c.maxKeys = n
	})
}

// MaxPendingTime emits the pending keys early, between checkpoints, once
// d of processing time passed since the first of them changed; default
// none. With an exactly-once sink nothing emitted becomes visible before
// the checkpoint completes, so the checkpoint interval is the bound that
// matters there; MaxPendingTime bounds the latency of a job without
// checkpoints or with an at-least-once sink. It must be positive.
func MaxPendingTime(d time.Duration) LatestOption {
	return latestOptionFunc(func(c *latestConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("EmitLatest: MaxPendingTime(%v) must be positive", d))
			return
		}
		c.maxTime = d
	})
}

// rolling is a keyed operator that keeps one value per key, in the value
// state called state: step gets the key's value (has: whether it has one)
// and the record, and returns the new value; emit makes the record to emit
// of a key and its value, after every record or, with EmitLatest, for the
// pending keys. The node is a KeyedProcess (its state signature and
// restore rules are those of a keyed process function) named after the
// aggregation. Count's state is "count", an int64 per key: the state of a
// KeyedProcess that counted into NewValueState[int64]("count") restores
// into Count under the same UID.
func rolling[K comparable, T, A, O any](ks KeyedStream[K, T], name, state string, opts []RollingOption, step func(acc A, has bool, v T) A, emit func(k K, acc A) O) DataStream[O] {
	var o rollingOptions
	var errs []error
	for _, opt := range opts {
		if opt == nil {
			errs = append(errs, errNilFunction(name+" option"))
			continue
		}
		opt.applyRolling(&o)
	}
	latest := o.latest
	if latest != nil {
		errs = append(errs, latest.errs...)
	}
	ds := KeyedProcessPerSubtask(ks, func() KeyedProcessFunction[K, T, O] {
		f := &rollingFunc[K, T, A, O]{name: state, step: step, emit: emit}
		if latest != nil {
			f.latest = &latestSet[K, A]{cfg: *latest, at: map[K]int{}}
		}
		return f
	})
	ds.node.name = name
	ds.node.errs = append(ds.node.errs, errs...)
	return ds
}

// rollingFunc is the function of rolling, one per subtask: it keeps the
// handle of its state, and with EmitLatest the pending keys.
type rollingFunc[K comparable, T, A, O any] struct {
	name   string
	step   func(acc A, has bool, v T) A
	emit   func(k K, acc A) O
	state  state.ValueState[A]
	latest *latestSet[K, A] // nil: emit every update
}

// latestSet is the pending keys of EmitLatest: each key changed since the
// last emission, in the order of its first change, with its value as the
// last record left it in keyed state and the timestamp of that record (its
// emitted record's). The value is kept beside the key so that an emission
// reads no state: on the pebble backend a read back of each pending key
// was a point lookup in the DB, several microseconds a key, and the
// pre-barrier step of a job changing 100k keys a checkpoint spent most
// of its time there. A rolling value is never cleared, so the value kept
// is the one in state. It is owned by the task goroutine and never
// checkpointed: the keyed process operator empties it before every
// barrier (heldOutput).
//
// A record of a key already pending, the common case between two
// checkpoints, costs one map lookup: the map gives the key's place in
// order, whose entry holds the value and the timestamp.
type latestSet[K comparable, A any] struct {
	cfg   latestConfig
	order []pendingKey[K, A]
	at    map[K]int // index in order
	// arm asks for flushHeld after a duration (MaxPendingTime); gauge is
	// the size, published at every change of emptiness and emission.
	arm   func(time.Duration)
	gauge prometheus.Gauge
}

// pendingKey is a key of latestSet with its value and its latest
// record's timestamp.
type pendingKey[K comparable, A any] struct {
	key K
	acc A
	ts  int64
}

func (f *rollingFunc[K, T, A, O]) Open(ctx *KeyedContext[K, O]) error {
	var err error
	f.state, err = keyed.DeclareValue(ctx.op, f.name, statecodec.For[A](), nil)
	return err
}

func (f *rollingFunc[K, T, A, O]) ProcessElement(ctx *KeyedContext[K, O], v T) error {
	acc, has := f.state.Value()
	acc = f.step(acc, has, v)
	f.state.Update(acc)
	l := f.latest
	if l == nil {
		ctx.Collect(f.emit(ctx.Key(), acc))
		return nil
	}
	if l.note(ctx.Key(), acc, ctx.Timestamp()) >= l.cfg.maxKeys {
		return f.flushHeld(ctx)
	}
	return nil
}

// note makes k pending with its value acc and its latest record's
// timestamp ts, and returns how many keys are pending.
func (l *latestSet[K, A]) note(k K, acc A, ts int64) int {
	if i, ok := l.at[k]; ok {
		l.order[i].acc, l.order[i].ts = acc, ts
		return len(l.order)
	}
	if len(l.order) == 0 && l.cfg.maxTime > 0 && l.arm != nil {
		l.arm(l.cfg.maxTime)
	}
	l.at[k] = len(l.order)
	l.order = append(l.order, pendingKey[K, A]{key: k, acc: acc, ts: ts})
	l.gauge.Set(float64(len(l.order)))
	return len(l.order)
}

func (f *rollingFunc[K, T, A, O]) OnTimer(*KeyedContext[K, O], Timer) error { return nil }

// bindHeld gives the pending set its metric and its timer (heldOutput).
func (f *rollingFunc[K, T, A, O]) bindHeld(g *metrics.Group, arm func(time.Duration)) {
	if f.latest == nil {
		return
	}
	f.latest.arm = arm
	f.latest.gauge = g.Gauge("rolling_pending_keys", "Keys of a rolling aggregation with EmitLatest changed since its last emission.")
}

// flushHeld emits every pending key with its value, in the order of the
// keys' first changes, and empties the set (heldOutput).
func (f *rollingFunc[K, T, A, O]) flushHeld(ctx *KeyedContext[K, O]) error {
	l := f.latest
	if l == nil || len(l.order) == 0 {
		return nil
	}
	for _, p := range l.order {
		// The emission is the key's, as after its record.
		ctx.op.SetKey(p.key)
		ctx.CollectWithTimestamp(f.emit(p.key, p.acc), p.ts)
		if ctx.err != nil {
			return ctx.err
		}
	}
	clear(l.at)
	clear(l.order)
	l.order = l.order[:0]
	l.gauge.Set(0)
	return nil
}

// held reports whether f holds output back: the keyed process operator
// drives a function that does (heldOutput) only then.
func (f *rollingFunc[K, T, A, O]) holds() bool { return f.latest != nil }
