package runtime

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/state"
)

// ttlSnapshots numbers the snapshots stateEntryCount takes.
var ttlSnapshots int64

// fakeClock is a processing-time clock a test moves by hand.
type fakeClock struct{ ms int64 }

func (c *fakeClock) now() int64          { return c.ms }
func (c *fakeClock) set(d time.Duration) { c.ms = d.Milliseconds() }
func (c *fakeClock) onto(p *keyedProcessOperator[string, string, string]) {
	p.state.Clock = c.now
}

// openTTL opens a string-keyed operator on sc (restoring chk when not
// nil) whose TTL states follow clock.
func openTTL(t *testing.T, sc stateConfig, chk *checkpoint.Checkpoint, clock *fakeClock) (*keyedProcessOperator[string, string, string], func()) {
	t.Helper()
	p, stop, err := openStringKeyed(t, sc, chk)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	clock.onto(p)
	return p, stop
}

func getValue(t *testing.T, p *keyedProcessOperator[string, string, string], d *state.ValueStateDescriptor[int64], key string) (int64, bool) {
	t.Helper()
	p.state.SetKey(key)
	v, ok, err := d.Get(&p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

func setValue(t *testing.T, p *keyedProcessOperator[string, string, string], d *state.ValueStateDescriptor[int64], key string, v int64) {
	t.Helper()
	p.state.SetKey(key)
	if err := d.Set(&p.ctx, v); err != nil {
		t.Fatal(err)
	}
}

// stateEntryCount is how many entries (values, map entries or list elements) state
// name holds in p, expired or not: on the heap backend the entries of its
// maps, on pebble the DB's entries of its id after a snapshot has applied
// the write buffer to the DB.
func stateEntryCount(t *testing.T, p *keyedProcessOperator[string, string, string], name string) int {
	t.Helper()
	if pk := p.state.Pebble; pk != nil {
		// A snapshot applies the write buffer to the DB.
		if pk.Storage == nil {
			mem, err := checkpoint.NewMemoryStorage()
			if err != nil {
				t.Fatal(err)
			}
			pk.Storage = mem
		}
		ttlSnapshots++
		snapshotNow(t, p, ttlSnapshots)
		id := pk.IDs[name].ID
		n := 0
		lo, hi := pebblestate.AppendKeyPrefix(nil, 0, 0), pebblestate.PrefixEnd(pebblestate.AppendKeyPrefix(nil, 0xffff, 0xffff))
		err := pk.Store.ScanDB(lo, hi, func(k, _ []byte) ([]byte, bool) {
			if len(k) >= 4 && uint16(k[2])<<8|uint16(k[3]) == id {
				n++
			}
			return nil, true
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := 0
	s, ok := p.state.States[name].(interface{ Entries() int })
	if !ok {
		t.Fatalf("state %q is a %T", name, p.state.States[name])
	}
	n = s.Entries()
	return n
}

// A value expires ttl after its last write, read or not (the default
// update type), reads as absent from then on, and is removed.
func TestTTLValueExpiresAfterWrite(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewValueState[int64]("ttl-count", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		setValue(t, p, d, "a", 1)
		clock.set(30 * time.Second)
		setValue(t, p, d, "b", 2)
		clock.set(59*time.Second + 999*time.Millisecond)
		if v, ok := getValue(t, p, d, "a"); !ok || v != 1 {
			t.Fatalf("a just before its ttl = %d, %v; want 1", v, ok)
		}
		clock.set(time.Minute)
		if v, ok := getValue(t, p, d, "a"); ok {
			t.Fatalf("a after its ttl = %d, present; want absent (a read does not renew it)", v)
		}
		if v, ok := getValue(t, p, d, "b"); !ok || v != 2 {
			t.Fatalf("b, written 30s later = %d, %v; want 2", v, ok)
		}
		clock.set(90 * time.Second)
		if _, ok := getValue(t, p, d, "b"); ok {
			t.Fatal("b after its ttl is present")
		}
		setValue(t, p, d, "a", 3)
		if v, ok := getValue(t, p, d, "a"); !ok || v != 3 {
			t.Fatalf("a written again = %d, %v; want 3", v, ok)
		}
		if n := stateEntryCount(t, p, "ttl-count"); n != 1 {
			t.Fatalf("the state holds %d entries after the expired ones were read; want 1", n)
		}
	})
}

// With TTLOnReadAndWrite a read renews the value: one read every 40s of a
// 1m TTL keeps it for good; once left alone for a minute it expires.
func TestTTLOnReadAndWriteKeepsReadValueAlive(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewValueState[int64]("ttl-read", state.WithTTL(time.Minute, state.TTLOnReadAndWrite))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		setValue(t, p, d, "a", 7)
		for i := 1; i <= 5; i++ {
			clock.set(time.Duration(i) * 40 * time.Second)
			if v, ok := getValue(t, p, d, "a"); !ok || v != 7 {
				t.Fatalf("read %d, %v after the write: %d, %v; want 7", i, clock.ms, v, ok)
			}
		}
		clock.set(200*time.Second + time.Minute)
		if _, ok := getValue(t, p, d, "a"); ok {
			t.Fatal("a minute after its last read the value is present")
		}
	})
}

// Map entries expire one by one, each ttl after its own write; Len, All
// and Contains see only the live ones.
func TestTTLMapEntriesExpireOneByOne(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewMapState[string, int64]("ttl-map", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		p.state.SetKey("k")
		ctx := &p.ctx
		m, err := d.Handle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, uk := range []string{"x", "y", "z"} {
			clock.set(time.Duration(i) * 20 * time.Second)
			m.Put(uk, int64(i))
		}
		live := func() []string {
			return slices.Sorted(maps.Keys(maps.Collect(m.All())))
		}
		for _, c := range []struct {
			at   time.Duration
			want []string
		}{
			{59 * time.Second, []string{"x", "y", "z"}},
			{60 * time.Second, []string{"y", "z"}},
			{80 * time.Second, []string{"z"}},
			{100 * time.Second, []string{}},
		} {
			clock.set(c.at)
			if got := live(); !slices.Equal(got, c.want) {
				t.Fatalf("at %v: entries %v; want %v", c.at, got, c.want)
			}
			if m.Len() != len(c.want) {
				t.Fatalf("at %v: Len %d; want %d", c.at, m.Len(), len(c.want))
			}
			if got := m.Contains("z"); got != (len(c.want) > 0) {
				t.Fatalf("at %v: Contains(z) = %v", c.at, got)
			}
		}
		if _, ok, err := d.Get(ctx, "x"); err != nil || ok {
			t.Fatalf("Get(x) after expiry: %v, %v", ok, err)
		}
		if p.state.Err != nil {
			t.Fatal(p.state.Err)
		}
		if n := stateEntryCount(t, p, "ttl-map"); n != 0 {
			t.Fatalf("the map holds %d entries after all expired and were seen; want 0", n)
		}
	})
}

// A checkpoint taken after values expired does not bring them back; the
// live ones are restored with their timestamps and expire on time after
// the restore. On the heap backend the snapshot leaves expired values
// out; on pebble they are in the DB's files until cleaned, and read as
// absent.
func TestTTLCheckpointAndRestore(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewValueState[int64]("ttl-v", state.WithTTL(time.Minute))
		md := state.NewMapState[string, int64]("ttl-m", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		for i := range 10 {
			if i == 5 {
				clock.set(50 * time.Second)
			}
			key := fmt.Sprint("k", i)
			setValue(t, p, d, key, int64(i))
			if err := md.Put(&p.ctx, "e", int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		clock.set(70 * time.Second) // k0-k4 expired, k5-k9 expire at 110s
		chk := checkpointOf(t, p)
		stop()

		q, stopQ := openTTL(t, sc, chk, clock)
		defer stopQ()
		if sc.backend == kindHeap {
			getValue(t, q, d, "k9") // declares the states
			q.state.SetKey("k9")
			if _, _, err := md.Get(&q.ctx, "e"); err != nil {
				t.Fatal(err)
			}
			if n := stateEntryCount(t, q, "ttl-v"); n != 5 {
				t.Fatalf("the heap snapshot restored %d values; want the 5 live ones", n)
			}
			if n := stateEntryCount(t, q, "ttl-m"); n != 5 {
				t.Fatalf("the heap snapshot restored %d map entries; want the 5 live ones", n)
			}
		}
		for i := range 10 {
			key := fmt.Sprint("k", i)
			v, ok := getValue(t, q, d, key)
			q.state.SetKey(key)
			mv, mok, err := md.Get(&q.ctx, "e")
			if err != nil {
				t.Fatal(err)
			}
			if live := i >= 5; ok != live || mok != live || (live && (v != int64(i) || mv != int64(i))) {
				t.Fatalf("%s after the restore: value %d, %v; map entry %d, %v; want live=%v", key, v, ok, mv, mok, live)
			}
		}
		clock.set(110 * time.Second)
		for i := 5; i < 10; i++ {
			if _, ok := getValue(t, q, d, fmt.Sprint("k", i)); ok {
				t.Fatalf("k%d, written at 50s, is present at 110s after the restore", i)
			}
		}
	})
}

// Keys never read again still lose their expired values: accesses to the
// state for another key clean the rest incrementally, on both backends,
// for value and map states.
func TestTTLIncrementalCleanupOfUntouchedKeys(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		d := state.NewValueState[int64]("ttl-inc-v", state.WithTTL(time.Minute))
		md := state.NewMapState[string, int64]("ttl-inc-m", state.WithTTL(time.Minute))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		defer stop()
		const keys = 300
		for i := range keys {
			key := fmt.Sprint("old", i)
			setValue(t, p, d, key, int64(i))
			for _, uk := range []string{"a", "b"} {
				if err := md.Put(&p.ctx, uk, int64(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := stateEntryCount(t, p, "ttl-inc-v"); n != keys {
			t.Fatalf("%d values before expiry; want %d", n, keys)
		}
		if n := stateEntryCount(t, p, "ttl-inc-m"); n != 2*keys {
			t.Fatalf("%d map entries before expiry; want %d", n, 2*keys)
		}
		clock.set(2 * time.Minute)
		// One key, read and written: 2000 accesses to each state.
		for i := range 1000 {
			setValue(t, p, d, "hot", int64(i))
			getValue(t, p, d, "hot")
			if err := md.Put(&p.ctx, "a", int64(i)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := md.Get(&p.ctx, "a"); err != nil {
				t.Fatal(err)
			}
		}
		if n := stateEntryCount(t, p, "ttl-inc-v"); n != 1 {
			t.Fatalf("%d values after the cleanup; want only the hot key's", n)
		}
		if n := stateEntryCount(t, p, "ttl-inc-m"); n != 1 {
			t.Fatalf("%d map entries after the cleanup; want only the hot key's", n)
		}
		// Without incremental cleanup they stay until read.
		off := state.NewValueState[int64]("ttl-off", state.WithTTL(time.Minute, state.TTLCleanupPerAccess(0)))
		clock.set(3 * time.Minute)
		for i := range 50 {
			setValue(t, p, off, fmt.Sprint("old", i), 1)
		}
		clock.set(5 * time.Minute)
		for range 200 {
			getValue(t, p, off, "hot")
		}
		if pk := p.state.Pebble; pk == nil {
			n := p.state.States["ttl-off"].(interface{ Entries() int }).Entries()
			if n != 50 {
				t.Fatalf("TTLCleanupPerAccess(0): %d values left; want the 50 expired ones still held", n)
			}
		}
	})
}

// Turning TTL on or off for a state refuses the restore at its first
// use, naming the state, with an error no restart can mend; the same
// declaration restores.
func TestTTLTurnedOnOrOffRefusesRestore(t *testing.T) {
	forEachUnitBackend(t, func(t *testing.T, sc stateConfig) {
		plain := state.NewValueState[int64]("plain-v")
		withTTL := state.NewValueState[int64]("ttl-v", state.WithTTL(time.Hour))
		plainMap := state.NewMapState[string, int64]("plain-m")
		ttlMap := state.NewMapState[string, int64]("ttl-m", state.WithTTL(time.Hour))
		clock := &fakeClock{}
		p, stop := openTTL(t, sc, nil, clock)
		setValue(t, p, plain, "a", 1)
		setValue(t, p, withTTL, "a", 2)
		for _, m := range []*state.MapStateDescriptor[string, int64]{plainMap, ttlMap} {
			if err := m.Put(&p.ctx, "e", 3); err != nil {
				t.Fatal(err)
			}
		}
		chk := checkpointOf(t, p)
		stop()
		for _, c := range []struct {
			name, state, want string
			get               func(ctx state.Context) error
		}{
			{"value: ttl turned on", "plain-v", "without a TTL", func(ctx state.Context) error {
				_, _, err := state.NewValueState[int64]("plain-v", state.WithTTL(time.Hour)).Get(ctx)
				return err
			}},
			{"value: ttl turned off", "ttl-v", "with a TTL", func(ctx state.Context) error {
				_, _, err := state.NewValueState[int64]("ttl-v").Get(ctx)
				return err
			}},
			{"map: ttl turned on", "plain-m", "without a TTL", func(ctx state.Context) error {
				_, _, err := state.NewMapState[string, int64]("plain-m", state.WithTTL(time.Hour)).Get(ctx, "e")
				return err
			}},
			{"map: ttl turned off", "ttl-m", "with a TTL", func(ctx state.Context) error {
				_, _, err := state.NewMapState[string, int64]("ttl-m").Get(ctx, "e")
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				q, stop := openTTL(t, sc, chk, clock)
				defer stop()
				q.state.SetKey("a")
				err := c.get(&q.ctx)
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.state)) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Get: %v; want an error naming state %q, checkpointed %s", err, c.state, c.want)
				}
				var ue *unrecoverableError
				if !errors.As(err, &ue) {
					t.Fatalf("Get: %v (%T) would restart the job; want it to fail at once", err, err)
				}
			})
		}
		// A changed ttl restores: the value is 1 h old at most.
		q, stopQ := openTTL(t, sc, chk, clock)
		defer stopQ()
		if v, ok := getValue(t, q, state.NewValueState[int64]("ttl-v", state.WithTTL(2*time.Hour, state.TTLOnReadAndWrite)), "a"); !ok || v != 2 {
			t.Fatalf("ttl-v restored with another ttl: %d, %v; want 2", v, ok)
		}
	})
}

// A ttl under a millisecond, or options that make no sense, stop the
// program where the descriptor is made, naming the state, for every kind
// of state.
func TestWithTTLInvalidPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		make func()
		want string
	}{
		{"zero", func() { state.NewValueState[int64]("bad-zero", state.WithTTL(0)) }, `"bad-zero"`},
		{"negative", func() { state.NewMapState[string, int64]("bad-neg", state.WithTTL(-time.Second)) }, `"bad-neg"`},
		{"sub-millisecond", func() { state.NewValueState[int64]("bad-us", state.WithTTL(500*time.Microsecond)) }, "at least 1ms"},
		{"cleanup size", func() { state.NewValueState[int64]("bad-n", state.WithTTL(time.Second, state.TTLCleanupPerAccess(-1))) }, `"bad-n"`},
		{"list", func() { state.NewListState[int64]("bad-list", state.WithTTL(time.Microsecond)) }, `"bad-list"`},
		{"reducing", func() {
			state.NewReducingState("bad-reduce", func(a, b int64) int64 { return a + b }, state.WithTTL(0))
		}, `"bad-reduce"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), c.want) {
					t.Fatalf("recovered %v; want a panic naming %s", r, c.want)
				}
			}()
			c.make()
		})
	}
}

// The heap snapshot's filter runs on the encoder goroutine while the task
// goes on writing, expiring and cleaning: under -race, the snapshot holds
// the live values as of the freeze.
func TestTTLSnapshotWhileCleaning(t *testing.T) {
	d := state.NewValueState[int64]("ttl-race", state.WithTTL(time.Minute))
	clock := &fakeClock{}
	p, stop := openTTL(t, stateConfig{backend: kindHeap}, nil, clock)
	defer stop()
	for i := range 500 {
		if i == 250 {
			clock.set(30 * time.Second)
		}
		setValue(t, p, d, fmt.Sprint("k", i), int64(i))
	}
	clock.set(70 * time.Second) // the first 250 expired
	enc, err := p.FreezeState(1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []byte)
	go func() {
		blob, _, err := enc(func() bool { return false })
		if err != nil {
			t.Error(err)
		}
		done <- blob
	}()
	clock.set(100 * time.Second) // all expired now, for the task
	for i := range 500 {
		getValue(t, p, d, fmt.Sprint("k", i))
	}
	blob := <-done
	p.ThawState()
	if n := stateEntryCount(t, p, "ttl-race"); n != 0 {
		t.Fatalf("%d values left after every one was read expired", n)
	}
	r, stopR := openKeyedBlob(t, blob, clock)
	defer stopR()
	clock.set(70 * time.Second)
	getValue(t, r, d, "k0")
	if n := stateEntryCount(t, r, "ttl-race"); n != 250 {
		t.Fatalf("the snapshot holds %d values; want the 250 live at the freeze", n)
	}
}

// openKeyedBlob opens a heap operator restored from one subtask's blob.
func openKeyedBlob(t *testing.T, blob []byte, clock *fakeClock) (*keyedProcessOperator[string, string, string], func()) {
	t.Helper()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	w, err := mem.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.WriteState(checkpoint.OperatorOwner("op", 0), blob)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1, States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	chk, err := mem.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	return openTTL(t, stateConfig{backend: kindHeap}, chk, clock)
}
