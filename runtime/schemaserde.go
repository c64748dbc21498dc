package runtime

import (
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
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

// A TTL state's serde wraps its values' codec, which may be a
// SchemaSerde's: it is a statecodec.SchemaWrapper and SchemaCarrier.

func (s ttlSerde[V]) EvolveSchemas(r statecodec.SchemaRecord) (any, error) {
	in, err := statecodec.Evolve(s.in, r)
	return ttlSerde[V]{in: in}, err
}

func (s ttlSerde[V]) SchemaTexts() []string { return statecodec.Schemas(s.in) }

// recordedSchemas reads the schemas of role that the restored records of
// state name hold (its heap entries' shape records and its pebble table
// entry), before the state claims them.
func (ks *keyedState[K]) recordedSchemas(name, role string) (statecodec.SchemaRecord, error) {
	r := statecodec.SchemaRecord{State: name, Role: role}
	var recs [][]byte
	for _, e := range ks.restored[name] {
		if e.kind == stateKindShape {
			recs = append(recs, e.data)
		}
	}
	if ks.pb != nil {
		if s := ks.pb.ids[name]; s.Shape != "" {
			recs = append(recs, []byte(s.Shape))
		}
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		if seen[string(rec)] {
			continue
		}
		seen[string(rec)] = true
		sh, err := stateformat.ParseStateShape(rec)
		if err != nil {
			return r, &unrecoverableError{Err: fmt.Errorf("state %q: the checkpoint's record of its types: %w", name, err)}
		}
		for _, text := range sh.Schemas(role) {
			if !slices.Contains(r.Recorded, text) {
				r.Recorded = append(r.Recorded, text)
			}
		}
	}
	return r, nil
}

// evolveRole is statecodec.Evolve of role's codec c in state name, from
// what the restore recorded. Its errors fail the job without restarts.
func evolveRole[K comparable, T any](ks *keyedState[K], name, role string, c statecodec.Codec[T]) (statecodec.Codec[T], error) {
	if c.Ext == nil {
		return c, nil
	}
	r, err := ks.recordedSchemas(name, role)
	if err != nil {
		return c, err
	}
	c, err = statecodec.Evolve(c, r)
	if ie, ok := err.(*statecodec.IncompatibleSchemaError); ok {
		err = (*IncompatibleSchemaError)(ie)
	}
	if err != nil {
		return c, &unrecoverableError{Err: err}
	}
	return c, nil
}
