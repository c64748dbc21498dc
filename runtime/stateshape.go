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

// StateSchemaError refuses the restore of a state whose type lost or
// changed a field since its checkpoint was written: encoding/gob and
// encoding/json would decode it without an error and drop the field's
// data. It fails the job without restarts (the same checkpoint would fail
// again).
type StateSchemaError struct {
	State string
	// Role is the type's role in the state: "value type", "map key
	// type", "map value type", "element type", "key type".
	Role string
	// Type names the type now; Encoding is "gob" or "json".
	Type, Encoding string
	// Mismatch says which field (Path) and how.
	Mismatch stateformat.Mismatch
}

func (e *StateSchemaError) Error() string { return (*statecodec.StateSchemaError)(e).Error() }

// AllowDroppedFields lets a state restore from checkpoints whose type had
// the given fields, which its type now lacks: their data is dropped. A
// field is named by its path as the refusal names it ("Total",
// "Stats.Total", "Items[].Total"). By default (none) a restore that would
// drop a field of a gob or JSON encoded type is refused with a
// *StateSchemaError. A later checkpoint no longer has the fields, so the
// option may be removed once the job has checkpointed.
func AllowDroppedFields(fields ...string) StateOption {
	return stateOptionFunc(func(o *stateOptions) { o.dropped = append(o.dropped, fields...) })
}

// A window record's serde has its codec's shape (statecodec.WrappingSerde).
func (s windowRecordSerde[T]) WrappedShape() (string, *stateformat.Shape) {
	return statecodec.ShapeOf(s.c)
}
