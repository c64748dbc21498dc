package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// pebbleSweepEvery: the pebble backend runs its incremental cleanup once
// every so many accesses, over that many times the per-access budget, so
// that the cost of a DB iterator is shared by many accesses.
const pebbleSweepEvery = 32

// TTLUpdate says which accesses renew a value's time to live
// (runtime/state's TTLUpdateType).
type TTLUpdate int

const (
	RenewOnWrite TTLUpdate = iota
	RenewOnReadAndWrite
)

type TTLConfig struct {
	TTL       time.Duration
	Update    TTLUpdate
	PerAccess int
}

// Check refuses a config state name cannot use.
func (c *TTLConfig) Check(name string) {
	switch {
	case c.TTL < time.Millisecond:
		panic(fmt.Sprintf("state %q: WithTTL(%v): the time to live must be at least 1ms", name, c.TTL))
	case c.Update != RenewOnWrite && c.Update != RenewOnReadAndWrite:
		panic(fmt.Sprintf("state %q: WithTTL: unknown update type %d", name, c.Update))
	case c.PerAccess < 0:
		panic(fmt.Sprintf("state %q: TTLCleanupPerAccess(%d): want 0 or more", name, c.PerAccess))
	}
}

func (c *TTLConfig) String() string {
	u := "on create and write"
	if c.Update == RenewOnReadAndWrite {
		u = "on read and write"
	}
	return fmt.Sprintf("ttl %v %s", c.TTL, u)
}

// Now is the processing time of the keyed operator, in milliseconds: the
// job's clock when a test set one, the wall clock otherwise.
func (c *Common) Now() int64 {
	if c.Clock != nil {
		return c.Clock()
	}
	return wallClock()
}

// ttlValue is a value of a state with TTL and the processing time (ms)
// of its last renewal.
type ttlValue[V any] struct {
	ts int64
	v  V
}

// ttlSerde writes a ttlValue as varint(ts) and the value in its codec.
type ttlSerde[V any] struct{ in statecodec.Codec[V] }

func (s ttlSerde[V]) Name() string { return statecodec.TTLSerdePrefix + s.in.String() + ")" }

func (s ttlSerde[V]) Append(dst []byte, v ttlValue[V]) ([]byte, error) {
	return statecodec.AppendOne(binary.AppendVarint(dst, v.ts), s.in, v.v)
}

func (s ttlSerde[V]) Decode(b []byte) (ttlValue[V], error) {
	ts, n := binary.Varint(b)
	if n <= 0 {
		return ttlValue[V]{}, errors.New("short TTL timestamp")
	}
	v, err := statecodec.ReadOne(b[n:], s.in)
	return ttlValue[V]{ts: ts, v: v}, err
}

// ttlCodec is the codec of a TTL state whose values have codec in.
func ttlCodec[V any](in statecodec.Codec[V]) statecodec.Codec[ttlValue[V]] {
	s := ttlSerde[V]{in: in}
	return statecodec.Codec[ttlValue[V]]{ID: statecodec.IDUser, Ext: s, Name: s.Name()}
}

// ttlStamp reads the timestamp of an encoded ttlValue.
func ttlStamp(b []byte) (int64, bool) {
	ts, n := binary.Varint(b)
	return ts, n > 0
}

// ttlClock is what TTL states share: the config and the operator's clock.
type ttlClock struct {
	cfg   *TTLConfig
	ttlMs int64
	c     *Common
	// sweep checks up to n more values for expiry; nil without
	// incremental cleanup.
	sweep func(now int64, n int)
	calls int
}

func newTTLClock(cfg *TTLConfig, c *Common) *ttlClock {
	return &ttlClock{cfg: cfg, ttlMs: cfg.TTL.Milliseconds(), c: c}
}

func (t *ttlClock) expired(ts, now int64) bool { return now-ts >= t.ttlMs }

