package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/state"
)

func ttlListOf(t *testing.T, p *keyedProcessOperator[string, string, string], d *state.ListStateDescriptor[int64], key string) []int64 {
	t.Helper()
	p.state.SetKey(key)
	seq, err := d.Get(&p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Collect(seq)
}

func addTo(t *testing.T, p *keyedProcessOperator[string, string, string], d *state.ListStateDescriptor[int64], key string, vs ...int64) {
	t.Helper()
	p.state.SetKey(key)
	if err := d.AddAll(&p.ctx, vs); err != nil {
		t.Fatal(err)
	}
}

// Rule (Flink's TtlListState): each element of a list with TTL has its
// own timestamp and expires on its own, ttl after it was added; reads
// never return an expired element, keep the order of the rest, and
// remove the expired ones; Update renews every element.
func TestTTLListElementsExpireOneByOne(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewListState[int64]("ttl-list", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		addTo(t, p, d, "a", 1)
		clock.set(30 * time.Second)
		addTo(t, p, d, "a", 2, 3)
		clock.set(50 * time.Second)
		addTo(t, p, d, "a", 4)
		for _, c := range []struct {
			at   time.Duration
			want []int64
		}{
			{59*time.Second + 999*time.Millisecond, []int64{1, 2, 3, 4}},
			{60 * time.Second, []int64{2, 3, 4}},
			{90 * time.Second, []int64{4}},
			{110 * time.Second, nil},
		} {
			clock.set(c.at)
			if got := ttlListOf(t, p, d, "a"); !slices.Equal(got, c.want) {
				t.Fatalf("at %v: list %v; want %v", c.at, got, c.want)
			}
		}
		if n := stateEntryCount(t, p, "ttl-list"); n != 0 {
			t.Fatalf("%d elements held after all expired and were read; want 0", n)
		}
		// Update stamps every element with its time.
		addTo(t, p, d, "b", 1)
		clock.set(150 * time.Second)
		p.state.SetKey("b")
		if err := d.Update(&p.ctx, []int64{7, 8}); err != nil {
			t.Fatal(err)
		}
		clock.set(209 * time.Second)
		if got := ttlListOf(t, p, d, "b"); !slices.Equal(got, []int64{7, 8}) {
			t.Fatalf("59s after Update: %v; want [7 8]", got)
		}
		clock.set(210 * time.Second)
		if got := ttlListOf(t, p, d, "b"); len(got) != 0 {
			t.Fatalf("60s after Update: %v; want none", got)
		}
	})
}

// With TTLOnReadAndWrite a read renews every element it returns.
func TestTTLListOnReadAndWriteRenewsReadElements(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewListState[int64]("ttl-list-rw", state.WithTTL(time.Minute, state.TTLOnReadAndWrite))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		addTo(t, p, d, "a", 1)
		clock.set(20 * time.Second)
		addTo(t, p, d, "a", 2)
		clock.set(50 * time.Second)
		if got := ttlListOf(t, p, d, "a"); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("at 50s: %v", got)
		}
		clock.set(109 * time.Second) // read at 50s: alive until 110s
		if got := ttlListOf(t, p, d, "a"); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("at 109s, read at 50s: %v; want both renewed", got)
		}
		clock.set(169 * time.Second)
		addTo(t, p, d, "a", 3)
		clock.set(170 * time.Second) // last read at 109s
		if got := ttlListOf(t, p, d, "a"); !slices.Equal(got, []int64{3}) {
			t.Fatalf("at 170s: %v; want only the element added at 169s", got)
		}
	})
}

// A checkpoint of a list with TTL restores its live elements with their
// timestamps: the heap snapshot leaves expired elements out, and on both
// backends restored elements expire on their own time.
func TestTTLListCheckpointAndRestore(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewListState[int64]("ttl-l", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		for i := range 10 {
			addTo(t, p, d, fmt.Sprint("k", i), int64(i))
		}
		clock.set(50 * time.Second)
		for i := range 10 {
			addTo(t, p, d, fmt.Sprint("k", i), int64(100+i))
		}
		clock.set(70 * time.Second) // the first elements expired
		chk := checkpointOf(t, p)
		stop()

		q, stopQ := openTTL(t, sc, chk, clock)
		defer stopQ()
		if sc.backend == kindHeap {
			ttlListOf(t, q, d, "k0") // declares the state, removes k0's expired element
			if n := stateEntryCount(t, q, "ttl-l"); n != 10 {
				t.Fatalf("the heap snapshot restored %d elements; want the 10 live ones", n)
			}
		}
		for i := range 10 {
			if got := ttlListOf(t, q, d, fmt.Sprint("k", i)); !slices.Equal(got, []int64{int64(100 + i)}) {
				t.Fatalf("k%d after the restore: %v; want [%d]", i, got, 100+i)
			}
		}
		clock.set(110 * time.Second)
		for i := range 10 {
			if got := ttlListOf(t, q, d, fmt.Sprint("k", i)); len(got) != 0 {
				t.Fatalf("k%d at 110s after the restore: %v; want none", i, got)
			}
		}
	})
}

