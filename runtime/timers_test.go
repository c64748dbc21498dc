package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/timers"
)

// allTimers lists q's timers, in no particular order (timers.Queue.All);
// it panics on an error reading them.
func allTimers[K comparable](q *timers.Queue[K]) []timers.Entry[K] {
	out, err := q.All()
	if err != nil {
		panic(err)
	}
	return out
}

// unitStateConfig is the state config of an operator opened by hand.
func unitStateConfig(t testing.TB, b backendKind) stateConfig {
	if b == kindPebble {
		return pebbleStateConfig(t)
	}
	return stateConfig{backend: kindHeap}
}

// snapshotInto takes a snapshot of p as a task does, a pebble operator's
// files going to storage.
func snapshotInto[K comparable](t *testing.T, p *keyedProcessOperator[K, K, string], storage checkpoint.Storage, id int64) ([]byte, []checkpoint.FileHandle) {
	t.Helper()
	if p.state.Pebble != nil {
		p.state.Pebble.Storage = storage
	}
	return snapshotNow(t, p, id)
}

// commitBlobs commits checkpoint id of operator "op" (one blob and its
// files per subtask) into storage and loads it.
func commitBlobs(t *testing.T, storage checkpoint.Storage, id int64, blobs [][]byte, files [][]checkpoint.FileHandle) *checkpoint.Checkpoint {
	t.Helper()
	w, err := storage.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	var hs []checkpoint.StateHandle
	for i, b := range blobs {
		h, err := w.WriteState(checkpoint.OperatorOwner("op", i), b, files[i]...)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := w.Commit(checkpoint.Metadata{ID: id, States: hs}); err != nil {
		t.Fatal(err)
	}
	chk, err := storage.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	return chk
}

// openKeyedFrom opens subtask sub of operator "op" at parallelism par
// from chk, as openKeyedOn does from blobs.
func openKeyedFrom[K comparable](t *testing.T, sc stateConfig, chk *checkpoint.Checkpoint, par, sub int, fn KeyedProcessFuncs[K, K, string]) *keyedProcessOperator[K, K, string] {
	t.Helper()
	hash, err := stableHasher[K]()
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 128, state: sc}, mb: engine.NewMailbox(),
		restored: &engine.RestoredState{Chk: chk}}
	p := &keyedProcessOperator[K, K, string]{info: engine.OpInfo{Name: "p", UID: "op", Subtask: sub}, keyFn: func(k K) K { return k },
		hash: hash, par: par, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[K, K, string] { return fn }}
	err = openOp(p, tk)
	t.Cleanup(func() { _ = tk.shutdown(); _ = p.Close() })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// drain pops every timer of q, checking they come in timestamp order.
func drain[K comparable](t *testing.T, q *timers.Queue[K]) []timers.Entry[K] {
	t.Helper()
	var out []timers.Entry[K]
	for {
		e, ok := q.Peek()
		if !ok {
			return out
		}
		if got := q.Pop(); got != e {
			t.Fatalf("pop = %v, peek said %v", got, e)
		}
		if n := len(out); n > 0 && out[n-1].Ts > e.Ts {
			t.Fatalf("timer %v after %v", e, out[n-1])
		}
		out = append(out, e)
	}
}

