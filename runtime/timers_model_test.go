package runtime

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/timers"
)

// timerModel is the set of pending timers of one operator, by domain, as
// the API promises them: a registration adds (key, ts) once, a deletion
// removes it, a timer fires once, at the earliest timestamp pending, ties
// in key-group order.
type timerModel struct {
	event, processing map[timers.Entry[int64]]bool
}

func (m timerModel) clone() timerModel {
	return timerModel{event: maps.Clone(m.event), processing: maps.Clone(m.processing)}
}

// modelKeyGroups is the model operator's max parallelism. Few key groups
// put more timers in each, so the pebble caches fill and refill more often;
// and the checks, which read every key group's timers from the DB, cost
// less: under -race Pebble takes a stack trace for each file of each read.
const modelKeyGroups = 16

func modelGroup(k int64) int { return keygroup.ForHash(keygroup.HashInt64(k), modelKeyGroups) }

// checkNext fails unless e is a timer of set that may fire now: pending,
// of the smallest timestamp, and of the smallest key group among those.
func checkNext(set map[timers.Entry[int64]]bool, e timers.Entry[int64]) error {
	if !set[e] {
		return fmt.Errorf("timer %v fired, not pending", e)
	}
	for o := range set {
		if o.Ts < e.Ts || o.Ts == e.Ts && modelGroup(o.Key) < modelGroup(e.Key) {
			return fmt.Errorf("timer %v fired before %v", e, o)
		}
	}
	return nil
}

// Timers of both domains against a model, on both backends: random
// registrations (duplicates, timestamps before and after the ones pending,
// many in a few key groups so that the pebble caches fill, run empty and
// refill), deletions of pending and unknown timers, event-time firing
// whose OnTimer registers and deletes timers of its key (some due in the
// same advance), processing-time timers popped from the queue, snapshots
// whose encoder runs later or concurrently while the task writes on or
// gives up, and restores of the last completed checkpoint at parallelism
// 1 (the run goes on from it) and 3 (each subtask's timers checked). Every
// firing is the model's next timer, and the operator's timers equal the
// model's after every step that checks them.
func TestTimersFollowTheModelAcrossSnapshotsAndRestores(t *testing.T) {
	hot := map[int]bool{}
	var keys []int64
	for k := int64(0); len(keys) < 240; k++ {
		g := modelGroup(k)
		if len(hot) < 3 && !hot[g] {
			hot[g] = true
		}
		if hot[g] || k%5 == 0 {
			keys = append(keys, k)
		}
	}
	const far = int64(1) << 50 // processing time never reached by the clock
	for _, b := range stateBackends {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/%d", b, seed), func(t *testing.T) {
				runTimerModel(t, b, seed, keys, far)
			})
		}
	}
}

