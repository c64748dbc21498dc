package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// counting is a keyed function that keeps a running count per key in a
// ValueState and the records seen per key in a MapState, and emits
// key*100000 + count for every record.
type counting struct {
	count state.ValueState[int64]
	seen  state.MapState[int64, bool]
}

func (c *counting) Open(ctx *KeyedContext[int64, int64]) error {
	var err error
	if c.count, err = state.NewValueState[int64]("count").Handle(ctx); err != nil {
		return err
	}
	c.seen, err = state.NewMapState[int64, bool]("seen").Handle(ctx)
	return err
}

func (c *counting) ProcessElement(ctx *KeyedContext[int64, int64], v int64) error {
	if c.seen.Contains(v) {
		return errors.New("record seen twice by the keyed state")
	}
	c.seen.Put(v, true)
	n, _ := c.count.Value()
	n++
	c.count.Update(n)
	ctx.Collect(ctx.Key()*100000 + n)
	return nil
}

func (c *counting) OnTimer(*KeyedContext[int64, int64], Timer) error { return nil }

// checkCounts: every key k got counts 1..total(k) exactly once.
func checkCounts(t *testing.T, store *txnStore, n, keys int) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]int{}
	for _, rs := range store.committed {
		for _, r := range rs {
			seen[r]++
		}
	}
	for k := range int64(keys) {
		total := int64(0)
		for v := range int64(n) {
			if v%int64(keys) == k {
				total++
			}
		}
		for c := int64(1); c <= total; c++ {
			if got := seen[k*100000+c]; got != 1 {
				t.Fatalf("key %d count %d emitted %d times, want once", k, c, got)
			}
		}
		if seen[k*100000+total+1] != 0 {
			t.Fatalf("key %d counted past its %d records", k, total)
		}
	}
}

// The same count through state descriptors, shared by every subtask.
var (
	countDesc = state.NewValueState[int64]("count")
	seenDesc  = state.NewMapState[int64, bool]("seen")
)

func countWithDescriptors[K ~int64](ctx *KeyedContext[K, int64], v int64) error {
	seen, _, err := seenDesc.Get(ctx, v)
	if err != nil {
		return err
	}
	if seen {
		return errors.New("record seen twice by the keyed state")
	}
	if err := seenDesc.Put(ctx, v, true); err != nil {
		return err
	}
	n, _, err := countDesc.Get(ctx)
	if err != nil {
		return err
	}
	n++
	if err := countDesc.Set(ctx, n); err != nil {
		return err
	}
	ctx.Collect(int64(ctx.Key())*100000 + n)
	return nil
}

// bucket is a named key type: descriptors reach its state through the
// view over int64.
type bucket int64

// countingAPI is how countingJob declares its state.
type countingAPI int

const (
	viaHandles     countingAPI = iota // a descriptor's Handle in Open, a function per subtask
	viaDescriptors                    // descriptors in a plain function, key int64
	viaNamedKey                       // descriptors, key bucket
	viaCount                          // Count (rolling.go)
	viaAggregate                      // Aggregate, the count in a struct accumulator
	viaReduce                         // Reduce over records that carry a count of 1
	viaCoProcess                      // KeyedCoProcessPerSubtask: evens on one input, odds on the other
)

func countingJob(par int, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	return countingJobVia(viaHandles, par, src, mapFn, sink, opts...)
}

func countingJobVia(api countingAPI, par int, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	return countingJobRolling(api, nil, par, src, mapFn, sink, opts...)
}

