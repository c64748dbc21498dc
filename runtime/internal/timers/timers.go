// Package timers holds the timers of a keyed operator subtask: per time
// domain a queue of (key, timestamp) timers in timestamp order across key
// groups (Queue), over each key group's timers kept by the state backend
// (HeapSets on the heap, PebbleSets in the DB), with their snapshot
// entries and restore. Package runtime's keyed process operator registers,
// fires, snapshots and restores them through it; nothing here knows about
// operators or jobs.
package timers

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Timers of a keyed operator, per time domain: a set of (key, timestamp)
// timers per key group (Sets, one implementation per state backend),
// and over them a heap of the key groups that have timers, ordered by
// each one's earliest timer (Queue), as Flink's
// KeyGroupPartitionedPriorityQueue. The queue's own memory follows the
// number of key groups, never the number of timers; a key group's timers
// are stored where its other state is, so that they move with it on a
// rescale and are snapshotted with it.
//
//   - Heap backend (HeapSets): a binary heap per key group, with
//     copy-on-write at the grain of the key group as the value maps have
//     it per slot: a snapshot's freeze copies the slice of the heaps (one
//     header per key group), and the first write after the freeze into a
//     key group the encoder has not read yet copies that key group's heap.
//   - Pebble backend (PebbleSets): the timers are entries of the DB,
//     keyGroup | timer state id | domain | timestamp | key, in the key
//     group's range and ordered by time within it; in memory only a short
//     sorted cache of each key group's earliest timers, read again from
//     the DB when it runs empty.

// Entry is one timer: its timestamp and key.
type Entry[K comparable] struct {
	Ts  int64
	Key K
}

// Sets are the timers of one time domain by key group, for a Queue:
// HeapSets or PebbleSets. add and remove report whether key group g's
// earliest timer changed (appeared, went, or is another one).
type Sets[K comparable] interface {
	// add registers e in key group g; one already there stays one.
	add(g int, e Entry[K]) bool
	remove(g int, e Entry[K]) bool
	// head is key group g's earliest timer.
	head(g int) (Entry[K], bool)
	// popHead removes key group g's earliest timer, which exists.
	popHead(g int)
}

// Queue is one time domain's timers in timestamp order across key
// groups.
type Queue[K comparable] struct {
	groupOf func(K) int
	sets    Sets[K]
	// order is a binary heap of the key groups with timers, by their
	// earliest timer's timestamp (then key group); pos[g] is key group
	// g's place in it plus one, 0 when it has no timers.
	order []groupHead
	pos   []int32
}

type groupHead struct {
	ts int64
	g  int32
}

// NewQueue is an empty queue over sets, of groups key groups; groupOf
// gives a key's key group.
func NewQueue[K comparable](groups int, groupOf func(K) int, sets Sets[K]) Queue[K] {
	return Queue[K]{groupOf: groupOf, sets: sets, pos: make([]int32, groups)}
}

// Sets returns the sets the queue is over, as NewQueue was given them.
func (q *Queue[K]) Sets() Sets[K] { return q.sets }

// Add registers the timer of key at ts; one already there stays one.
func (q *Queue[K]) Add(key K, ts int64) {
	g := q.groupOf(key)
	if q.sets.add(g, Entry[K]{Ts: ts, Key: key}) {
		q.fix(g)
	}
}

// Remove deletes the timer of key at ts, if there is one.
func (q *Queue[K]) Remove(key K, ts int64) {
	g := q.groupOf(key)
	if q.sets.remove(g, Entry[K]{Ts: ts, Key: key}) {
		q.fix(g)
	}
}

// Peek returns the earliest timer.
func (q *Queue[K]) Peek() (Entry[K], bool) {
	if len(q.order) == 0 {
		return Entry[K]{}, false
	}
	return q.sets.head(int(q.order[0].g))
}

// Pop removes the earliest timer, which Peek returned.
func (q *Queue[K]) Pop() Entry[K] {
	g := int(q.order[0].g)
	e, _ := q.sets.head(g)
	q.sets.popHead(g)
	q.fix(g)
	return e
}