func runTimerModel(t *testing.T, b backendKind, seed uint64, keys []int64, far int64) {
	rng := rand.New(rand.NewPCG(seed, 17))
	model := timerModel{event: map[timers.Entry[int64]]bool{}, processing: map[timers.Entry[int64]]bool{}}
	wm := int64(-1 << 40)
	var failure error
	fail := func(err error) {
		if failure == nil {
			failure = err
		}
	}
	fn := KeyedProcessFuncs[int64, int64, string]{
		Element: func(*KeyedContext[int64, string], int64) error { return nil },
		Timer: func(ctx *KeyedContext[int64, string], tm Timer) error {
			e := timers.Entry[int64]{Ts: tm.Timestamp, Key: ctx.Key()}
			if tm.Domain != EventTime {
				fail(fmt.Errorf("timer %v fired in domain %v", e, tm.Domain))
				return nil
			}
			if err := checkNext(model.event, e); err != nil {
				fail(err)
			}
			delete(model.event, e)
			switch rng.IntN(4) {
			case 0: // due in this advance
				n := timers.Entry[int64]{Ts: wm - int64(rng.IntN(5)), Key: e.Key}
				ctx.RegisterEventTimeTimer(n.Ts)
				model.event[n] = true
			case 1:
				n := timers.Entry[int64]{Ts: wm + 1 + int64(rng.IntN(200)), Key: e.Key}
				ctx.RegisterEventTimeTimer(n.Ts)
				model.event[n] = true
			case 2: // one of its key's due timers, not to fire any more
				for o := range model.event {
					if o.Key == e.Key && o.Ts <= wm {
						ctx.DeleteEventTimeTimer(o.Ts)
						delete(model.event, o)
						break
					}
				}
			}
			return nil
		},
	}
	sc := unitStateConfig(t, b)
	if b == kindPebble {
		sc.bufferEntries = 8 + rng.IntN(40)
	}
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	p, stop := openKeyedFromStop(t, sc, nil, modelKeyGroups, 1, 0, fn)
	defer func() { stop() }()
	// useMem gives each opening's pebble state the test's storage, once:
	// its materializations read it in the background.
	useMem := func() {
		if p.state.Pebble != nil {
			p.state.Pebble.Storage = mem
		}
	}
	useMem()

	equal := func(step int, what string, q *timers.Queue[int64], want map[timers.Entry[int64]]bool, lo, hi int) {
		t.Helper()
		got := map[timers.Entry[int64]]bool{}
		for _, e := range allTimers(q) {
			if got[e] {
				t.Fatalf("step %d, %s: timer %v twice", step, what, e)
			}
			got[e] = true
		}
		n := 0
		for e := range want {
			if g := modelGroup(e.Key); g < lo || g > hi {
				continue
			}
			n++
			if !got[e] {
				t.Fatalf("step %d, %s: timer %v lost", step, what, e)
			}
		}
		if len(got) != n {
			t.Fatalf("step %d, %s: %d timers, the model has %d", step, what, len(got), n)
		}
		if e, ok := q.Peek(); ok != (n > 0) {
			t.Fatalf("step %d, %s: peek %v %v with %d timers", step, what, e, ok, n)
		} else if ok {
			sub := map[timers.Entry[int64]]bool{}
			for o := range want {
				if g := modelGroup(o.Key); g >= lo && g <= hi {
					sub[o] = true
				}
			}
			if err := checkNext(sub, e); err != nil {
				t.Fatalf("step %d, %s: peek: %v", step, what, err)
			}
		}
	}
	check := func(step int) {
		t.Helper()
		if failure != nil {
			t.Fatalf("step %d: %v", step, failure)
		}
		if p.state.Err != nil {
			t.Fatalf("step %d: %v", step, p.state.Err)
		}
		equal(step, "event-time", &p.timers.event, model.event, 0, modelKeyGroups-1)
		equal(step, "processing-time", &p.timers.processing, model.processing, 0, modelKeyGroups-1)
		if s, ok := p.timers.event.Sets().(*timers.PebbleSets[int64]); ok && s.Cached() > modelKeyGroups*timers.PebbleCache {
			t.Fatalf("step %d: %d timers cached", step, s.Cached())
		}
	}

	type pending struct {
		id    int64
		enc   func(func() bool) ([]byte, []checkpoint.FileHandle, error)
		model timerModel
		done  chan struct{}
		blob  []byte
		files []checkpoint.FileHandle
		err   error
		// started: its encoder runs on a goroutine of its own.
		started bool
	}
	var snap *pending
	var last *checkpoint.Checkpoint
	var lastModel timerModel
	id := int64(0)
	run := func(s *pending, stop func() bool) {
		s.blob, s.files, s.err = s.enc(stop)
		close(s.done)
	}
	const steps = 800
	for step := range steps {
		k := keys[rng.IntN(len(keys))]
		p.state.SetKey(k)
		p.ctx.err = nil
		switch r := rng.IntN(100); {
		case r < 35:
			e := timers.Entry[int64]{Ts: wm + int64(rng.IntN(400)) - 20, Key: k}
			p.ctx.RegisterEventTimeTimer(e.Ts)
			model.event[e] = true
		case r < 45:
			e := timers.Entry[int64]{Ts: far + int64(rng.IntN(300)), Key: k}
			p.ctx.RegisterProcessingTimeTimer(e.Ts)
			model.processing[e] = true
		case r < 55: // a pending timer, or an unknown one
			e := timers.Entry[int64]{Ts: wm + int64(rng.IntN(400)), Key: k}
			for o := range model.event {
				if rng.IntN(3) > 0 {
					e = o
				}
				break
			}
			p.state.SetKey(e.Key)
			p.ctx.DeleteEventTimeTimer(e.Ts)
			delete(model.event, e)
		case r < 60:
			e := timers.Entry[int64]{Ts: far + int64(rng.IntN(300)), Key: k}
			for o := range model.processing {
				e = o
				break
			}
			p.state.SetKey(e.Key)
			p.ctx.DeleteProcessingTimeTimer(e.Ts)
			delete(model.processing, e)
		case r < 70:
			wm += int64(rng.IntN(60))
			advances := wm > p.ctx.watermark // one that does not fires nothing
			if err := p.EmitWatermark(wm); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for e := range model.event {
				if advances && e.Ts <= wm {
					t.Fatalf("step %d: timer %v not fired at watermark %d", step, e, wm)
				}
			}
		case r < 74: // processing time reaches far + until
			until := far + int64(rng.IntN(300))
			for {
				e, ok := p.timers.processing.Peek()
				if !ok || e.Ts > until {
					break
				}
				if err := checkNext(model.processing, e); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if got := p.timers.processing.Pop(); got != e {
					t.Fatalf("step %d: pop %v, peek %v", step, got, e)
				}
				delete(model.processing, e)
			}
		case r < 80 && snap == nil:
			id++
			enc, err := p.FreezeState(id)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			snap = &pending{id: id, enc: enc, model: model.clone(), done: make(chan struct{})}
			if rng.IntN(2) == 0 {
				snap.started = true
				go run(snap, func() bool { return false })
			}
		case r < 88 && snap != nil:
			abandon := !snap.started && rng.IntN(5) == 0
			switch {
			case abandon:
				calls := rng.IntN(4)
				run(snap, func() bool { calls--; return calls < 0 })
			case !snap.started:
				run(snap, func() bool { return false })
			}
			<-snap.done
			p.ThawState()
			if snap.err == nil {
				last = commitBlobs(t, mem, snap.id, [][]byte{snap.blob}, [][]checkpoint.FileHandle{snap.files})
				lastModel = snap.model
			} else if !abandon {
				t.Fatalf("step %d: snapshot %d: %v", step, snap.id, snap.err)
			}
			snap = nil
		case r < 91 && snap == nil && last != nil:
			for sub := range 3 {
				q, stopQ := openKeyedFromStop(t, unitStateConfig(t, b), last, modelKeyGroups, 3, sub, fn)
				lo, hi := keygroup.Range(sub, 3, modelKeyGroups)
				equal(step, fmt.Sprintf("subtask %d of 3, event-time", sub), &q.timers.event, lastModel.event, lo, hi)
				equal(step, fmt.Sprintf("subtask %d of 3, processing-time", sub), &q.timers.processing, lastModel.processing, lo, hi)
				stopQ()
			}
			stop()
			p, stop = openKeyedFromStop(t, sc, last, modelKeyGroups, 1, 0, fn)
			useMem()
			model = lastModel.clone()
		}
		if failure != nil {
			t.Fatalf("step %d: %v", step, failure)
		}
		if step%25 == 0 || step == steps-1 {
			check(step)
		}
	}
	if snap != nil {
		if !snap.started {
			run(snap, func() bool { return false })
		}
		<-snap.done
		p.ThawState()
	}
	check(steps)
}

// openKeyedFromStop is openKeyedFrom returning the operator's stop, for a
// test that opens many, at max parallelism maxPar.
func openKeyedFromStop[K comparable](t *testing.T, sc stateConfig, chk *checkpoint.Checkpoint, maxPar, par, sub int, fn KeyedProcessFuncs[K, K, string]) (*keyedProcessOperator[K, K, string], func()) {
	t.Helper()
	hash, err := stableHasher[K]()
	if err != nil {
		t.Fatal(err)
	}
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: maxPar, state: sc}, mb: engine.NewMailbox(),
		restored: &engine.RestoredState{Chk: chk}}
	p := &keyedProcessOperator[K, K, string]{info: engine.OpInfo{Name: "p", UID: "op", Subtask: sub}, keyFn: func(k K) K { return k },
		hash: hash, par: par, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[K, K, string] { return fn }}
	stop := func() { _ = tk.shutdown(); _ = p.Close() }
	if err := openOp(p, tk); err != nil {
		stop()
		t.Fatal(err)
	}
	return p, stop
}