// countingJobRolling is countingJobVia whose rolling aggregations (viaCount,
// viaAggregate, viaReduce) take ropts.
func countingJobRolling(api countingAPI, ropts []RollingOption, par int, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second)}, opts...)...)
	ds := Map(FromSource(env, src, "range").UID("src"), mapFn).UID("map")
	var counts DataStream[int64]
	switch api {
	case viaHandles:
		counts = KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v % 7 }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} })
	case viaDescriptors:
		counts = KeyedProcess(KeyBy(ds, func(v int64) int64 { return v % 7 }), countWithDescriptors[int64])
	case viaNamedKey:
		counts = KeyedProcess(KeyBy(ds, func(v int64) bucket { return bucket(v % 7) }), countWithDescriptors[bucket])
	case viaCount:
		counts = Map(Count(KeyBy(ds, func(v int64) int64 { return v % 7 }), ropts...).UID("counts"), func(kv KV[int64, int64]) (int64, error) {
			return kv.Key*100000 + kv.Value, nil
		})
	case viaAggregate:
		counts = Map(Aggregate(KeyBy(ds, func(v int64) int64 { return v % 7 }), state.Aggregator[int64, countAcc, int64]{
			Create: func() countAcc { return countAcc{} },
			Add:    func(a countAcc, v int64) countAcc { return countAcc{Key: v % 7, N: a.N + 1} },
			Result: func(a countAcc) int64 { return a.N },
		}, ropts...).UID("counts"), func(kv KV[int64, int64]) (int64, error) { return kv.Key*100000 + kv.Value, nil })
	case viaReduce:
		ones := Map(ds, func(v int64) (KV[int64, int64], error) { return KV[int64, int64]{Key: v % 7, Value: 1}, nil })
		counts = Map(Reduce(KeyBy(ones, func(kv KV[int64, int64]) int64 { return kv.Key }), func(a, b KV[int64, int64]) KV[int64, int64] {
			return KV[int64, int64]{Key: a.Key, Value: a.Value + b.Value}
		}, ropts...).UID("counts"), func(kv KV[int64, int64]) (int64, error) { return kv.Key*100000 + kv.Value, nil })
	case viaCoProcess:
		evens := KeyBy(Filter(ds, func(v int64) (bool, error) { return v%2 == 0, nil }), func(v int64) int64 { return v % 7 })
		odds := KeyBy(Filter(ds, func(v int64) (bool, error) { return v%2 == 1, nil }), func(v int64) int64 { return v % 7 })
		counts = KeyedCoProcessPerSubtask(Connect(evens, odds), func() KeyedCoProcessFunction[int64, int64, int64, int64] {
			return coCounting{&counting{}}
		}).UID("counts")
	}
	if api < viaCount {
		counts = counts.UID("counts")
	}
	SinkTo(counts, twoPhase(sink)).UID("sink")
	return env
}

// countAcc is the accumulator of the viaAggregate count: a struct, so
// that it goes through the gob encoding of state.
type countAcc struct {
	Key, N int64
}

// Keyed state is checkpointed by key group and restored by operator UID:
// a job that fails twice (global failover: the key-by edge is all-to-all)
// emits every running count exactly once.
func TestKeyedStateRestoredAfterFailover(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for api, name := range []string{"handles", "descriptors", "descriptors-named-key"} {
			t.Run(name, func(t *testing.T) {
				src := &rangeSrc{splits: 4, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
				store := newTxnStore()
				env := countingJobVia(countingAPI(api), 2, src, failOnce(50, 120), &txnSink2PC{store: store},
					WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)), backend)
				if err := env.Execute(testCtx(t), "keyed"); err != nil {
					t.Fatal(err)
				}
				checkCounts(t, store, 160, 7)
			})
		}
	})
}

// Keyed state moves with its key groups when the parallelism changes: a
// job at parallelism 2 dies after a few checkpoints; the same job at
// parallelism 3 on the same directory goes on, and every count is emitted
// exactly once. The readers' splits are dealt out to the new readers, or
// (WithRescaledSplitsToEnumerator) handed to the enumerator.
func TestKeyedStateRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, pars := range [][2]int{{2, 3}, {3, 1}} {
			for _, toEnum := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d->%d/splitsToEnumerator=%v", pars[0], pars[1], toEnum), func(t *testing.T) {
					testRescale(t, pars[0], pars[1], toEnum, backend)
				})
			}
		}
	})
}

// Descriptors' state rescales like any other: a job counting through
// handles kept by a function per subtask restores into one counting
// through descriptors' methods (the same states), and a job on a named key type, whose descriptors reach the
// state through the view over int64, rescales down.
func TestDescriptorStateRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		t.Run("2->3/handles->descriptors", func(t *testing.T) {
			testRescaleVia(t, [2]countingAPI{viaHandles, viaDescriptors}, 2, 3, false, backend)
		})
		t.Run("3->1/named-key", func(t *testing.T) {
			testRescaleVia(t, [2]countingAPI{viaNamedKey, viaNamedKey}, 3, 1, false, backend)
		})
	})
}

func testRescale(t *testing.T, from, to int, toEnum bool, backend Option) {
	testRescaleVia(t, [2]countingAPI{viaHandles, viaHandles}, from, to, toEnum, backend)
}

