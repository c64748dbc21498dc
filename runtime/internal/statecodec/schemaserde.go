package statecodec

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State that evolves by its schema's rules (Flink's schema evolution of
// Avro state). A SchemaSerde says which schema it writes with and how to
// read a value written under another; the engine does the rest (this
// file, and runtime's recordedSchemas, which reads the records of a
// restored state), the same way on both backends:
//
//   - every value of such a serde is stored as the 4-byte tag of its
//     writer schema (the first bytes of the SHA-256 of the schema's text)
//     followed by the serde's encoding: in a heap checkpoint's columns and
//     in the pebble DB alike;
//   - the state's record of its shape (stateshape.go; per key group in a
//     heap checkpoint, in the table of states of a pebble one) holds the
//     text of every writer schema its values may carry: the current one
//     for the heap backend, whose snapshots write every value anew; for
//     pebble, every schema the state was ever restored with as well,
//     since values written under an old schema stay in the DB's files
//     until the job writes them again (an incremental checkpoint reuses
//     those files), and a rescale merges the tables of the old subtasks;
//   - when a restored state is declared, the recorded schemas other than
//     the current one are resolved through the serde's Resolve, once
//     each, and a value is read by the decoder of its tag: so the job
//     reads old values as its new type, without rewriting them at
//     restore (which would cost a pass over the whole state and make the
//     next incremental checkpoint upload all of it). A schema the serde
//     cannot resolve refuses the restore with an *IncompatibleSchemaError
//     naming the state, the role and the serde's reasons.
//
// The tag is per value, not per checkpoint, because nothing else says
// which schema wrote a pebble value: a key that is never written again
// keeps its old bytes through any number of restores, and key groups from
// subtasks restored at different schemas end up in one DB after a
// rescale.

// SchemaSerde is state.SchemaSerde, whose documentation a job reads: a
// Serde whose encoding is described by a schema that it can read under
// another. It has state.SchemaSerde's methods, so that each converts to
// the other, and a job's implementation needs nothing of this package.
type SchemaSerde[T any] interface {
	Serde[T]
	// Schema is the text of the schema Append writes with.
	Schema() string
	// Resolve returns how to decode a value that Append wrote under the
	// writer schema writer into T, or why it cannot.
	Resolve(writer string) (func(b []byte) (T, error), error)
}

// IncompatibleSchemaError is state.IncompatibleSchemaError, whose
// documentation a job reads: a restore refused because a state's serde
// cannot read a recorded schema. The two have the same fields, so that
// runtime/state converts one to the other, and its Error is this one.
type IncompatibleSchemaError struct {
	State                 string
	Role                  string
	Serde, Writer, Reader string
	Err                   error
}

func (e *IncompatibleSchemaError) Error() string {
	return fmt.Sprintf("restore state %q: its %s was checkpointed under a schema that serde %q cannot read as its schema now: %v",
		e.State, e.Role, e.Serde, e.Err)
}

func (e *IncompatibleSchemaError) Unwrap() error { return e.Err }

// schemaTag is the 4 bytes that name a writer schema in each value.
type schemaTag [4]byte

func tagOf(schema string) schemaTag {
	h := sha256.Sum256([]byte(schema))
	return schemaTag(h[:4])
}

// schemaFrame is a SchemaSerde as a state stores it: each value is its
// writer schema's tag, then the serde's bytes; a value is read by the
// decoder of its tag, the serde's own for the current schema.
type schemaFrame[T any] struct {
	s    SchemaSerde[T]
	tag  schemaTag
	text string
	// olds are the recorded writer schemas other than the current one,
	// with their decoders.
	olds []oldSchema[T]
}

type oldSchema[T any] struct {
	tag    schemaTag
	text   string
	decode func([]byte) (T, error)
}

func (f *schemaFrame[T]) Name() string { return f.s.Name() }

func (f *schemaFrame[T]) Append(dst []byte, v T) ([]byte, error) {
	return f.s.Append(append(dst, f.tag[:]...), v)
}

