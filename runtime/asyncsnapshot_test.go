package runtime

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/timers"
	"github.com/splitflow/splitflow/runtime/state"
)

// asyncStates declares count (ValueState[int64]), seen (MapState[string,
// int64]) and raw (ValueState[[]byte], whose values the function could
// change in place; see also asyncsnapshot_freeze_test.go).
type asyncStates struct {
	count state.ValueState[int64]
	seen  state.MapState[string, int64]
	raw   state.ValueState[[]byte]
}

func (a *asyncStates) funcs() KeyedProcessFuncs[string, string, string] {
	return KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) (err error) {
			if a.count, err = state.NewValueState[int64]("count").Handle(ctx); err != nil {
				return err
			}
			if a.seen, err = state.NewMapState[string, int64]("seen").Handle(ctx); err != nil {
				return err
			}
			a.raw, err = state.NewValueState[[]byte]("raw").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
}

type asyncView struct {
	count map[string]int64
	seen  map[string]map[string]int64
	raw   map[string][]byte
	event []timers.Entry[string]
}

func viewOf(p *keyedProcessOperator[string, string, string]) asyncView {
	seen := map[string]map[string]int64{}
	for k, m := range p.state.States["seen"].(*keyed.HeapMap[string, string, int64]).Flat() {
		seen[k] = maps.Clone(m)
	}
	ev := allTimers(&p.timers.event)
	slices.SortFunc(ev, func(a, b timers.Entry[string]) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		return int(a.Ts - b.Ts)
	})
	return asyncView{
		count: p.state.States["count"].(*keyed.HeapValue[string, int64]).Flat(),
		seen:  seen,
		raw:   maps.Clone(p.state.States["raw"].(*keyed.HeapValue[string, []byte]).Flat()),
		event: ev,
	}
}