func testRescaleVia(t *testing.T, apis [2]countingAPI, from, to int, toEnum bool, backend Option) {
	dir := t.TempDir()
	store := newTxnStore()
	dieMidStream(t, from, func(src *rangeSrc, kill func(int64) (int64, error), opts ...Option) *Environment {
		return countingJobVia(apis[0], from, src, kill, &txnSink2PC{store: store}, append(opts, WithCheckpointDir(dir), backend)...)
	})
	src2 := &rangeSrc{splits: 4, perSplit: 40, readerFailAt: -1}
	var violations []error
	opts2 := []Option{WithCheckpointInterval(3 * time.Millisecond), WithCheckpointDir(dir), backend}
	if toEnum {
		opts2 = append(opts2, WithRescaledSplitsToEnumerator())
	}
	env2 := countingJobVia(apis[1], to, src2, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: store}, opts2...)
	env2.hooks = &testHooks{checkpointCompleted: func(id int64, s checkpoint.Storage) {
		if err := checkSplitsInOnePlace(s, id, "src", 4); err != nil {
			violations = append(violations, err)
		}
	}}
	ctx := testCtx(t)
	if err := env2.Execute(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal(context.Cause(ctx))
	}
	if len(violations) > 0 {
		t.Fatal(violations[0])
	}
	checkCounts(t, store, 160, 7)
}

// One pair of descriptors serves two operators at parallelism 3: every
// operator subtask has its own state (a record counted by both operators
// would be "seen twice" if they shared one), and after a failover every
// running count of both is emitted exactly once. One operator's key type
// is named, so its state goes through the view over int64.
func TestDescriptorsGiveEachOperatorSubtaskItsOwnState(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		env := NewEnvironment(WithParallelism(3), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
			WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)), backend)
		src := &rangeSrc{splits: 4, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
		ds := Map(FromSource(env, src, "range").UID("src"), failOnce(70)).UID("map")
		by7 := KeyedProcess(KeyBy(ds, func(v int64) int64 { return v % 7 }), countWithDescriptors[int64]).UID("by7")
		by5 := KeyedProcess(KeyBy(ds, func(v int64) bucket { return bucket(v % 5) }), countWithDescriptors[bucket]).UID("by5")
		store7, store5 := newTxnStore(), newTxnStore()
		SinkTo(by7, twoPhase(&txnSink2PC{store: store7})).UID("sink7")
		SinkTo(by5, twoPhase(&txnSink2PC{store: store5})).UID("sink5")
		if err := env.Execute(testCtx(t), "shared descriptors"); err != nil {
			t.Fatal(err)
		}
		if env.Status().Restarts == 0 {
			t.Fatal("the job never failed over; the test proves less than it says")
		}
		checkCounts(t, store7, 160, 7)
		checkCounts(t, store5, 160, 5)
	})
}

// dieMidStream runs a first job, made by build at parallelism par over a
// source of 4 splits of 40 records, until it dies mid-stream: it reads
// split 0 to its end and the others half-way, then its readers hold (each
// holds one split: there are more splits than readers) until it dies,
// after a checkpoint whose barrier came after every reader held. That
// checkpoint has a finished split and open ones, and the job dies
// mid-stream however long its checkpoints take. build gets the source,
// the map that kills the job, and the checkpoint interval and restart
// strategy to use.
func dieMidStream(t *testing.T, par int, build func(src *rangeSrc, kill func(int64) (int64, error), opts ...Option) *Environment) {
	t.Helper()
	died := make(chan struct{})
	var once sync.Once
	src := &rangeSrc{splits: 4, perSplit: 40, delay: 300 * time.Microsecond, readerFailAt: -1,
		hold: func(v int64) bool { return v >= 40 && v%40 >= 20 }, release: died}
	kill := func(v int64) (int64, error) {
		select {
		case <-died:
			return 0, errors.New("process killed")
		default:
			return v, nil
		}
	}
	env := build(src, kill, WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.None()))
	var cover atomic.Int64
	env.hooks = &testHooks{
		barrierInjected: func(id int64) {
			if cover.Load() == 0 && src.holding.Load() == int32(par) {
				cover.Store(id)
			}
		},
		checkpointCompleted: func(id int64, _ checkpoint.Storage) {
			if c := cover.Load(); c != 0 && id >= c {
				once.Do(func() { close(died) })
			}
		},
	}
	if err := env.Execute(testCtx(t), "first"); err == nil {
		t.Fatal("the job finished before it could be killed; the test proves nothing")
	}
}
