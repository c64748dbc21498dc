package avrostate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/internal/avrocodec"
	"github.com/splitflow/splitflow/runtime/state"
)

// Name is the Name of every Serde of this package, which checkpoints
// record: a restore into a state whose serde is not an Avro one of this
// package is refused, whatever the schemas.
const Name = "splitflow/avro"

// Serde writes values of T in Avro's binary encoding under its schema,
// and reads values written under an earlier schema of the state by Avro's
// resolution rules (state.SchemaSerde). It is safe for concurrent use.
type Serde[T any] struct {
	text   string
	schema avro.Schema
	// enc and dec are hamba/avro's encoder and decoder of schema for T,
	// built once: Append and Decode call them directly instead of looking
	// them up in hamba's cache on each value.
	enc *avrocodec.Encoder[T]
	dec avro.ValDecoder
	// pooled says Decode may reuse a Reader (avrocodec.Pooled).
	pooled   bool
	decoders avrocodec.Decoder[T]
}

// New returns the serde of T under schema, the Avro schema's JSON text
// (checkpoints record it with its white space removed). It fails when
// the schema does not parse or T is an interface type.
func New[T any](schema string) (*Serde[T], error) {
	typ := reflect.TypeFor[T]()
	if typ.Kind() == reflect.Interface {
		return nil, fmt.Errorf("avrostate: %s is an interface type; give the serde a struct with avro field tags, or a map[string]any", typ)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(schema)); err != nil {
		return nil, fmt.Errorf("avrostate: the schema of %s is not JSON: %w", typ, err)
	}
	// A cache of its own: the shared one keeps one definition per name,
	// and a program may hold a record's v1 and v2.
	s, err := avro.ParseWithCache(compact.String(), "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("avrostate: the schema of %s does not parse as Avro: %w", typ, err)
	}
	return &Serde[T]{
		text:   compact.String(),
		schema: s,
		enc:    avrocodec.NewEncoder[T](s),
		dec:    avrocodec.DecoderOf[T](s),
		pooled: avrocodec.Pooled(s),
	}, nil
}

// Must is New for a package variable beside the state's descriptor: it
// panics where New fails, as the descriptor does on a mistake, so the
// program stops as it starts.
func Must[T any](schema string) *Serde[T] {
	s, err := New[T](schema)
	if err != nil {
		panic(err)
	}
	return s
}

var _ state.SchemaSerde[struct{}] = (*Serde[struct{}])(nil)

// Name implements state.Serde.
func (s *Serde[T]) Name() string { return Name }

// Schema implements state.SchemaSerde: the schema's text, compacted.
func (s *Serde[T]) Schema() string { return s.text }

// Append implements state.Serde: v's Avro binary encoding.
func (s *Serde[T]) Append(dst []byte, v T) ([]byte, error) {
	dst, err := s.enc.Append(dst, nil, v)
	if err != nil {
		return nil, fmt.Errorf("avrostate: encode a %T: %w", v, err)
	}
	return dst, nil
}

// Decode implements state.Serde: b is a value Append wrote under the
// serde's schema.
func (s *Serde[T]) Decode(b []byte) (T, error) { return s.decode(s.dec, s.pooled, b) }

func (s *Serde[T]) decode(dec avro.ValDecoder, pooled bool, b []byte) (T, error) {
	v, err := s.decoders.Decode(dec, pooled, b)
	if err != nil {
		return v, fmt.Errorf("avrostate: decode a %T: %w", v, err)
	}
	return v, nil
}

// Resolve implements state.SchemaSerde: the decoder of values written
// under the schema writer, resolved to the serde's by Avro's rules, or an
// error listing how the schemas differ and what to do.
func (s *Serde[T]) Resolve(writer string) (func([]byte) (T, error), error) {
	w, err := avro.ParseWithCache(writer, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("the checkpoint's schema does not parse as Avro: %w", err)
	}
	composite, err := avro.NewSchemaCompatibility().Resolve(s.schema, w)
	if err != nil {
		return nil, incompatible(w, s.schema, err)
	}
	dec := avrocodec.DecoderOf[T](composite)
	pooled := s.pooled && avrocodec.Pooled(w)
	return func(b []byte) (T, error) { return s.decode(dec, pooled, b) }, nil
}