func (f *schemaFrame[T]) Decode(b []byte) (T, error) {
	if len(b) < len(schemaTag{}) {
		var zero T
		return zero, errors.New("a value shorter than its schema tag")
	}
	tag, body := schemaTag(b[:4]), b[4:]
	if tag == f.tag {
		return f.s.Decode(body)
	}
	for _, o := range f.olds {
		if o.tag == tag {
			return o.decode(body)
		}
	}
	var zero T
	return zero, fmt.Errorf("a value written under schema tag %x, which no checkpoint of the state records", tag[:])
}

// SchemaTexts are the schemas the frame reads: the current one first.
func (f *schemaFrame[T]) SchemaTexts() []string {
	out := []string{f.text}
	for _, o := range f.olds {
		out = append(out, o.text)
	}
	return out
}

// SchemaCarrier is a codec's serde that is, or wraps, a schemaFrame
// (runtime's ttlSerde).
type SchemaCarrier interface{ SchemaTexts() []string }

// SchemaWrapper is a serde of the engine's own around a codec of the
// job's values (runtime's ttlSerde): EvolveSchemas returns it over its
// codec evolved (a Serde of the same type).
type SchemaWrapper interface {
	EvolveSchemas(r SchemaRecord) (any, error)
}

// SchemaRecord is what a restore recorded of one role's schemas.
type SchemaRecord struct {
	State, Role string
	Recorded    []string
}

// Evolve returns codec c with a SchemaSerde in it framed, reading the
// recorded schemas of r; any other codec as it is. Its errors (an
// *IncompatibleSchemaError, two schemas of one tag) fail the restore:
// the same checkpoint would fail again.
func Evolve[T any](c Codec[T], r SchemaRecord) (Codec[T], error) {
	switch s := c.Ext.(type) {
	case SchemaSerde[T]:
		f, err := newSchemaFrame(s, r)
		if err != nil {
			return c, err
		}
		c.Ext = f
	case SchemaWrapper:
		ext, err := s.EvolveSchemas(r)
		if err != nil {
			return c, err
		}
		c.Ext = ext.(Serde[T])
	}
	return c, nil
}

// newSchemaFrame frames s, resolving each recorded schema other than
// s's.
func newSchemaFrame[T any](s SchemaSerde[T], r SchemaRecord) (*schemaFrame[T], error) {
	f := &schemaFrame[T]{s: s, text: s.Schema(), tag: tagOf(s.Schema())}
	for _, text := range r.Recorded {
		if text == f.text || slices.ContainsFunc(f.olds, func(o oldSchema[T]) bool { return o.text == text }) {
			continue
		}
		tag := tagOf(text)
		if tag == f.tag || slices.ContainsFunc(f.olds, func(o oldSchema[T]) bool { return o.tag == tag }) {
			return nil, fmt.Errorf("restore state %q: two of its %s's schemas have the same tag %x, so its values cannot tell them apart; change the new schema's text (a doc string will do)", r.State, r.Role, tag[:])
		}
		dec, err := s.Resolve(text)
		if err != nil {
			return nil, &IncompatibleSchemaError{State: r.State, Role: r.Role, Serde: s.Name(), Writer: text, Reader: f.text, Err: err}
		}
		f.olds = append(f.olds, oldSchema[T]{tag: tag, text: text, decode: dec})
	}
	return f, nil
}

// Schemas are the schemas codec c reads (the current one first),
// none unless it is a SchemaSerde's.
func Schemas[T any](c Codec[T]) []string {
	if s, ok := c.Ext.(SchemaCarrier); ok {
		return s.SchemaTexts()
	}
	return nil
}

// SchemaRole adds role's schemas in codec c to the shape the state's
// checkpoints record: the current one, and with all (pebble) every
// schema its values may still carry.
func SchemaRole[T any](d *DeclaredShape, role string, c Codec[T], all bool) {
	texts := Schemas(c)
	if !all && len(texts) > 1 {
		texts = texts[:1]
	}
	for _, text := range texts {
		d.Roles = append(d.Roles, stateformat.RoleShape{Role: role, Encoding: stateformat.SchemaEncoding, Schema: text})
	}
	if len(texts) > 0 {
		d.Text = d.Roles.Encode()
	}
}
