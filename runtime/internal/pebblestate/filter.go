package pebblestate

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keyFilter answers, for a key the buffers do not hold, "certainly not in
// the DB" without a DB lookup: a Bloom filter over every key ever written
// to the store (deletions leave their keys in, which only costs a lookup).
// A keyed function reads keys it has never seen (a new word, a new user)
// as often as old ones, and in Pebble such a miss goes through both
// memtables and every level; this is where the backend spends most of a
// new key's time otherwise.
//
// It holds while ready: a fresh DB's filter is ready at once; a restored
// one's once build has added every key of the DB as restored, while the
// task's writes add theirs meanwhile. It grows by segments of twice the
// capacity, and gives up (answers "maybe" for good) past maxBytes, so its
// memory stays bounded whatever the state's size.
type keyFilter struct {
	seed     maphash.Seed
	maxBytes int64

	mu       sync.Mutex // growth
	segs     atomic.Pointer[[]*bloomSegment]
	ready    atomic.Bool
	disabled atomic.Bool
}

// bloomSegment is one Bloom filter of a power-of-two number of bits,
// bitsPerKey bits for each key of its capacity, bloomProbes probes a key.
type bloomSegment struct {
	words    []atomic.Uint64
	mask     uint64
	capacity int64
	n        atomic.Int64
}

const (
	bitsPerKey         = 10
	bloomProbes        = 7
	firstCapacity      = 1 << 16
	defaultFilterBytes = 128 << 20
)

func newKeyFilter(maxBytes int64, ready bool) *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed(), maxBytes: maxBytes}
	segs := []*bloomSegment{newBloomSegment(firstCapacity)}
	f.segs.Store(&segs)
	f.ready.Store(ready)
	return f
}

func newBloomSegment(capacity int64) *bloomSegment {
	bits := uint64(64)
	for bits < uint64(capacity)*bitsPerKey {
		bits <<= 1
	}
	return &bloomSegment{words: make([]atomic.Uint64, bits/64), mask: bits - 1, capacity: capacity}
}

func (s *bloomSegment) has(h uint64) bool {
	h1, h2 := h, h>>32|1
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) & s.mask
		if s.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

func (s *bloomSegment) set(h uint64) {
	h1, h2 := h, h>>32|1
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) & s.mask
		s.words[b/64].Or(1 << (b % 64))
	}
}

// add records key. Safe for concurrent use.
func (f *keyFilter) add(key []byte) {
	if f.disabled.Load() {
		return
	}
	h := maphash.Bytes(f.seed, key)
	segs := *f.segs.Load()
	for _, s := range segs {
		if s.has(h) {
			return // there already, or as good as: counting it again only grows the filter
		}
	}
	last := segs[len(segs)-1]
	if last.n.Add(1) > last.capacity {
		if last = f.grow(last); last == nil {
			return
		}
		last.n.Add(1)
	}
	last.set(h)
}

// grow adds a segment after full, unless another add did; nil when the
// filter gave up.
func (f *keyFilter) grow(full *bloomSegment) *bloomSegment {
	f.mu.Lock()
	defer f.mu.Unlock()
	segs := *f.segs.Load()
	if last := segs[len(segs)-1]; last != full {
		return last
	}
	var bytes int64
	for _, s := range segs {
		bytes += int64(len(s.words)) * 8
	}
	next := newBloomSegment(full.capacity * 2)
	if bytes+int64(len(next.words))*8 > f.maxBytes {
		f.disabled.Store(true)
		return nil
	}
	grown := append(append([]*bloomSegment(nil), segs...), next)
	f.segs.Store(&grown)
	return next
}

// absent reports that key was certainly never added (and so is not in
// the DB), once the filter is ready.
func (f *keyFilter) absent(key []byte) bool {
	if !f.ready.Load() || f.disabled.Load() {
		return false
	}
	h := maphash.Bytes(f.seed, key)
	for _, s := range *f.segs.Load() {
		if s.has(h) {
			return false
		}
	}
	return true
}
