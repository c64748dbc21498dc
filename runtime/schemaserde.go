package runtime

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State that evolves by its schema's rules (Flink's schema evolution of
// Avro state). A SchemaSerde says which schema it writes with and how to
// read a value written under another; the engine does the rest, the same
// way on both backends:
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

// schemaTexts are the schemas the frame reads: the current one first.
func (f *schemaFrame[T]) schemaTexts() []string {
	out := []string{f.text}
	for _, o := range f.olds {
		out = append(out, o.text)
	}
	return out
}

// schemaCarrier is a codec's serde that is, or wraps, a schemaFrame.
type schemaCarrier interface{ schemaTexts() []string }

// schemaWrapper is a serde of the engine's own around a codec of the
// job's values (ttlSerde): evolveSchemas returns it over its codec
// evolved (a Serde of the same type).
type schemaWrapper interface {
	evolveSchemas(r schemaRecord) (any, error)
}

func (s ttlSerde[V]) evolveSchemas(r schemaRecord) (any, error) {
	in, err := evolveCodec(s.in, r)
	return ttlSerde[V]{in: in}, err
}

func (s ttlSerde[V]) schemaTexts() []string { return codecSchemas(s.in) }

// schemaRecord is what a restore recorded of one role's schemas.
type schemaRecord struct {
	state, role string
	recorded    []string
}

// evolveCodec returns codec c with a SchemaSerde in it framed, reading
// the recorded schemas of r; any other codec as it is.
func evolveCodec[T any](c stateCodec[T], r schemaRecord) (stateCodec[T], error) {
	switch s := c.ext.(type) {
	case SchemaSerde[T]:
		f, err := newSchemaFrame(s, r)
		if err != nil {
			return c, err
		}
		c.ext = f
	case schemaWrapper:
		ext, err := s.evolveSchemas(r)
		if err != nil {
			return c, err
		}
		c.ext = ext.(Serde[T])
	}
	return c, nil
}

// newSchemaFrame frames s, resolving each recorded schema other than
// s's.
func newSchemaFrame[T any](s SchemaSerde[T], r schemaRecord) (*schemaFrame[T], error) {
	f := &schemaFrame[T]{s: s, text: s.Schema(), tag: tagOf(s.Schema())}
	for _, text := range r.recorded {
		if text == f.text || slices.ContainsFunc(f.olds, func(o oldSchema[T]) bool { return o.text == text }) {
			continue
		}
		tag := tagOf(text)
		if tag == f.tag || slices.ContainsFunc(f.olds, func(o oldSchema[T]) bool { return o.tag == tag }) {
			return nil, &unrecoverableError{Err: fmt.Errorf("restore state %q: two of its %s's schemas have the same tag %x, so its values cannot tell them apart; change the new schema's text (a doc string will do)", r.state, r.role, tag[:])}
		}
		dec, err := s.Resolve(text)
		if err != nil {
			return nil, &unrecoverableError{Err: &IncompatibleSchemaError{State: r.state, Role: r.role, Serde: s.Name(), Writer: text, Reader: f.text, Err: err}}
		}
		f.olds = append(f.olds, oldSchema[T]{tag: tag, text: text, decode: dec})
	}
	return f, nil
}

// codecSchemas are the schemas codec c reads (the current one first),
// none unless it is a SchemaSerde's.
func codecSchemas[T any](c stateCodec[T]) []string {
	if s, ok := c.ext.(schemaCarrier); ok {
		return s.schemaTexts()
	}
	return nil
}

// schemaRole adds role's schemas in codec c to the shape the state's
// checkpoints record: the current one, and with all (pebble) every
// schema its values may still carry.
func schemaRole[T any](d *declaredShape, role string, c stateCodec[T], all bool) {
	texts := codecSchemas(c)
	if !all && len(texts) > 1 {
		texts = texts[:1]
	}
	for _, text := range texts {
		d.roles = append(d.roles, stateformat.RoleShape{Role: role, Encoding: stateformat.SchemaEncoding, Schema: text})
	}
	if len(texts) > 0 {
		d.text = d.roles.Encode()
	}
}

// recordedSchemas reads the schemas of role that the restored records of
// state name hold (its heap entries' shape records and its pebble table
// entry), before the state claims them.
func (ks *keyedState[K]) recordedSchemas(name, role string) (schemaRecord, error) {
	r := schemaRecord{state: name, role: role}
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
			if !slices.Contains(r.recorded, text) {
				r.recorded = append(r.recorded, text)
			}
		}
	}
	return r, nil
}

// evolveRole is evolveCodec of role's codec c in state name, from what
// the restore recorded.
func evolveRole[K comparable, T any](ks *keyedState[K], name, role string, c stateCodec[T]) (stateCodec[T], error) {
	if c.ext == nil {
		return c, nil
	}
	r, err := ks.recordedSchemas(name, role)
	if err != nil {
		return c, err
	}
	return evolveCodec(c, r)
}
