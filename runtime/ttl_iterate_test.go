package runtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/state"
)

// Rule: a loop over All() of a map state keeps what its body writes and
// removes, with a TTL as without one. The TTL's cleanup after the loop
// (removing the expired entries it skipped, renewing the entries it read
// with TTLOnReadAndWrite) goes by what the map holds once the loop ends:
// before, it wrote back the values read before the loop (undoing a Put
// and a Remove of the body) and removed a fresh value written under a key
// that had expired.
func TestTTLMapKeepsWritesMadeWhileIterated(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		for _, c := range []struct {
			name string
			opts []state.Option
		}{
			{"no-ttl", nil},
			{"ttl-on-write", []state.Option{state.WithTTL(time.Minute)}},
			{"ttl-on-read", []state.Option{state.WithTTL(time.Minute, state.TTLOnReadAndWrite)}},
		} {
			t.Run(c.name, func(t *testing.T) {
				d := state.NewMapState[string, int64]("iter-"+c.name, c.opts...)
				clock := &fakeClock{}
				p, stop := openTTL(t, sc, nil, clock)
				defer stop()
				p.state.SetKey("k")
				m, err := d.Handle(&p.ctx)
				if err != nil {
					t.Fatal(err)
				}
				m.Put("e", 1) // expires at 60s
				clock.set(30 * time.Second)
				m.Put("x", 1)
				m.Put("y", 2)
				clock.set(70 * time.Second) // e expired (with a TTL); x and y live
				first := true
				for range m.All() {
					if first {
						first = false
						m.Put("x", 100)
						m.Remove("y")
						m.Put("e", 5)
					}
				}
				if p.state.Err != nil {
					t.Fatal(p.state.Err)
				}
				if v, ok := m.Get("x"); !ok || v != 100 {
					t.Errorf("x written in the loop reads %d, %v after it; want 100", v, ok)
				}
				if v, ok := m.Get("y"); ok {
					t.Errorf("y removed in the loop reads %d after it; want absent", v)
				}
				if v, ok := m.Get("e"); !ok || v != 5 {
					t.Errorf("e written afresh in the loop reads %d, %v after it; want 5", v, ok)
				}
			})
		}
	})
}

// Len counts a map's live entries; it reads no value, so with
// TTLOnReadAndWrite it renews none.
func TestTTLMapLenRenewsNothing(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewMapState[string, int64]("len-ttl", state.WithTTL(time.Minute, state.TTLOnReadAndWrite))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		p.state.SetKey("k")
		m, err := d.Handle(&p.ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Put("x", 1)
		clock.set(40 * time.Second)
		if n := m.Len(); n != 1 {
			t.Fatalf("Len at 40s = %d; want 1", n)
		}
		clock.set(time.Minute)
		if v, ok := m.Get("x"); ok {
			t.Fatalf("x, written at 0 and counted by Len at 40s, reads %d at 60s; want expired (Len renewed it)", v)
		}
	})
}

// Rule: the heap backend's incremental TTL cleanup reaches every key of
// every slot, however many live values a slot holds, so that a state with
// a TTL stays bounded by what is live. Before, a slot holding more values
// than one access's budget was sampled and the cleanup never moved past
// it: with thousands of live keys almost every expired value stayed in
// memory, and one key with many live map entries held the cleanup on its
// slot for good.
func TestTTLHeapCleanupReachesEveryKey(t *testing.T) {
	sc := stateConfig{backend: kindHeap}
	const live, old, accesses = 20000, 2000, 20000
	t.Run("value", func(t *testing.T) {
		d := state.NewValueState[int64]("reach-v", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		for i := range old {
			setValue(t, p, d, fmt.Sprint("old", i), 1)
		}
		clock.set(30 * time.Second)
		for i := range live {
			setValue(t, p, d, fmt.Sprint("live", i), 1)
		}
		clock.set(70 * time.Second) // the old values expired, the live ones expire at 90s
		for range accesses {
			getValue(t, p, d, "live0")
		}
		if n := stateEntryCount(t, p, "reach-v"); n != live {
			t.Fatalf("%d values held after %d accesses; want the %d live ones (%d expired left)", n, accesses, live, n-live)
		}
	})
	t.Run("map", func(t *testing.T) {
		d := state.NewMapState[string, int64]("reach-m", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		for i := range 400 {
			p.state.SetKey(fmt.Sprint("old", i))
			if err := d.Put(&p.ctx, "e", 1); err != nil {
				t.Fatal(err)
			}
		}
		clock.set(30 * time.Second)
		p.state.SetKey("wide")
		for i := range 50 {
			if err := d.Put(&p.ctx, fmt.Sprint("e", i), 1); err != nil {
				t.Fatal(err)
			}
		}
		clock.set(70 * time.Second)
		for range 5000 {
			if _, _, err := d.Get(&p.ctx, "e0"); err != nil {
				t.Fatal(err)
			}
		}
		if n := stateEntryCount(t, p, "reach-m"); n != 50 {
			t.Fatalf("%d map entries held after 5000 accesses; want the wide key's 50 live ones (%d expired left)", n, n-50)
		}
	})
	t.Run("list", func(t *testing.T) {
		d := state.NewListState[int64]("reach-l", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		for i := range old {
			addTo(t, p, d, fmt.Sprint("old", i), 1)
		}
		clock.set(30 * time.Second)
		for i := range live {
			addTo(t, p, d, fmt.Sprint("live", i), 1)
		}
		clock.set(70 * time.Second)
		for range accesses {
			ttlListOf(t, p, d, "live0")
		}
		if n := stateEntryCount(t, p, "reach-l"); n != live {
			t.Fatalf("%d elements held after %d accesses; want the %d live ones (%d expired left)", n, accesses, live, n-live)
		}
	})
}