// Lists of keys never read again lose their expired elements as the
// state is used for another key, on both backends.
func TestTTLListIncrementalCleanupOfUntouchedKeys(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewListState[int64]("ttl-inc-l", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		const keys = 300
		for i := range keys {
			addTo(t, p, d, fmt.Sprint("old", i), int64(i), int64(i))
		}
		if n := stateEntryCount(t, p, "ttl-inc-l"); n != 2*keys {
			t.Fatalf("%d elements before expiry; want %d", n, 2*keys)
		}
		clock.set(2 * time.Minute)
		p.state.SetKey("hot")
		for i := range 1000 {
			if err := d.Update(&p.ctx, []int64{int64(i)}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Get(&p.ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := stateEntryCount(t, p, "ttl-inc-l"); n != 1 {
			t.Fatalf("%d elements after the cleanup; want only the hot key's", n)
		}
	})
}

// Turning TTL on or off for a list refuses the restore, naming the
// state, as for a ValueState.
func TestTTLListTurnedOnOrOffRefusesRestore(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		addTo(t, p, state.NewListState[int64]("plain-l"), "a", 1)
		addTo(t, p, state.NewListState[int64]("ttl-l", state.WithTTL(time.Hour)), "a", 2)
		chk := checkpointOf(t, p)
		stop()
		for _, c := range []struct {
			state, want string
			d           *state.ListStateDescriptor[int64]
		}{
			{"plain-l", "without a TTL", state.NewListState[int64]("plain-l", state.WithTTL(time.Hour))},
			{"ttl-l", "with a TTL", state.NewListState[int64]("ttl-l")},
		} {
			t.Run(c.state, func(t *testing.T) {
				q, stop := openTTL(t, sc, chk, clock)
				defer stop()
				q.state.SetKey("a")
				_, err := c.d.Get(&q.ctx)
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.state)) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Get: %v; want an error naming state %q, checkpointed %s", err, c.state, c.want)
				}
				var ue *unrecoverableError
				if !errors.As(err, &ue) {
					t.Fatalf("Get: %v (%T) would restart the job; want it to fail at once", err, err)
				}
			})
		}
	})
}

