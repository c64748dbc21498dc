package keygroup

import "testing"

// Rule: the key hash is MurmurHash3_x86_32 of the key's bytes; these are the
// reference vectors of the algorithm, so a change of hash is caught here.
func TestMurmur3MatchesReferenceVectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"test", 0, 0xba6bd213},
		{"hello", 0, 0x248bfa47},
		{"Hello, world!", 0, 0xc0363e43},
		{"Hello, world!", 1234, 0xfaf6cdb3},
		{"The quick brown fox jumps over the lazy dog", 0, 0x2e4ff723},
	} {
		if got := murmur3String(c.in, c.seed); got != c.want {
			t.Errorf("murmur3(%q, %d) = %08x, want %08x", c.in, c.seed, got, c.want)
		}
	}
}

// Rule: key group assignment is stable across runs and restarts: state
// will be restored by key group, so these pinned values must never change.
func TestKeyGroupAssignmentIsPinned(t *testing.T) {
	strs := []struct {
		key      string
		keyGroup int // of 128
		subtask  int // of 4
	}{
		{"alice", 93, 2},
		{"bob", 114, 3},
		{"k0", 86, 2},
		{"k1", 42, 1},
	}
	for _, c := range strs {
		kg := ForHash(HashString(c.key), 128)
		if kg != c.keyGroup {
			t.Errorf("key group of %q = %d, want %d", c.key, kg, c.keyGroup)
		}
		if s := Subtask(kg, 4, 128); s != c.subtask {
			t.Errorf("subtask of %q = %d, want %d", c.key, s, c.subtask)
		}
	}
	for _, c := range []struct {
		key      int64
		keyGroup int
	}{{0, 124}, {1, 68}, {42, 62}, {-1, 104}} {
		if kg := ForHash(HashInt64(c.key), 128); kg != c.keyGroup {
			t.Errorf("key group of %d = %d, want %d", c.key, kg, c.keyGroup)
		}
	}
}

// Rule: integer kinds share one hash (widened to 64 bits) and named types
// hash like their underlying type; unsupported key types are refused.
func TestStableHasherByKind(t *testing.T) {
	type userID string
	hs, _ := StableHasher[string]()
	hu, _ := StableHasher[userID]()
	if hs("alice") != hu(userID("alice")) {
		t.Error("a named string type must hash like string")
	}
	h32, _ := StableHasher[int32]()
	h64, _ := StableHasher[int64]()
	hu8, _ := StableHasher[uint8]()
	if h32(7) != h64(7) || hu8(7) != h64(7) {
		t.Error("integer kinds must hash alike after widening")
	}
	if _, err := StableHasher[struct{ A int }](); err == nil {
		t.Error("a struct key must be refused: it has no stable byte form")
	}
}

// Rule: each subtask owns one contiguous range of key groups, Range's,
// and the ranges cover [0, maxParallelism) with sizes differing by at
// most one.
func TestKeyGroupRangesAreContiguous(t *testing.T) {
	for _, c := range []struct{ par, maxPar int }{{1, 128}, {3, 128}, {4, 128}, {7, 10}, {10, 10}} {
		count := make([]int, c.par)
		prev := 0
		for kg := 0; kg < c.maxPar; kg++ {
			s := Subtask(kg, c.par, c.maxPar)
			if s < prev || s >= c.par {
				t.Fatalf("par %d max %d: key group %d -> subtask %d after %d", c.par, c.maxPar, kg, s, prev)
			}
			prev = s
			count[s]++
			if lo, hi := Range(s, c.par, c.maxPar); kg < lo || kg > hi {
				t.Fatalf("par %d max %d: key group %d of subtask %d outside its Range [%d, %d]", c.par, c.maxPar, kg, s, lo, hi)
			}
		}
		for s := range c.par {
			if lo, hi := Range(s, c.par, c.maxPar); hi-lo+1 != count[s] {
				t.Fatalf("par %d max %d: subtask %d has Range [%d, %d] for %d key groups", c.par, c.maxPar, s, lo, hi, count[s])
			}
		}
		lo, hi := count[0], count[0]
		for _, n := range count {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo > 1 || lo == 0 {
			t.Fatalf("par %d max %d: uneven ranges %v", c.par, c.maxPar, count)
		}
	}
}