// All lists the queue's timers, in no particular order, the pebble
// backend's read from the DB: for tests and checks, not for the task.
func (q *Queue[K]) All() ([]Entry[K], error) {
	switch s := q.sets.(type) {
	case *HeapSets[K]:
		out := make([]Entry[K], 0, s.len())
		for _, h := range s.heaps {
			out = append(out, h...)
		}
		return out, nil
	case *PebbleSets[K]:
		var out []Entry[K]
		for g := range s.cache {
			var derr error
			err := s.ks.Pebble.Store.MapScanAfter(PebblePrefix(nil, g, s.kind), nil, func(uk, _ []byte) bool {
				e, err := s.decode(g, uk)
				if err != nil {
					derr = err
					return false
				}
				out = append(out, e)
				return true
			})
			if err == nil {
				err = derr
			}
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("timers: unknown sets %T", q.sets)
}

// fix puts key group g where its earliest timer says.
func (q *Queue[K]) fix(g int) {
	h, ok := q.sets.head(g)
	i := int(q.pos[g]) - 1
	switch {
	case !ok && i < 0:
	case !ok:
		n := len(q.order) - 1
		if i != n {
			q.swap(i, n)
		}
		q.order = q.order[:n]
		q.pos[g] = 0
		if i < n {
			q.down(i)
			q.up(i)
		}
	case i < 0:
		q.order = append(q.order, groupHead{ts: h.Ts, g: int32(g)})
		q.pos[g] = int32(len(q.order))
		q.up(len(q.order) - 1)
	default:
		q.order[i].ts = h.Ts
		q.down(i)
		q.up(i)
	}
}

func (q *Queue[K]) less(i, j int) bool {
	a, b := q.order[i], q.order[j]
	return a.ts < b.ts || a.ts == b.ts && a.g < b.g
}

func (q *Queue[K]) swap(i, j int) {
	q.order[i], q.order[j] = q.order[j], q.order[i]
	q.pos[q.order[i].g] = int32(i + 1)
	q.pos[q.order[j].g] = int32(j + 1)
}

func (q *Queue[K]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(p, i)
		i = p
	}
}

func (q *Queue[K]) down(i int) {
	n := len(q.order)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		q.swap(i, m)
		i = m
	}
}

// HeapSets are the heap backend's timers: a binary heap per key
// group, and an index from timer to its place in its key group's heap,
// so that a deleted timer leaves at once ("delete the old timer, register
// a new one" per record keeps the heaps at the number of live timers).
// Copy-on-write as keyed.State describes: heaps[g] was made in epoch
// ep[g], and a write into one made before the frozen epoch, in a key group
// the encoder has not finished (read), copies it first. The index is the
// task's alone: the encoder reads only heaps.
type HeapSets[K comparable] struct {
	ks    *keyed.State[K]
	heaps [][]Entry[K]
	ep    []uint64
	index map[Entry[K]]int
	read  atomic.Int64
}

// NewHeapSets are the empty timers of groups key groups, snapshotted in
// the epochs of ks.
func NewHeapSets[K comparable](ks *keyed.State[K], groups int) *HeapSets[K] {
	return &HeapSets[K]{ks: ks, heaps: make([][]Entry[K], groups), ep: make([]uint64, groups),
		index: map[Entry[K]]int{}}
}

// writable returns key group g's heap, copied first if the encoder of a
// frozen snapshot may still read it.
func (s *HeapSets[K]) writable(g int) []Entry[K] {
	h := s.heaps[g]
	if len(h) > 0 && s.ep[g] < s.ks.Frozen && int64(g) >= s.read.Load() {
		h = slices.Clone(h)
		s.heaps[g], s.ep[g] = h, s.ks.Epoch
	}
	return h
}

func (s *HeapSets[K]) add(g int, e Entry[K]) bool {
	if _, ok := s.index[e]; ok {
		return false
	}
	h := append(s.writable(g), e)
	s.heaps[g] = h
	s.index[e] = len(h) - 1
	return s.up(h, len(h)-1) == 0
}

func (s *HeapSets[K]) remove(g int, e Entry[K]) bool {
	i, ok := s.index[e]
	if !ok {
		return false
	}
	old := s.heaps[g][0]
	s.removeAt(g, i)
	h, ok := s.head(g)
	return !ok || h != old
}