// access runs the incremental cleanup's share of one access and returns
// the time.
func (t *ttlClock) access() int64 {
	now := t.c.Now()
	if t.sweep != nil && t.cfg.PerAccess > 0 {
		t.sweep(now, t.cfg.PerAccess)
	}
	return now
}

// keepAt is the snapshot filter of the heap backend: called at the
// freeze, it returns what keeps a value at the barrier's time.
func keepAt[V any](t *ttlClock) func() func(ttlValue[V]) bool {
	return func() func(ttlValue[V]) bool {
		now, ttl := t.c.Now(), t.ttlMs
		return func(v ttlValue[V]) bool { return now-v.ts < ttl }
	}
}

// ttlValueState is a ValueState with TTL over a state of ttlValues.
type ttlValueState[V any] struct {
	in Value[ttlValue[V]]
	t  *ttlClock
}

func (s *ttlValueState[V]) Value() (V, bool) {
	now := s.t.access()
	tv, ok := s.in.Value()
	if !ok {
		var zero V
		return zero, false
	}
	if s.t.expired(tv.ts, now) {
		s.in.Clear()
		var zero V
		return zero, false
	}
	if s.t.cfg.Update == RenewOnReadAndWrite && tv.ts != now {
		s.in.Update(ttlValue[V]{ts: now, v: tv.v})
	}
	return tv.v, true
}

func (s *ttlValueState[V]) Update(v V) {
	s.in.Update(ttlValue[V]{ts: s.t.access(), v: v})
}

func (s *ttlValueState[V]) Clear() {
	s.t.access()
	s.in.Clear()
}

// ttlMapState is a MapState with TTL per entry over a map of ttlValues.
type ttlMapState[UK comparable, UV any] struct {
	in Map[UK, ttlValue[UV]]
	t  *ttlClock
}

func (s *ttlMapState[UK, UV]) get(k UK, now int64) (UV, bool) {
	var zero UV
	tv, ok := s.in.Get(k)
	if !ok {
		return zero, false
	}
	if s.t.expired(tv.ts, now) {
		s.in.Remove(k)
		return zero, false
	}
	if s.t.cfg.Update == RenewOnReadAndWrite && tv.ts != now {
		s.in.Put(k, ttlValue[UV]{ts: now, v: tv.v})
	}
	return tv.v, true
}

func (s *ttlMapState[UK, UV]) Get(k UK) (UV, bool) { return s.get(k, s.t.access()) }

func (s *ttlMapState[UK, UV]) Put(k UK, v UV) {
	s.in.Put(k, ttlValue[UV]{ts: s.t.access(), v: v})
}

func (s *ttlMapState[UK, UV]) Remove(k UK) {
	s.t.access()
	s.in.Remove(k)
}

func (s *ttlMapState[UK, UV]) Contains(k UK) bool {
	_, ok := s.get(k, s.t.access())
	return ok
}

// Len counts the live entries. It reads no value, so it renews none,
// even with ttlOnReadAndWrite.
func (s *ttlMapState[UK, UV]) Len() int {
	n := 0
	for range s.live(false) {
		n++
	}
	return n
}

// All iterates the live entries; expired ones are removed (and, with
// ttlOnReadAndWrite, the entries seen renewed) once the iteration ends.
func (s *ttlMapState[UK, UV]) All() iter.Seq2[UK, UV] {
	return s.live(s.t.cfg.Update == RenewOnReadAndWrite)
}