// The encoder of a frozen snapshot reads the state as it was at the freeze
// while the task goes on writing it: every kind of write (updates, clears,
// new keys, map puts and removes of existing and new keys, timers
// registered, deleted and fired) lands in the live state and none in the
// snapshot. Under the race detector the
// encoder runs concurrently with the writes, so a write to a map it reads
// fails the test.
func TestFrozenSnapshotUnchangedByLaterWrites(t *testing.T) {
	var st asyncStates
	fn := st.funcs()
	fn.Element = func(ctx *KeyedContext[string, string], v string) error {
		n, _ := st.count.Value()
		st.count.Update(n + 1)
		st.seen.Put(v+"/"+strconv.FormatInt(n, 10), n)
		if n > 0 {
			st.seen.Remove(v + "/0")
		}
		raw, _ := st.raw.Value()
		st.raw.Update(append(slices.Clone(raw), byte(n)))
		ctx.RegisterEventTimeTimer(100 + n)
		return nil
	}
	p, stop := openKeyed(t, nil, 1, 0, fn)
	defer stop()
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if err := p.Collect(keys[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	before := viewOf(p)

	enc, err := p.FreezeState(1)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		blob []byte
		err  error
	}
	encoded := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		b, _, err := enc(func() bool { return false })
		encoded <- result{b, err}
	}()
	<-started
	for i, k := range keys {
		if err := p.Collect(k, 0); err != nil { // update, map put and remove, timer
			t.Fatal(err)
		}
		switch i % 4 {
		case 0:
			p.state.SetKey(k)
			st.count.Clear()
		case 1:
			p.state.SetKey(k)
			st.seen.Clear()
		case 2:
			p.state.SetKey(k)
			p.ctx.DeleteEventTimeTimer(100) // out of the middle of its key group's heap
		case 3:
			p.state.SetKey(k)
			p.ctx.RegisterEventTimeTimer(50 + int64(i%50)) // up to the top of it
		}
		if err := p.Collect("new"+k, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Fire the timers up to 75: pops off the top.
	if err := p.EmitWatermark(75); err != nil {
		t.Fatal(err)
	}
	after := viewOf(p)
	r := <-encoded
	p.ThawState()
	if r.err != nil {
		t.Fatal(r.err)
	}

	q, stopQ := openKeyed(t, [][]byte{r.blob}, 1, 0, st.funcs())
	defer stopQ()
	if got := viewOf(q); !reflect.DeepEqual(got, before) {
		t.Fatalf("the snapshot holds writes made after the freeze:\ncounts %d keys (want %d), seen %d keys (want %d), timers %d (want %d)",
			len(got.count), len(before.count), len(got.seen), len(before.seen), len(got.event), len(before.event))
	}
	if got := viewOf(p); !reflect.DeepEqual(got, after) {
		t.Fatal("the live state changed when the encoder finished")
	}
	if len(after.count) != len(keys)*2-len(keys)/4 || after.count["k1"] != 2 || len(after.seen["k2"]) != 1 {
		t.Fatalf("live state: %d counts, k1 = %d, seen[k2] = %v", len(after.count), after.count["k1"], after.seen["k2"])
	}
	// Thawed, writes no longer copy: the map written is the one kept.
	p.state.SetKey("k1")
	g := p.state.Slot
	m := p.state.States["count"].(*keyed.HeapValue[string, int64]).SlotMap(g)
	st.count.Update(7)
	if reflect.ValueOf(p.state.States["count"].(*keyed.HeapValue[string, int64]).SlotMap(g)).UnsafePointer() != reflect.ValueOf(m).UnsafePointer() {
		t.Fatal("a write after the thaw copied its key group's map")
	}
}

// heldCounting is counting that tells, on the task goroutine, how many
// records it processed while an encoder was held.
type heldCounting struct {
	counting
	held    <-chan struct{}
	onAfter func(n int64)
	after   int64
}

func (c *heldCounting) ProcessElement(ctx *KeyedContext[int64, int64], v int64) error {
	select {
	case <-c.held:
		c.after++
		c.onAfter(c.after)
	default:
	}
	return c.counting.ProcessElement(ctx, v)
}

// While a checkpoint's encoder is held, the keyed task goes on processing
// records (the barrier passed it after the freeze), the checkpoint does
// not complete before its encoder returns, and once it does the job
// completes with every count exactly once.
func TestTaskProcessesWhileSnapshotEncodes(t *testing.T) {
	src := &rangeSrc{splits: 2, perSplit: 3000, delay: 20 * time.Microsecond, readerFailAt: -1}
	store := newTxnStore()
	var (
		holdOnce, releaseOnce sync.Once
		heldID                atomic.Int64
		released              atomic.Bool
		held                  = make(chan struct{})
		release               = make(chan struct{})
	)
	env := NewEnvironment(WithParallelism(1), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
		WithDrainTimeout(5*time.Second), WithCheckpointInterval(2*time.Millisecond))
	ds := FromSource(env, src, "range").UID("src")
	counts := KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v % 7 }), func() KeyedProcessFunction[int64, int64, int64] {
		return &heldCounting{held: held, onAfter: func(n int64) {
			if n == 100 {
				releaseOnce.Do(func() { released.Store(true); close(release) })
			}
		}}
	}).UID("counts")
	SinkTo(counts, twoPhase(&txnSink2PC{store: store})).UID("sink")
	env.hooks = &testHooks{
		taskCreated: func(tk *task) {
			tk.beforeEncode = func(id int64, abandoned <-chan struct{}) {
				holdOnce.Do(func() {
					heldID.Store(id)
					close(held)
					select {
					case <-release:
					case <-abandoned:
						t.Error("the task ended while its encoder was held")
					case <-time.After(30 * time.Second):
						t.Error("the keyed task processed no records while its encoder was held")
					}
				})
			}
		},
		checkpointCompleted: func(id int64, _ checkpoint.Storage) {
			if id == heldID.Load() && !released.Load() {
				t.Errorf("checkpoint %d completed before its encoder returned", id)
			}
		},
	}
	if err := env.Execute(testCtx(t), "held encoder"); err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatal("no encoder was held")
	}
	checkCounts(t, store, 6000, 7)
}

// A task that ends while its encoder runs abandons it and waits for it:
// the encoder stops at its next key group, nothing is acknowledged, and
// no goroutine is left reading the state.
func TestTaskEndingAbandonsEncoder(t *testing.T) {
	var st asyncStates
	p, _ := openKeyed(t, nil, 1, 0, st.funcs())
	tk := p.t
	for i := range 1000 {
		p.state.SetKey("k" + strconv.Itoa(i))
		st.count.Update(int64(i))
	}
	tk.ops = []engine.Lifecycle{p}
	waiting := make(chan struct{})
	tk.beforeEncode = func(_ int64, abandoned <-chan struct{}) {
		close(waiting)
		<-abandoned
	}
	if err := tk.performCheckpoint(engine.CheckpointBarrier{CheckpointID: 1}, 0); err != nil {
		t.Fatal(err)
	}
	e := tk.encoding
	if e == nil {
		t.Fatal("no encoder started")
	}
	<-waiting
	if err := tk.shutdown(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	default:
		t.Fatal("shutdown returned with the encoder running")
	}
	if !errors.Is(e.err, keyed.ErrSnapshotAbandoned) || tk.encoding != nil {
		t.Fatalf("encoder error %v, task encoding %v; want errSnapshotAbandoned and none", e.err, tk.encoding)
	}
}
