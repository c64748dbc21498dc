package keyed

import "maps"

// What a heap state holds, read whole: for the tests of the operators
// that keep their state here, which check it against a model.

// Flat is the state as one map by key.
func (s *HeapValue[K, V]) Flat() map[K]V {
	out := map[K]V{}
	for _, m := range s.m {
		maps.Copy(out, m)
	}
	return out
}

// Flat is the state as one map by key.
func (s *HeapMap[K, UK, UV]) Flat() map[K]map[UK]UV {
	out := map[K]map[UK]UV{}
	for _, m := range s.m {
		for k, in := range m {
			out[k] = in.m
		}
	}
	return out
}

// HeapKeys is how many keys have a value.
func (s *HeapValue[K, V]) HeapKeys() int {
	n := 0
	for _, m := range s.m {
		n += len(m)
	}
	return n
}

// HeapKeys is how many keys have a map.
func (s *HeapMap[K, UK, UV]) HeapKeys() int {
	n := 0
	for _, m := range s.m {
		n += len(m)
	}
	return n
}

// HeapKeys is how many keys have a list.
func (s *HeapList[K, T]) HeapKeys() int { return s.v.HeapKeys() }

// SlotMap is slot g's map, as it is (a snapshot may be reading it).
func (s *HeapValue[K, V]) SlotMap(g int) map[K]V { return s.m[g] }

// Entries is how many values the state holds, expired ones included.
func (s *HeapValue[K, V]) Entries() int { return s.HeapKeys() }

// Entries is how many map entries the state holds, expired ones included.
func (s *HeapMap[K, UK, UV]) Entries() int {
	n := 0
	for _, gm := range s.m {
		for _, in := range gm {
			n += len(in.m)
		}
	}
	return n
}

// Entries is how many list elements the state holds, expired ones
// included.
func (s *HeapList[K, T]) Entries() int {
	n := 0
	for _, m := range s.v.m {
		for _, l := range m {
			n += len(l)
		}
	}
	return n
}