// live iterates the live entries, renewing those it yields when renew is
// set. The removals and renewals wait for the end of the iteration and
// then go by what the map holds, not by what the iteration read: the
// loop's body may have written a key (a fresh value under an expired one
// is not removed, a new value is not overwritten by the old one renewed)
// or removed it (it is not written back).
func (s *ttlMapState[UK, UV]) live(renew bool) iter.Seq2[UK, UV] {
	return func(yield func(UK, UV) bool) {
		now := s.t.access()
		var gone, seen []UK
		for k, tv := range s.in.All() {
			if s.t.expired(tv.ts, now) {
				gone = append(gone, k)
				continue
			}
			if renew && tv.ts != now {
				seen = append(seen, k)
			}
			if !yield(k, tv.v) {
				break
			}
		}
		for _, k := range gone {
			if tv, ok := s.in.Get(k); ok && s.t.expired(tv.ts, now) {
				s.in.Remove(k)
			}
		}
		for _, k := range seen {
			// A write in the loop stamped the entry with now or later.
			if tv, ok := s.in.Get(k); ok && tv.ts < now && !s.t.expired(tv.ts, now) {
				s.in.Put(k, ttlValue[UV]{ts: now, v: tv.v})
			}
		}
	}
}

func (s *ttlMapState[UK, UV]) Clear() {
	s.t.access()
	s.in.Clear()
}

// DeclareValue declares a value state, with TTL when cfg is set.
func DeclareValue[K comparable, V any](ks *State[K], name string, vals statecodec.Codec[V], cfg *TTLConfig) (Value[V], error) {
	if err := sameTTL(ks.Common, name, cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		return declareValue(ks, name, vals)
	}
	in, err := declareValue(ks, name, ttlCodec(vals))
	if err != nil {
		return nil, err
	}
	if h, ok := ks.ttlStates[name].(*ttlValueState[V]); ok {
		return h, nil // one clock and one cleanup per state
	}
	t := newTTLClock(cfg, ks.Common)
	switch s := in.(type) {
	case *HeapValue[K, ttlValue[V]]:
		s.keep = keepAt[V](t)
		var cur sweepCursor[K]
		t.sweep = func(now int64, n int) {
			heapSweepValues(s, &cur, n, func(v ttlValue[V]) bool { return t.expired(v.ts, now) })
		}
	case *pebbleValueState[K, ttlValue[V]]:
		sw := &pebbleSweep{pk: s.pk, id: s.id, name: name, fail: ks.Fail, expired: t.expired}
		t.sweep = sw.access
	}
	h := &ttlValueState[V]{in: in, t: t}
	ks.rememberTTL(name, h)
	return h, nil
}

// DeclareMap declares a map state, with TTL per entry when cfg is set.
func DeclareMap[K, UK comparable, UV any](ks *State[K], name string, ukeys statecodec.Codec[UK], uvals statecodec.Codec[UV], cfg *TTLConfig) (Map[UK, UV], error) {
	if err := sameTTL(ks.Common, name, cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		return DeclareMapNoTTL(ks, name, ukeys, uvals)
	}
	in, err := DeclareMapNoTTL(ks, name, ukeys, ttlCodec(uvals))
	if err != nil {
		return nil, err
	}
	if h, ok := ks.ttlStates[name].(*ttlMapState[UK, UV]); ok {
		return h, nil // one clock and one cleanup per state
	}
	t := newTTLClock(cfg, ks.Common)
	switch s := in.(type) {
	case *HeapMap[K, UK, ttlValue[UV]]:
		s.keep = keepAt[UV](t)
		var cur mapSweepCursor[K, UK]
		t.sweep = func(now int64, n int) {
			heapSweepMaps(s, &cur, n, func(v ttlValue[UV]) bool { return t.expired(v.ts, now) })
		}
	case *pebbleMapState[K, UK, ttlValue[UV]]:
		sw := &pebbleSweep{pk: s.pk, id: s.id, name: name, isMap: true, fail: ks.Fail, expired: t.expired}
		t.sweep = sw.access
	}
	h := &ttlMapState[UK, UV]{in: in, t: t}
	ks.rememberTTL(name, h)
	return h, nil
}

// sweepCursor is where a heap state's incremental cleanup goes on: the
// slot it is in, that slot's keys as they were when the cleanup reached
// it, and the next of them to check. A Go map cannot resume an
// iteration, so the keys are listed once per slot and round; a slot
// holding more values than one access's budget is then checked over
// several accesses, key after key, instead of being sampled (which left
// the cleanup on that slot for good, and the expired values of every
// other slot in memory). Keys added to a slot after its listing wait for
// the next round.
type sweepCursor[K comparable] struct {
	slot   int
	listed bool
	keys   []K
	next   int
}