func (s *HeapSets[K]) head(g int) (Entry[K], bool) {
	if len(s.heaps[g]) == 0 {
		return Entry[K]{}, false
	}
	return s.heaps[g][0], true
}

func (s *HeapSets[K]) popHead(g int) { s.removeAt(g, 0) }

func (s *HeapSets[K]) removeAt(g, i int) {
	h := s.writable(g)
	n := len(h) - 1
	delete(s.index, h[i])
	if i != n {
		h[i] = h[n]
		s.index[h[i]] = i
	}
	h[n] = Entry[K]{}
	h = h[:n]
	s.heaps[g] = h
	if i < n {
		s.down(h, i)
		s.up(h, i)
	}
}

// len is the number of timers.
func (s *HeapSets[K]) len() int { return len(s.index) }

func (s *HeapSets[K]) swap(h []Entry[K], i, j int) {
	h[i], h[j] = h[j], h[i]
	s.index[h[i]] = i
	s.index[h[j]] = j
}

// up moves h[i] up to its place and returns it.
func (s *HeapSets[K]) up(h []Entry[K], i int) int {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].Ts <= h[i].Ts {
			return i
		}
		s.swap(h, p, i)
		i = p
	}
	return i
}

func (s *HeapSets[K]) down(h []Entry[K], i int) {
	n := len(h)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l].Ts < h[m].Ts {
			m = l
		}
		if r < n && h[r].Ts < h[m].Ts {
			m = r
		}
		if m == i {
			return
		}
		s.swap(h, i, m)
		i = m
	}
}

// Freeze, on the task goroutine once the epoch is frozen, returns the
// encoder of the timers per key group: it copies the slice of heap
// headers (one per key group), not the timers.
func (s *HeapSets[K]) Freeze() func(stop func() bool) (map[int][]byte, error) {
	if len(s.index) == 0 {
		return func(func() bool) (map[int][]byte, error) { return nil, nil }
	}
	view, kc, read := slices.Clone(s.heaps), s.ks.Keys, &s.read
	read.Store(0)
	enc := func(stop func() bool) (map[int][]byte, error) {
		out := make(map[int][]byte)
		for g, h := range view {
			if len(h) == 0 {
				continue
			}
			if stop() {
				return nil, keyed.ErrSnapshotAbandoned
			}
			keys := statecodec.Column[K]{Codec: kc}
			ts := make([]byte, 0, len(h)*binary.MaxVarintLen64/2)
			for _, e := range h {
				keys.Add(e.Key)
				ts = binary.AppendVarint(ts, e.Ts)
			}
			read.Store(int64(g + 1))
			b := make([]byte, 0, binary.MaxVarintLen64+keys.Size()+len(ts))
			b, err := keys.AppendTo(binary.AppendUvarint(b, uint64(keys.N)))
			if err != nil {
				return nil, fmt.Errorf("keys: %w", err)
			}
			out[g] = append(b, ts...)
		}
		return out, nil
	}
	if !keyed.ValueSemantics[K]() {
		// Keys the function could change in place are not protected by
		// copying the heaps.
		return keyed.EncodedNow(enc)
	}
	return enc
}

// PebbleCache is how many of a key group's earliest timers the
// pebble backend keeps in memory. Exported for runtime's tests of the
// bound.
const PebbleCache = 32

// PebbleSets are the pebble backend's timers of one time domain:
// entries of the DB (PebblePrefix), and in memory, per key group, a
// sorted cache of its earliest timers. The cache holds the smallest
// timers of the key group by (timestamp, key bytes), at most
// PebbleCache of them: complete[g] says it holds all of them;
// otherwise every timer of the key group not in it sorts after hi[g], its
// largest entry when it was last filled or cut. A timer added after hi
// goes to the DB only; one before it goes into the cache too (the largest
// entry dropping out once the cache is full, hi becoming the new largest);
// a cache that runs empty is filled from the DB with the timers after hi.
// Memory follows the number of key groups times PebbleCache, whatever
// the number of timers.
type PebbleSets[K comparable] struct {
	ks       *keyed.State[K]
	kind     byte
	cache    [][]cachedTimer[K]
	complete []bool
	hi       []string
	prefix   []byte
	ub       []byte
}

