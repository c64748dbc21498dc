package state

import (
	"iter"
)

// ValueState is one value per key.
type ValueState[V any] interface {
	// Value returns the current key's value and whether it has one.
	Value() (V, bool)
	// Update sets the current key's value.
	Update(v V)
	// Clear removes the current key's value.
	Clear()
}

// MapState is a map per key.
type MapState[UK comparable, UV any] interface {
	// Get returns the current key's value of k and whether it has one.
	Get(k UK) (UV, bool)
	// Put sets the current key's value of k.
	Put(k UK, v UV)
	// Remove removes k from the current key's map.
	Remove(k UK)
	// Contains says whether the current key's map has k.
	Contains(k UK) bool
	// Len is the number of entries of the current key's map.
	Len() int
	// All iterates the current key's entries in no particular order.
	All() iter.Seq2[UK, UV]
	// Clear removes the current key's map.
	Clear()
}