// listKeys lists the keys of m, slot g's map, when the cursor arrives there.
func listKeys[K comparable, V any](c *sweepCursor[K], m map[K]V) {
	if c.listed {
		return
	}
	for k := range m {
		c.keys = append(c.keys, k)
	}
	c.listed, c.next = true, 0
}

// done reports that every key listed in the slot has been checked.
func (c *sweepCursor[K]) done() bool { return c.next >= len(c.keys) }

// advance moves the cursor to the next slot.
func (c *sweepCursor[K]) advance(slots int) {
	clear(c.keys)
	c.keys, c.listed, c.next = c.keys[:0], false, 0
	c.slot = (c.slot + 1) % slots
}

// sweepSlotsPerAccess bounds the slots, empty ones included, one access
// looks at.
const sweepSlotsPerAccess = 64

// heapSweepValues checks up to n values of s, key by key from the
// cursor, and removes the expired ones.
func heapSweepValues[K comparable, V any](s *HeapValue[K, V], cur *sweepCursor[K], n int, expired func(V) bool) {
	slots := len(s.m)
	for visited := 0; n > 0 && visited < sweepSlotsPerAccess && visited < slots; visited++ {
		g := cur.slot % slots
		listKeys(cur, s.m[g])
		for ; n > 0 && !cur.done(); n-- {
			k := cur.keys[cur.next]
			cur.next++
			if v, ok := s.m[g][k]; ok && expired(v) {
				delete(s.writable(g), k)
			}
		}
		if !cur.done() {
			return
		}
		cur.advance(slots)
	}
}

// mapSweepCursor is a sweepCursor for a map state, which goes on inside
// a key's map too: the map keys of the key at the cursor, listed when the
// cleanup reaches it, and the next of them to check.
type mapSweepCursor[K, UK comparable] struct {
	sweepCursor[K]
	inner sweepCursor[UK]
}

// heapSweepMaps is heapSweepValues for a map state: it checks up to n
// map entries and removes a key whose map it empties.
func heapSweepMaps[K, UK comparable, UV any](s *HeapMap[K, UK, UV], cur *mapSweepCursor[K, UK], n int, expired func(UV) bool) {
	slots := len(s.m)
	var gone []UK
	for visited := 0; n > 0 && visited < sweepSlotsPerAccess && visited < slots; visited++ {
		g := cur.slot % slots
		listKeys(&cur.sweepCursor, s.m[g])
		for n > 0 && !cur.done() {
			k := cur.keys[cur.next]
			in := s.m[g][k]
			if in == nil { // removed since the listing
				cur.inner.advance(1)
				cur.next++
				n--
				continue
			}
			listKeys(&cur.inner, in.m)
			gone = gone[:0]
			for ; n > 0 && !cur.inner.done(); n-- {
				uk := cur.inner.keys[cur.inner.next]
				cur.inner.next++
				if uv, ok := in.m[uk]; ok && expired(uv) {
					gone = append(gone, uk)
				}
			}
			if len(gone) > 0 {
				s.removeEntries(g, k, gone)
			}
			if !cur.inner.done() {
				return
			}
			cur.inner.advance(1)
			cur.next++
		}
		if !cur.done() {
			return
		}
		cur.advance(slots)
	}
}

// removeEntries removes map keys uks of key k in slot g, and k once its
// map is empty, copying what a snapshot reads first.
func (s *HeapMap[K, UK, UV]) removeEntries(g int, k K, uks []UK) {
	inner := s.writableAt(g, k)
	for _, uk := range uks {
		delete(inner, uk)
	}
	if len(inner) == 0 {
		delete(s.m[g], k) // writableAt made the slot's map the task's own
	}
}