// cachedTimer is a timer and its user key in the DB, timestamp and key
// bytes, by which the cache is sorted as the DB is.
type cachedTimer[K comparable] struct {
	e   Entry[K]
	enc string
}

// NewPebbleSets are the timers of the domain kind (an entry kind of
// stateformat) in an empty DB; Restored reads a restored DB's.
func NewPebbleSets[K comparable](ks *keyed.State[K], kind byte, groups int) *PebbleSets[K] {
	s := &PebbleSets[K]{ks: ks, kind: kind, cache: make([][]cachedTimer[K], groups),
		complete: make([]bool, groups), hi: make([]string, groups)}
	for g := range s.complete {
		s.complete[g] = true
	}
	return s
}

// Restored fills the caches of key groups lo to hi from the DB, which a
// restore laid out; q is the queue over s.
func (s *PebbleSets[K]) Restored(q *Queue[K], lo, hi int) error {
	for g := lo; g <= hi; g++ {
		s.complete[g], s.hi[g], s.cache[g] = false, "", s.cache[g][:0]
		if err := s.refill(g); err != nil {
			return fmt.Errorf("restore timers: %w", err)
		}
		q.fix(g)
	}
	return nil
}

// PebblePrefix is the DB prefix of key group g's timers of the
// domain kind: keyGroup(2) keyed.TimerStateID(2) kind. Exported, with
// AppendTs, for runtime's tests that write timers into a DB by hand.
func PebblePrefix(dst []byte, g int, kind byte) []byte {
	return append(pebblestate.AppendKeyPrefix(dst, g, keyed.TimerStateID), kind)
}

// AppendTs appends ts so that byte order is numeric order.
func AppendTs(dst []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
}

func (s *PebbleSets[K]) encode(g int, e Entry[K]) (prefix, ukey []byte, ok bool) {
	if s.ks.PebbleKeysErr != nil {
		// No timer of such a key exists: a registration fails the call
		// with this error (runtime's KeyedContext.checkTimerKey), a
		// deletion has nothing to do.
		return nil, nil, false
	}
	var err error
	s.ub, err = s.ks.PebbleKeys.Append(AppendTs(s.ub[:0], e.Ts), e.Key)
	if err != nil {
		s.ks.Fail(fmt.Errorf("timers: encode key: %w", err))
		return nil, nil, false
	}
	s.prefix = PebblePrefix(s.prefix[:0], g, s.kind)
	return s.prefix, s.ub, true
}

// find is where enc is or would be in key group g's cache.
func (s *PebbleSets[K]) find(g int, enc []byte) (int, bool) {
	return slices.BinarySearchFunc(s.cache[g], enc, func(c cachedTimer[K], t []byte) int {
		return strings.Compare(c.enc, string(t))
	})
}

func (s *PebbleSets[K]) add(g int, e Entry[K]) bool {
	p, uk, ok := s.encode(g, e)
	if !ok {
		return false
	}
	if err := s.ks.Pebble.Store.OrderedPut(p, uk); err != nil {
		s.ks.Fail(fmt.Errorf("timers: %w", err))
		return false
	}
	if !s.complete[g] && string(uk) > s.hi[g] {
		return false // in the DB only, after every cached timer
	}
	i, found := s.find(g, uk)
	if found {
		return false
	}
	s.cache[g] = slices.Insert(s.cache[g], i, cachedTimer[K]{e: e, enc: string(uk)})
	if c := s.cache[g]; len(c) > PebbleCache {
		s.cache[g] = c[:len(c)-1]
		s.complete[g], s.hi[g] = false, c[len(c)-2].enc
	}
	return i == 0
}

func (s *PebbleSets[K]) remove(g int, e Entry[K]) bool {
	p, uk, ok := s.encode(g, e)
	if !ok {
		return false
	}
	if err := s.ks.Pebble.Store.OrderedDelete(p, uk); err != nil {
		s.ks.Fail(fmt.Errorf("timers: %w", err))
		return false
	}
	i, found := s.find(g, uk)
	if !found {
		return false
	}
	s.cache[g] = slices.Delete(s.cache[g], i, i+1)
	s.refillIfEmpty(g)
	return i == 0
}

