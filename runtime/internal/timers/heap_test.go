package timers

import (
	"math/rand/v2"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
)

// newTestQueue is a heap backend's queue over one key group.
func newTestQueue[K comparable]() *Queue[K] {
	q := NewQueue(1, func(K) int { return 0 }, Sets[K](NewHeapSets(&keyed.State[K]{Common: &keyed.Common{}}, 1)))
	return &q
}

// Rule (C): a deleted timer leaves the heap at once: "delete the old timer,
// register now+1h" per record keeps the heap at the number of live timers.
func TestDeletedTimersDoNotGrowTheHeap(t *testing.T) {
	q := newTestQueue[int]()
	n := func() int { return q.sets.(*HeapSets[int]).len() }
	for i := range 100_000 {
		key := i % 10
		if i >= 10 {
			q.Remove(key, int64(i-10)+3_600_000)
		}
		q.Add(key, int64(i)+3_600_000)
		if n() > 20 {
			t.Fatalf("after %d records the heap holds %d entries for 10 live timers", i+1, n())
		}
	}
	// And the queue still pops in timestamp order, deletions included.
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[Entry[int]]bool{}
	for range 20_000 {
		k, ts := rng.IntN(50), rng.Int64N(1000)
		if rng.IntN(3) == 0 {
			q.Remove(k, ts)
			delete(live, Entry[int]{Ts: ts, Key: k})
		} else {
			q.Add(k, ts)
			live[Entry[int]{Ts: ts, Key: k}] = true
		}
	}
	all, err := q.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if !live[e] && e.Ts < 3_600_000 {
			t.Fatalf("heap holds deleted timer %+v", e)
		}
	}
	last := int64(-1)
	for {
		e, ok := q.Peek()
		if !ok {
			break
		}
		q.Pop()
		if e.Ts < last {
			t.Fatalf("popped %d after %d", e.Ts, last)
		}
		last = e.Ts
		delete(live, e)
	}
	if len(live) != 0 {
		t.Fatalf("%d live timers never popped", len(live))
	}
}
