package state

import (
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// State that evolves by its schema's rules (Flink's schema evolution of
// Avro state): each value tagged with its writer schema, the schemas in
// the state's shape record, old schemas resolved when a restored state is
// declared. How is runtime/internal/statecodec's (schemaserde.go); here
// are the names a job uses and what reads a restored state's records.

// SchemaSerde is a Serde whose encoding is described by a schema that it
// can read under another (Avro's resolution rules: a field added with a
// default, a field renamed through an alias, a number widened). A state
// declared with one (WithSerde) records its writer schema in every
// checkpoint, and a restore reads each value under the schema it was
// written with, resolved to the serde's schema now, so the state's type
// may change across a restart as far as the serde's rules allow; what they
// do not allow fails the restore, without restarts, with an
// *IncompatibleSchemaError. Package runtime/avrostate is the Avro one.
// Values, list elements and map values may have a SchemaSerde; a map
// key's serde may not (the pebble backend finds map keys by their bytes,
// which a schema change would change), and a descriptor given one for its
// map keys panics.
//
// Methods may be called from any goroutine at once, like Serde's.
type SchemaSerde[T any] interface {
	Serde[T]
	// Schema is the text of the schema Append writes with; checkpoints
	// record it as it is. It never changes for one serde.
	Schema() string
	// Resolve returns how to decode a value that Append wrote under the
	// writer schema writer (a text Schema returned, in this version of
	// the job or an earlier one) into T, as Decode decodes one written
	// under Schema; or an error that says how the schemas differ and what
	// to do, when the serde's rules cannot read one as the other. It is
	// called when a restored state is declared, once per recorded schema
	// other than Schema, and the decoder it returns is called like
	// Decode.
	Resolve(writer string) (func(b []byte) (T, error), error)
}

// SchemaSerde and statecodec.SchemaSerde have the same methods: each
// converts to the other.
var (
	_ SchemaSerde[int]            = statecodec.SchemaSerde[int](nil)
	_ statecodec.SchemaSerde[int] = SchemaSerde[int](nil)
)

// IncompatibleSchemaError refuses the restore of a state whose values
// were checkpointed under a schema its serde now cannot read (an Avro
// field added without a default, a type Avro cannot promote). It fails
// the job without restarts: the same checkpoint would fail again.
type IncompatibleSchemaError struct {
	State string
	// Role is "value type", "element type" or "map value type".
	Role string
	// Serde is the serde's Name; Writer the recorded schema's text and
	// Reader the serde's schema now.
	Serde, Writer, Reader string
	// Err is the serde's reason, from Resolve.
	Err error
}

func (e *IncompatibleSchemaError) Error() string {
	return (*statecodec.IncompatibleSchemaError)(e).Error()
}

func (e *IncompatibleSchemaError) Unwrap() error { return e.Err }