// Timers of both domains survive a snapshot and a restore at another
// parallelism, up (2 -> 3) and down (2 -> 1), on both backends: each new
// subtask has exactly the timers of the key groups it owns (deleted ones
// gone, duplicates once) and fires them in timestamp order across its key
// groups.
func TestTimersRestoredInOrderAfterRescale(t *testing.T) {
	const keys = 600
	const far = int64(1) << 50 // processing-time timers that never come due
	evTs := func(k int64) int64 { return 1000 + k*7919%500 }
	prTs := func(k int64) int64 { return far + k*104729%300 }
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(evTs(k))
			ctx.RegisterEventTimeTimer(evTs(k)) // a duplicate is one timer
			ctx.RegisterProcessingTimeTimer(prTs(k))
			ctx.RegisterEventTimeTimer(evTs(k) + 1)
			ctx.DeleteEventTimeTimer(evTs(k) + 1)
			if k%3 == 0 {
				ctx.DeleteProcessingTimeTimer(prTs(k))
			}
			return nil
		},
	}
	groupOf := func(k int64) int { return keygroup.ForHash(keygroup.HashInt64(k), 128) }
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			mem, err := checkpoint.NewMemoryStorage()
			if err != nil {
				t.Fatal(err)
			}
			var blobs [][]byte
			var files [][]checkpoint.FileHandle
			for sub := range 2 {
				p, stop, err := openKeyedOn(t, unitStateConfig(t, b), nil, 2, sub, fn)
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := keygroup.Range(sub, 2, 128)
				for k := range int64(keys) {
					if g := groupOf(k); g >= lo && g <= hi {
						if err := p.Collect(k, 0); err != nil {
							t.Fatal(err)
						}
					}
				}
				blob, fs := snapshotInto(t, p, mem, 1)
				stop()
				blobs, files = append(blobs, blob), append(files, fs)
			}
			chk := commitBlobs(t, mem, 1, blobs, files)
			for _, par := range []int{3, 1} {
				var event, processing int
				for sub := range par {
					p := openKeyedFrom(t, unitStateConfig(t, b), chk, par, sub, fn)
					lo, hi := keygroup.Range(sub, par, 128)
					wantEv, wantPr := map[timers.Entry[int64]]bool{}, map[timers.Entry[int64]]bool{}
					for k := range int64(keys) {
						if g := groupOf(k); g >= lo && g <= hi {
							wantEv[timers.Entry[int64]{Ts: evTs(k), Key: k}] = true
							if k%3 != 0 {
								wantPr[timers.Entry[int64]{Ts: prTs(k), Key: k}] = true
							}
						}
					}
					for _, c := range []struct {
						name string
						q    *timers.Queue[int64]
						want map[timers.Entry[int64]]bool
						n    *int
					}{{"event-time", &p.timers.event, wantEv, &event}, {"processing-time", &p.timers.processing, wantPr, &processing}} {
						got := drain(t, c.q)
						if len(got) != len(c.want) {
							t.Fatalf("%d -> %d, subtask %d: %d %s timers, want %d", 2, par, sub, len(got), c.name, len(c.want))
						}
						for _, e := range got {
							if !c.want[e] {
								t.Fatalf("%d -> %d, subtask %d: %s timer %v is not of its key groups, or was deleted", 2, par, sub, c.name, e)
							}
						}
						*c.n += len(got)
					}
					if p.state.Err != nil {
						t.Fatal(p.state.Err)
					}
				}
				if event != keys || processing != keys-keys/3 {
					t.Fatalf("%d -> %d: %d event-time and %d processing-time timers, want %d and %d", 2, par, event, processing, keys, keys-keys/3)
				}
			}
		})
	}
}

// The synchronous part of a snapshot does not copy the timers, on either
// backend: with 100k timers (20k on pebble, whose writes are slower) the
// freeze allocates a small fraction of their size (the heap backend's
// copy is one header per key group, the pebble backend's nothing but the
// buffer swap); with the heap backend a write after the freeze copies
// only its key group's timers.
func TestSnapshotFreezeDoesNotCopyTimers(t *testing.T) {
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(k)
			return nil
		},
	}
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			timers := int64(100_000)
			if b == kindPebble {
				timers = 20_000
			}
			timersBytes := uint64(timers) * 16 // a timers.Entry[int64]
			p, stop, err := openKeyedOn(t, unitStateConfig(t, b), nil, 1, 0, fn)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if p.state.Pebble != nil {
				mem, err := checkpoint.NewMemoryStorage()
				if err != nil {
					t.Fatal(err)
				}
				p.state.Pebble.Storage = mem
			}
			for k := range timers {
				if err := p.Collect(k, 0); err != nil {
					t.Fatal(err)
				}
			}
			var enc func(func() bool) ([]byte, []checkpoint.FileHandle, error)
			n := allocated(func() {
				if enc, err = p.FreezeState(1); err != nil {
					t.Fatal(err)
				}
			})
			if n > timersBytes/8 {
				t.Fatalf("the freeze allocated %d bytes with %d timers (%d bytes of timers)", n, timers, timersBytes)
			}
			if p.state.Pebble == nil {
				w := allocated(func() {
					if err := p.Collect(timers, 0); err != nil {
						t.Fatal(err)
					}
				})
				if w > timersBytes/16 {
					t.Fatalf("a timer registered after the freeze allocated %d bytes; its key group holds about %d bytes of timers", w, timersBytes/128)
				}
			}
			if _, _, err := enc(func() bool { return false }); err != nil {
				t.Fatal(err)
			}
			p.ThawState()
		})
	}
}

