package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State schema evolution: every checkpoint records the shape of each
// state's gob and JSON types, and a restore refuses a removed, renamed or
// retyped field (a *StateSchemaError) unless AllowDroppedFields lets it
// go. The shapes are runtime/internal/statecodec's (stateshape.go); here
// are the names a job uses and the keyed state's records of them.

// A window record's serde has its codec's shape (statecodec.WrappingSerde).
func (s windowRecordSerde[T]) WrappedShape() (string, *stateformat.Shape) {
	return statecodec.ShapeOf(s.c)
}
