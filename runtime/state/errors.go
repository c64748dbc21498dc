package state

import (
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// SchemaError refuses the restore of a state whose type lost or
// changed a field since its checkpoint was written: encoding/gob and
// encoding/json would decode it without an error and drop the field's
// data. It fails the job without restarts (the same checkpoint would fail
// again).
type SchemaError struct {
	State string
	// Role is the type's role in the state: "value type", "map key
	// type", "map value type", "element type", "key type".
	Role string
	// Type names the type now; Encoding is "gob" or "json".
	Type, Encoding string
	// Mismatch says which field (Path) and how.
	Mismatch stateformat.Mismatch
}

func (e *SchemaError) Error() string { return (*statecodec.StateSchemaError)(e).Error() }

// AllowDroppedFields lets a state restore from checkpoints whose type had
// the given fields, which its type now lacks: their data is dropped. A
// field is named by its path as the refusal names it ("Total",
// "Stats.Total", "Items[].Total"). By default (none) a restore that would
// drop a field of a gob or JSON encoded type is refused with a
// *SchemaError. A later checkpoint no longer has the fields, so the
// option may be removed once the job has checkpointed.
func AllowDroppedFields(fields ...string) Option {
	return stateOptionFunc(func(o *stateOptions) { o.dropped = append(o.dropped, fields...) })
}

// TypeError is why a keyed state cannot be declared: its key, value
// or map type is one that encoding/gob, which checkpoints keyed state,
// cannot encode, or would encode only in part (see DefaultSerde), or
// that the JSON serde would not bring back whole (JSONSerde). A job
// (runtime.Environment.Execute) fails with it at once, whatever the
// restart strategy: no restart can change a type. Match it with
// errors.As. The descriptors' constructors (NewValueState and the
// others) panic with it.
type TypeError struct {
	// State is the state's name.
	State string
	// Role is which of its types is refused: "key type" (the stream's
	// key), "value type", "map key type" or "map value type".
	Role string
	// Type is the refused type, as Go prints it.
	Type string
	// Field is the path from Type to the part gob cannot keep
	// ("Inner[].y"), empty when it is Type itself.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *TypeError) Error() string { return (*statecodec.StateTypeError)(e).Error() }

// The state errors package keyed returns reach a job as this package's
// types of the same fields, which it matches with errors.As.
func init() { keyed.PublicError = publicStateError }

func publicStateError(err error) error {
	switch e := err.(type) {
	case *statecodec.StateTypeError:
		return (*TypeError)(e)
	case *statecodec.StateSchemaError:
		return (*SchemaError)(e)
	case *statecodec.IncompatibleSchemaError:
		return (*IncompatibleSchemaError)(e)
	}
	return err
}
