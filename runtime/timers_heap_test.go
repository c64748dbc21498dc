package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// Rule (C): a deleted timer leaves the heap at once: "delete the old timer,
// register now+1h" per record keeps the heap at the number of live timers.
func TestDeletedTimersDoNotGrowTheHeap(t *testing.T) {
	q := newTestTimerQueue[int]()
	n := func() int { return q.sets.(*heapTimerSets[int]).len() }
	for i := range 100_000 {
		key := i % 10
		if i >= 10 {
			q.remove(key, int64(i-10)+3_600_000)
		}
		q.add(key, int64(i)+3_600_000)
		if n() > 20 {
			t.Fatalf("after %d records the heap holds %d entries for 10 live timers", i+1, n())
		}
	}
	// And the queue still pops in timestamp order, deletions included.
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[timerEntry[int]]bool{}
	for range 20_000 {
		k, ts := rng.IntN(50), rng.Int64N(1000)
		if rng.IntN(3) == 0 {
			q.remove(k, ts)
			delete(live, timerEntry[int]{ts: ts, key: k})
		} else {
			q.add(k, ts)
			live[timerEntry[int]{ts: ts, key: k}] = true
		}
	}
	for _, e := range q.all() {
		if !live[e] && e.ts < 3_600_000 {
			t.Fatalf("heap holds deleted timer %+v", e)
		}
	}
	last := int64(-1)
	for {
		e, ok := q.peek()
		if !ok {
			break
		}
		q.pop()
		if e.ts < last {
			t.Fatalf("popped %d after %d", e.ts, last)
		}
		last = e.ts
		delete(live, e)
	}
	if len(live) != 0 {
		t.Fatalf("%d live timers never popped", len(live))
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