// The pebble backend keeps a bounded share of its timers in memory: with
// 200k timers, registered, some deleted, snapshotted and restored, then
// fired by advancing watermarks while OnTimer registers more, the caches
// never hold more than timers.PebbleCache timers per key group, and every
// timer fires once, in timestamp order, against a model of the set.
func TestPebbleTimersMemoryBounded(t *testing.T) {
	const count = 200_000
	const bound = 128 * timers.PebbleCache
	model := map[timers.Entry[int64]]bool{}
	var checkBound func()
	var fired []timers.Entry[int64]
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ts := k * 7 % count
			ctx.RegisterEventTimeTimer(ts)
			model[timers.Entry[int64]{Ts: ts, Key: k}] = true
			if k%10 == 0 {
				ctx.DeleteEventTimeTimer(ts)
				delete(model, timers.Entry[int64]{Ts: ts, Key: k})
			}
			return nil
		},
		Timer: func(ctx *KeyedContext[int64, string], tm Timer) error {
			e := timers.Entry[int64]{Ts: tm.Timestamp, Key: ctx.Key()}
			if !model[e] {
				return fmt.Errorf("timer %v fired, not registered or fired before", e)
			}
			delete(model, e)
			fired = append(fired, e)
			if len(fired)%7 == 0 { // a later timer of the same key, sometimes due in this advance
				next := timers.Entry[int64]{Ts: tm.Timestamp + int64(len(fired)%3000), Key: ctx.Key()}
				ctx.RegisterEventTimeTimer(next.Ts)
				model[next] = true
			}
			if len(fired)%1000 == 0 {
				checkBound()
			}
			return nil
		},
	}
	sc := pebbleStateConfig(t)
	sc.bufferEntries = 4096
	p, stop, err := openKeyedOn(t, sc, nil, 1, 0, fn)
	if err != nil {
		t.Fatal(err)
	}
	cached := func(p *keyedProcessOperator[int64, int64, string]) int {
		return p.timers.event.Sets().(*timers.PebbleSets[int64]).Cached()
	}
	checkBound = func() {
		if n := cached(p); n > bound {
			t.Fatalf("%d timers cached in memory, bound %d", n, bound)
		}
	}
	for k := range int64(count) {
		if err := p.Collect(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	checkBound()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	blob, files := snapshotInto(t, p, mem, 1)
	stop()
	p = openKeyedFrom(t, sc, commitBlobs(t, mem, 1, [][]byte{blob}, [][]checkpoint.FileHandle{files}), 1, 0, fn)
	checkBound()
	if n := cached(p); n == 0 {
		t.Fatal("the restored timers' caches are empty")
	}
	for wm := int64(0); len(model) > 0; wm += count / 8 {
		if err := p.EmitWatermark(wm); err != nil {
			t.Fatal(err)
		}
		for e := range model {
			if e.Ts <= wm {
				t.Fatalf("timer %v not fired at watermark %d", e, wm)
			}
		}
	}
	for i := 1; i < len(fired); i++ {
		if fired[i].Ts < fired[i-1].Ts {
			t.Fatalf("timer %v fired after %v", fired[i], fired[i-1])
		}
	}
	if want := count - count/10; len(fired) < want {
		t.Fatalf("%d timers fired, want at least %d", len(fired), want)
	}
	if _, ok := p.timers.event.Peek(); ok || cached(p) != 0 {
		t.Fatal("timers left after all fired")
	}
}

// A frozen snapshot's timers are those of the freeze even when its encoder
// runs only after the task registered, deleted and fired timers in every
// key group (TestFrozenSnapshotUnchangedByLaterWrites runs the encoder
// concurrently, for the race detector): the copy-on-write of the key
// groups' heaps, not the timing, keeps them.
func TestFrozenTimersUnchangedByLaterTimerWrites(t *testing.T) {
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(1000 + k%100)
			ctx.RegisterProcessingTimeTimer(1<<50 + k%100)
			return nil
		},
	}
	p, stop := openKeyed(t, nil, 1, 0, fn)
	defer stop()
	for k := range int64(5000) {
		if err := p.Collect(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	sorted := func(es []timers.Entry[int64]) []timers.Entry[int64] {
		slices.SortFunc(es, func(a, b timers.Entry[int64]) int { return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(a.Key, b.Key)) })
		return es
	}
	beforeEv, beforePr := sorted(allTimers(&p.timers.event)), sorted(allTimers(&p.timers.processing))
	enc, err := p.FreezeState(1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range int64(5000) {
		p.state.SetKey(k)
		switch k % 3 {
		case 0:
			p.ctx.DeleteEventTimeTimer(1000 + k%100)
			p.ctx.DeleteProcessingTimeTimer(1<<50 + k%100)
		case 1:
			p.ctx.RegisterEventTimeTimer(k % 100) // to the top of its key group's heap
			p.ctx.RegisterProcessingTimeTimer(1<<49 + k%100)
		}
	}
	if err := p.EmitWatermark(1050); err != nil { // pops
		t.Fatal(err)
	}
	blob, _, err := enc(func() bool { return false })
	p.ThawState()
	if err != nil {
		t.Fatal(err)
	}
	q, stopQ := openKeyed(t, [][]byte{blob}, 1, 0, fn)
	defer stopQ()
	if got := sorted(allTimers(&q.timers.event)); !slices.Equal(got, beforeEv) {
		t.Fatalf("the snapshot holds %d event-time timers, %d at the freeze, or others", len(got), len(beforeEv))
	}
	if got := sorted(allTimers(&q.timers.processing)); !slices.Equal(got, beforePr) {
		t.Fatalf("the snapshot holds %d processing-time timers, %d at the freeze, or others", len(got), len(beforePr))
	}
}

// A pebble checkpoint of layout 100, whose timers are in its blob (the
// DB has none), restores: its timers go into the DB, also at another
// parallelism, and fire; a snapshot of the restored state is layout 101
// and has no timers in its blob.
func TestPebbleLayout100TimersRestoreIntoTheDB(t *testing.T) {
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(ctx *KeyedContext[int64, string], k int64) error {
			ctx.RegisterEventTimeTimer(100 + k)
			return nil
		},
	}
	// The timers' entries as layout 100 had them: the heap layout's.
	heap, stopHeap := openKeyed(t, nil, 1, 0, fn)
	for k := range int64(300) {
		if err := heap.Collect(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	heapBlob, err := heap.SnapshotState(1)
	stopHeap()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := keyed.DecodeEntries(heapBlob)
	if err != nil {
		t.Fatal(err)
	}
	// A pebble DB without timers and a blob that carries them.
	p, stop, err := openKeyedOn(t, pebbleStateConfig(t), nil, 1, 0, fn)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	blob, files := snapshotInto(t, p, mem, 1)
	stop()
	pbl, err := pebblestate.DecodeBlob(blob)
	if err != nil {
		t.Fatal(err)
	}
	pbl.Entries = keyed.EncodeEntries(entries)
	old := pebblestate.EncodeBlob(pbl)
	if old[0] != pebblestate.LayoutVersion {
		t.Fatalf("blob starts with %d", old[0])
	}
	old[0] = pebblestate.LayoutVersionTimers0 // one uvarint byte either way
	if len(pbl.Delta) != 0 || old[len(old)-1] != 0 {
		t.Fatal("the first snapshot is a delta")
	}
	old = old[:len(old)-1] // layout 100 has no delta section
	chk := commitBlobs(t, mem, 1, [][]byte{old}, [][]checkpoint.FileHandle{files})
	total := 0
	for sub := range 2 {
		q := openKeyedFrom(t, pebbleStateConfig(t), chk, 2, sub, fn)
		lo, hi := keygroup.Range(sub, 2, 128)
		inDB := allTimers(&q.timers.event) // read from the DB
		for _, e := range inDB {
			if g := keygroup.ForHash(keygroup.HashInt64(e.Key), 128); g < lo || g > hi || e.Ts != 100+e.Key {
				t.Fatalf("subtask %d: timer %v", sub, e)
			}
		}
		total += len(inDB)
		q.state.Pebble.Storage = mem
		b, _ := snapshotNow(t, q, 2)
		nb, err := pebblestate.DecodeBlob(b)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != pebblestate.LayoutVersion || len(nb.Entries) != 0 {
			t.Fatalf("new snapshot: layout %d, %d bytes of entries", b[0], len(nb.Entries))
		}
		if got := drain(t, &q.timers.event); len(got) != len(inDB) {
			t.Fatalf("subtask %d: %d timers fired, %d in the DB", sub, len(got), len(inDB))
		}
	}
	if total != 300 {
		t.Fatalf("%d timers restored, want 300", total)
	}
}

// Rule (D, the backpressure rule): timers fired by one watermark do not pile
// up in the record writer: with every key's timer due at the final
// maxWatermark and a slow sink in another task, the records in flight stay
// within the network bound, and the watermark follows the timers' records.
func TestTimerBurstRespectsBackpressure(t *testing.T) {
	const keys = 20_000
	env := NewEnvironment(WithBufferSize(bpBufferSize), WithBuffersPerChannel(bpBuffers), WithFlushTimeout(-1))
	src := &memSource[ev]{numSplits: 1, perSplit: keys, gen: func(_, i int) (ev, int64) {
		return ev{Seq: i, Key: strconv.Itoa(i)}, int64(i)
	}}
	var fired, written atomic.Int64
	res := KeyedProcess(KeyBy(FromSource(env, src, "keys"), func(e ev) string { return e.Key }),
		func(ctx *KeyedContext[string, int64], e ev) error {
			ctx.RegisterEventTimeTimer(1 << 40) // beyond the input: fires at the end
			return nil
		}, OnTimer(func(ctx *KeyedContext[string, int64], tm Timer) error {
			fired.Add(1)
			ctx.Collect(ctx.CurrentWatermark())
			return nil
		}))
	const bound = (bpBuffers+1)*bpBufferSize + bpBufferSize + bpBufferSize + 1
	var maxInFlight atomic.Int64
	sink := newCollectSink[int64]()
	stalled := false
	sink.writeFn = func(_ int, _ int64, wc connector.WriteContext) error {
		if !stalled {
			// Stall on the first timer record: a producer that ignores
			// backpressure fires everything meanwhile.
			stalled = true
			deadline := time.Now().Add(300 * time.Millisecond)
			for fired.Load() < keys && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		if n := fired.Load() - written.Add(1) + 1; n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		if wc.CurrentWatermark == engine.MaxWatermark {
			return errors.New("a timer record arrived after the watermark that fired it")
		}
		return nil
	}
	SinkTo(res, sink).DisableChaining()
	if err := env.Execute(context.Background(), "timer burst"); err != nil {
		t.Fatal(err)
	}
	if n := sink.Count(); n != keys {
		t.Fatalf("sink got %d records, want %d", n, keys)
	}
	if m := maxInFlight.Load(); m > bound {
		t.Fatalf("%d timer records in flight behind a slow sink, bound %d", m, bound)
	}
}