// ReducingState and AggregatingState are a ValueState underneath, so
// WithTTL gives their value a time to live as it does a ValueState's.
func TestTTLReducingAndAggregatingStateExpire(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		sum := state.NewReducingState("ttl-sum", func(a, b int64) int64 { return a + b }, state.WithTTL(time.Minute))
		avg := state.NewAggregatingState[int64, avgAcc, float64]("ttl-avg", avgOf, state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		p.state.SetKey("a")
		for _, v := range []int64{2, 4} {
			if err := sum.Add(&p.ctx, v); err != nil {
				t.Fatal(err)
			}
			if err := avg.Add(&p.ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		clock.set(59 * time.Second)
		if s, ok, err := sum.Get(&p.ctx); err != nil || !ok || s != 6 {
			t.Fatalf("sum at 59s: %d, %v, %v; want 6", s, ok, err)
		}
		if a, ok, err := avg.Get(&p.ctx); err != nil || !ok || a != 3 {
			t.Fatalf("average at 59s: %v, %v, %v; want 3", a, ok, err)
		}
		clock.set(60 * time.Second)
		if s, ok, err := sum.Get(&p.ctx); err != nil || ok {
			t.Fatalf("sum at 60s: %d, %v, %v; want none", s, ok, err)
		}
		if a, ok, err := avg.Get(&p.ctx); err != nil || ok {
			t.Fatalf("average at 60s: %v, %v, %v; want none", a, ok, err)
		}
		if err := sum.Add(&p.ctx, 5); err != nil {
			t.Fatal(err)
		}
		if s, _, _ := sum.Get(&p.ctx); s != 5 {
			t.Fatalf("sum after expiry and one Add: %d; want 5 (a new value)", s)
		}
	})
}

type avgAcc struct{ Sum, N int64 }

// avgOf is the mean of int64s.
var avgOf = state.Aggregator[int64, avgAcc, float64]{
	Create: func() avgAcc { return avgAcc{} },
	Add:    func(a avgAcc, v int64) avgAcc { return avgAcc{a.Sum + v, a.N + 1} },
	Result: func(a avgAcc) float64 { return float64(a.Sum) / float64(a.N) },
	Merge:  func(a, b avgAcc) avgAcc { return avgAcc{a.Sum + b.Sum, a.N + b.N} },
}

// Rule: one state has one TTL. The same name declared twice in one
// operator with another TTL, or once with and once without one, is
// refused with an error naming the state, for every kind of state and
// whether the state is reached through a descriptor's methods or its
// Handle; the same TTL twice is one state.
func TestStateDeclaredTwiceWithOtherTTLRefused(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		for _, c := range []struct {
			name, state   string
			first, second func(ctx *KeyedContext[string, string]) error
		}{
			{"value: other ttl", "v1", func(ctx *KeyedContext[string, string]) error {
				return state.NewValueState[int64]("v1", state.WithTTL(time.Minute)).Set(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, _, err := state.NewValueState[int64]("v1", state.WithTTL(time.Hour)).Get(ctx)
				return err
			}},
			{"value: other update type", "v2", func(ctx *KeyedContext[string, string]) error {
				return state.NewValueState[int64]("v2", state.WithTTL(time.Minute)).Set(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, _, err := state.NewValueState[int64]("v2", state.WithTTL(time.Minute, state.TTLOnReadAndWrite)).Get(ctx)
				return err
			}},
			{"value: a handle without ttl", "v3", func(ctx *KeyedContext[string, string]) error {
				return state.NewValueState[int64]("v3", state.WithTTL(time.Minute)).Set(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, err := state.NewValueState[int64]("v3").Handle(ctx)
				return err
			}},
			{"value: descriptor with ttl after a handle without", "v4", func(ctx *KeyedContext[string, string]) error {
				_, err := state.NewValueState[int64]("v4").Handle(ctx)
				return err
			}, func(ctx *KeyedContext[string, string]) error {
				_, _, err := state.NewValueState[int64]("v4", state.WithTTL(time.Minute)).Get(ctx)
				return err
			}},
			{"map: other ttl", "m1", func(ctx *KeyedContext[string, string]) error {
				return state.NewMapState[string, int64]("m1", state.WithTTL(time.Minute)).Put(ctx, "k", 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, err := state.NewMapState[string, int64]("m1").Handle(ctx)
				return err
			}},
			{"list: other ttl", "l1", func(ctx *KeyedContext[string, string]) error {
				return state.NewListState[int64]("l1", state.WithTTL(time.Minute)).Add(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				return state.NewListState[int64]("l1", state.WithTTL(2*time.Minute)).Add(ctx, 1)
			}},
			{"list: a handle without ttl", "l2", func(ctx *KeyedContext[string, string]) error {
				return state.NewListState[int64]("l2", state.WithTTL(time.Minute)).Add(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, err := state.NewListState[int64]("l2").Handle(ctx)
				return err
			}},
			{"reducing: other ttl than its value state", "r1", func(ctx *KeyedContext[string, string]) error {
				return state.NewValueState[int64]("r1", state.WithTTL(time.Minute)).Set(ctx, 1)
			}, func(ctx *KeyedContext[string, string]) error {
				_, err := state.NewReducingState("r1", func(a, b int64) int64 { return a + b }).Handle(ctx)
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				p, stop := openTTL(t, sc, nil, &fakeClock{})
				defer stop()
				p.state.SetKey("a")
				if err := c.first(&p.ctx); err != nil {
					t.Fatal(err)
				}
				err := c.second(&p.ctx)
				if err == nil || !strings.Contains(err.Error(), "different TTLs") || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.state)) {
					t.Fatalf("second declaration: %v; want it refused for its other TTL, naming state %q", err, c.state)
				}
				var ue *unrecoverableError
				if !errors.As(err, &ue) {
					t.Fatalf("%v (%T) would restart the job; want it to fail at once", err, err)
				}
			})
		}
		// The same TTL from two descriptors is one state with one clock.
		p, stop := openTTL(t, sc, nil, &fakeClock{})
		defer stop()
		p.state.SetKey("a")
		if err := state.NewValueState[int64]("same", state.WithTTL(time.Minute)).Set(&p.ctx, 7); err != nil {
			t.Fatal(err)
		}
		if v, ok, err := state.NewValueState[int64]("same", state.WithTTL(time.Minute)).Get(&p.ctx); err != nil || !ok || v != 7 {
			t.Fatalf("the same state through a second descriptor with the same TTL: %d, %v, %v; want 7", v, ok, err)
		}
	})
}