func (s *PebbleSets[K]) head(g int) (Entry[K], bool) {
	if len(s.cache[g]) == 0 {
		return Entry[K]{}, false
	}
	return s.cache[g][0].e, true
}

func (s *PebbleSets[K]) popHead(g int) {
	c := s.cache[g][0]
	s.cache[g] = slices.Delete(s.cache[g], 0, 1)
	s.prefix = PebblePrefix(s.prefix[:0], g, s.kind)
	if err := s.ks.Pebble.Store.OrderedDelete(s.prefix, []byte(c.enc)); err != nil {
		s.ks.Fail(fmt.Errorf("timers: %w", err))
		return
	}
	s.refillIfEmpty(g)
}

func (s *PebbleSets[K]) refillIfEmpty(g int) {
	if len(s.cache[g]) == 0 && !s.complete[g] {
		if err := s.refill(g); err != nil {
			s.ks.Fail(fmt.Errorf("timers: %w", err))
		}
	}
}

// ErrCorrupt is a timer in the DB that does not decode: reading the
// same DB (or the checkpoint it came from) again fails again, unlike a
// read that failed.
var ErrCorrupt = errors.New("corrupt timer")

// refill reads key group g's earliest timers after hi[g] from the DB into
// its empty cache.
func (s *PebbleSets[K]) refill(g int) error {
	c := s.cache[g][:0]
	var derr error
	s.prefix = PebblePrefix(s.prefix[:0], g, s.kind)
	err := s.ks.Pebble.Store.MapScanAfter(s.prefix, []byte(s.hi[g]), func(uk, _ []byte) bool {
		e, err := s.decode(g, uk)
		if err != nil {
			derr = err
			return false
		}
		c = append(c, cachedTimer[K]{e: e, enc: string(uk)})
		return len(c) <= PebbleCache // one more tells whether others follow
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		s.cache[g] = c[:0]
		return err
	}
	s.complete[g] = len(c) <= PebbleCache
	if !s.complete[g] {
		c = c[:PebbleCache]
		s.hi[g] = c[len(c)-1].enc
	}
	s.cache[g] = c
	return nil
}

// decode reads the timer of key group g whose user key in the DB is uk.
func (s *PebbleSets[K]) decode(g int, uk []byte) (Entry[K], error) {
	if len(uk) < 8 {
		return Entry[K]{}, fmt.Errorf("%w: a timer of %d bytes in key group %d", ErrCorrupt, len(uk), g)
	}
	k, err := s.ks.PebbleKeys.Read(uk[8:])
	if err != nil {
		return Entry[K]{}, fmt.Errorf("%w: decode the key of a timer in key group %d: %v", ErrCorrupt, g, err)
	}
	return Entry[K]{Ts: int64(binary.BigEndian.Uint64(uk) ^ (1 << 63)), Key: k}, nil
}

// Cached is how many timers the caches hold, for tests of the bound.
func (s *PebbleSets[K]) Cached() int {
	n := 0
	for _, c := range s.cache {
		n += len(c)
	}
	return n
}

// Names of the timer entries in a heap snapshot; informative only,
// entries are told apart by kind.
const (
	EventName      = "timers/event-time"
	ProcessingName = "timers/processing-time"
)

// timerRecord is one pending timer as versions 1 and 2 checkpointed it.
type timerRecord[K comparable] struct {
	Key K
	Ts  int64
}

// Restore adds the encoded timers of one key group to q: a snapshot
// entry's data in format (stateformat.FormatGob or FormatColumns), its
// keys in ks's codec.
func Restore[K comparable](q *Queue[K], ks *keyed.State[K], format byte, data []byte) error {
	if format == stateformat.FormatGob {
		var rs []timerRecord[K]
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&rs); err != nil {
			return err
		}
		for _, r := range rs {
			q.Add(r.Key, r.Ts)
		}
		return nil
	}
	n, b, err := keyed.ReadCount(data)
	if err != nil {
		return err
	}
	keys, b, err := statecodec.ReadColumn(b, n, ks.Keys)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	for _, k := range keys {
		ts, m := binary.Varint(b)
		if m <= 0 {
			return engine.ErrShortState
		}
		b = b[m:]
		q.Add(k, ts)
	}
	return keyed.CheckTrailing(b)
}
