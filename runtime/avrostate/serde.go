package avrostate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/hamba/avro/v2"
	"github.com/modern-go/reflect2"
	"github.com/splitflow/splitflow/runtime"
)

// Name is the Name of every Serde of this package, which checkpoints
// record: a restore into a state whose serde is not an Avro one of this
// package is refused, whatever the schemas.
const Name = "splitflow/avro"

// Serde writes values of T in Avro's binary encoding under its schema,
// and reads values written under an earlier schema of the state by Avro's
// resolution rules (runtime.SchemaSerde). It is safe for concurrent use.
type Serde[T any] struct {
	text   string
	schema avro.Schema
	// enc and dec are hamba/avro's encoder and decoder of schema for T,
	// built once: Append and Decode call them directly instead of looking
	// them up in hamba's cache on each value.
	enc avro.ValEncoder
	dec avro.ValDecoder
	// direct says T is stored in an interface as its one pointer word (a
	// pointer, a map): hamba's encoder of such a type takes that word,
	// not a pointer to the value.
	direct bool
	// pooled says Decode may reuse a Reader: a Reader keeps a slab that
	// later values are cut from, and a []byte value keeps the slab's rest
	// as its capacity, so a schema with bytes gets a Reader per value.
	pooled  bool
	writers sync.Pool // *avro.Writer
	readers sync.Pool // *avro.Reader
}

// maxPooledWriter is the largest buffer Append gives back to the pool.
const maxPooledWriter = 64 << 10

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
	t2 := reflect2.Type2(typ)
	return &Serde[T]{
		text:   compact.String(),
		schema: s,
		enc:    avro.DefaultConfig.EncoderOf(s, t2),
		dec:    decoderOf[T](s),
		direct: t2.LikePtr(),
		pooled: !hasBytes(s, map[string]bool{}),
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

var _ runtime.SchemaSerde[struct{}] = (*Serde[struct{}])(nil)

// Name implements runtime.Serde.
func (s *Serde[T]) Name() string { return Name }

// Schema implements runtime.SchemaSerde: the schema's text, compacted.
func (s *Serde[T]) Schema() string { return s.text }

// Append implements runtime.Serde: v's Avro binary encoding.
func (s *Serde[T]) Append(dst []byte, v T) ([]byte, error) {
	w, _ := s.writers.Get().(*avro.Writer)
	if w == nil {
		w = avro.NewWriter(nil, 256)
	}
	w.Reset(nil)
	w.Error = nil
	p := unsafe.Pointer(&v)
	if s.direct {
		p = *(*unsafe.Pointer)(p)
	}
	s.enc.Encode(p, w)
	if err := w.Error; err != nil {
		w.Error = nil
		s.writers.Put(w)
		return nil, fmt.Errorf("avrostate: encode a %T: %w", v, err)
	}
	dst = append(dst, w.Buffer()...)
	if cap(w.Buffer()) <= maxPooledWriter {
		s.writers.Put(w)
	}
	return dst, nil
}

// Decode implements runtime.Serde: b is a value Append wrote under the
// serde's schema.
func (s *Serde[T]) Decode(b []byte) (T, error) { return s.decode(s.dec, s.pooled, b) }

func (s *Serde[T]) decode(dec avro.ValDecoder, pooled bool, b []byte) (T, error) {
	var r *avro.Reader
	if pooled {
		r, _ = s.readers.Get().(*avro.Reader)
	}
	if r == nil {
		r = avro.NewReader(nil, 0)
	}
	r.Error = nil
	r.Reset(b)
	var v T
	dec.Decode(unsafe.Pointer(&v), r)
	err := r.Error
	if err == nil {
		// Bytes left over mean the value was not written with that
		// schema: reading it "successfully" would hide that.
		var one [1]byte
		if r.Read(one[:]); r.Error == nil {
			err = errors.New("bytes are left over after the value")
		}
	}
	r.Reset(nil) // the pool must not keep the value's bytes alive
	r.Error = nil
	if pooled {
		s.readers.Put(r)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("avrostate: decode a %T: %w", zero, err)
	}
	return v, nil
}

// Resolve implements runtime.SchemaSerde: the decoder of values written
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
	dec := decoderOf[T](composite)
	pooled := s.pooled && !hasBytes(w, map[string]bool{})
	return func(b []byte) (T, error) { return s.decode(dec, pooled, b) }, nil
}

// decoderOf returns hamba/avro's decoder of schema into a *T.
func decoderOf[T any](schema avro.Schema) avro.ValDecoder {
	return avro.DefaultConfig.DecoderOf(schema, reflect2.Type2(reflect.TypeFor[*T]()))
}

// hasBytes reports whether s has the bytes type anywhere in it; seen
// holds the records walked, so a recursive schema ends.
func hasBytes(s avro.Schema, seen map[string]bool) bool {
	switch t := s.(type) {
	case *avro.PrimitiveSchema:
		return t.Type() == avro.Bytes
	case *avro.RefSchema:
		return hasBytes(t.Schema(), seen)
	case *avro.RecordSchema:
		if seen[t.FullName()] {
			return false
		}
		seen[t.FullName()] = true
		for _, f := range t.Fields() {
			if hasBytes(f.Type(), seen) {
				return true
			}
		}
	case *avro.ArraySchema:
		return hasBytes(t.Items(), seen)
	case *avro.MapSchema:
		return hasBytes(t.Values(), seen)
	case *avro.UnionSchema:
		for _, u := range t.Types() {
			if hasBytes(u, seen) {
				return true
			}
		}
	}
	return false
}
