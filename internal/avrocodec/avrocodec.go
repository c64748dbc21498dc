// Package avrocodec encodes and decodes values of a Go type with
// hamba/avro's encoder and decoder for one schema, looked up once instead
// of in hamba's codec cache on each value, through pooled Writers and
// Readers. The schema-registry serdes (connector/kafka/registry) and the
// Avro serde of keyed state (runtime/avrostate) both write and read this
// way; each puts its own name and context on the errors.
package avrocodec

import (
	"errors"
	"reflect"
	"sync"
	"unsafe"

	"github.com/hamba/avro/v2"
	"github.com/modern-go/reflect2"
)

// maxPooledWriter is the largest buffer an Encoder gives back to its
// pool: one huge value must not pin its buffer for the rest of the job.
const maxPooledWriter = 64 << 10

// Encoder writes values of T under one schema. It is safe for concurrent
// use.
type Encoder[T any] struct {
	schema avro.Schema
	// enc is hamba's encoder of schema for T, nil when T is an interface
	// type (any): then each value's dynamic type picks the encoder, as
	// WriteVal does.
	enc avro.ValEncoder
	// direct says T is stored in an interface as its one pointer word (a
	// pointer, a map): hamba's encoder of such a type takes that word,
	// not a pointer to the value.
	direct bool
	// writers holds *avro.Writer whose buffers Append reuses; a Writer
	// is used by one Append at a time.
	writers sync.Pool
}

// NewEncoder returns the encoder of T under schema.
func NewEncoder[T any](schema avro.Schema) *Encoder[T] {
	e := &Encoder[T]{schema: schema}
	if typ := reflect.TypeFor[T](); typ.Kind() != reflect.Interface {
		t2 := reflect2.Type2(typ)
		e.enc = avro.DefaultConfig.EncoderOf(schema, t2)
		e.direct = t2.LikePtr()
	}
	return e
}

// noescape returns p, hiding from escape analysis that the result
// depends on it, as the Go runtime's function of that name does: a value
// whose address goes only to a call that keeps nothing of it after
// returning (hamba's encoders, which hamba calls so itself) may then stay
// on the stack instead of moving to the heap. The round trip through a
// uintptr happens in memory, not by conversion, which vet would flag.
func noescape(p unsafe.Pointer) unsafe.Pointer {
	x := uintptr(p)
	return *(*unsafe.Pointer)(unsafe.Pointer(&x))
}

// Append returns dst with prefix and then v's Avro binary encoding
// appended. A nil dst gets a new slice of exactly their size: the
// caller keeps it (a produced record's value), and the pooled buffer
// goes to the next value.
func (e *Encoder[T]) Append(dst, prefix []byte, v T) ([]byte, error) {
	w, _ := e.writers.Get().(*avro.Writer)
	if w == nil {
		w = avro.NewWriter(nil, 512)
	}
	w.Reset(nil)
	w.Error = nil
	_, _ = w.Write(prefix) // a Writer without an io.Writer only appends
	if e.enc == nil {
		w.WriteVal(e.schema, v)
	} else {
		// Not v boxed into an interface, as WriteVal takes it: that
		// would copy each value to the heap.
		p := noescape(unsafe.Pointer(&v))
		if e.direct {
			p = *(*unsafe.Pointer)(p)
		}
		e.enc.Encode(p, w)
	}
	if err := w.Error; err != nil {
		w.Error = nil
		e.writers.Put(w)
		return nil, err
	}
	if dst == nil {
		dst = make([]byte, 0, w.Buffered())
	}
	dst = append(dst, w.Buffer()...)
	if cap(w.Buffer()) <= maxPooledWriter {
		e.writers.Put(w)
	}
	return dst, nil
}

// DecoderOf returns hamba's decoder of schema into a *T, the one
// Reader.ReadVal(schema, &v) would look up in its cache. A schema T
// cannot hold gives a decoder that reports so on each value, as ReadVal
// would.
func DecoderOf[T any](schema avro.Schema) avro.ValDecoder {
	return avro.DefaultConfig.DecoderOf(schema, reflect2.Type2(reflect.TypeFor[*T]()))
}

// Pooled reports whether values of every schema given may be read with a
// pooled Reader. A Reader copies each string and bytes value of up to
// 1 KiB into a slab it keeps, cutting each from the front of the slab's
// unused rest, so later reads never write over a string handed out. A
// []byte value, though, keeps the rest of the slab as its capacity, and
// an append to it would write over the values read next: a schema with
// bytes anywhere in it gets a Reader of its own per value.
func Pooled(schemas ...avro.Schema) bool {
	for _, s := range schemas {
		if hasBytes(s, map[string]bool{}) {
			return false
		}
	}
	return true
}

// hasBytes reports whether s has the bytes type anywhere in it; seen
// holds the named types walked, so a recursive schema ends.
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

// ErrTrailingBytes is the error of a decode that left bytes after the
// value: the value was not written with that schema (or carries
// garbage), and reading it "successfully" would hide that.
var ErrTrailingBytes = errors.New("bytes are left over after the value")

// Decoder reads values of T; it is safe for concurrent use.
type Decoder[T any] struct {
	// states holds the *decodeState[T] Decode reuses; a state is used by
	// one Decode at a time.
	states sync.Pool
}

// decodeState is what one Decode works with: a Reader and a place to
// decode into that outlives the call, so that handing hamba's decoder a
// pointer to it does not move each value to the heap. v is the zero T
// between Decodes.
type decodeState[T any] struct {
	r *avro.Reader
	v T
}

// Decode reads b, all of it, with dec (from DecoderOf), each value from
// the zero T. pooled (from Pooled) says whether the pooled Reader may be
// used. Running out of bytes is an error, as it is not for
// avro.Unmarshal: the value was cut short.
func (d *Decoder[T]) Decode(dec avro.ValDecoder, pooled bool, b []byte) (T, error) {
	st, _ := d.states.Get().(*decodeState[T])
	if st == nil {
		st = &decodeState[T]{r: avro.NewReader(nil, 0)}
	}
	r := st.r
	if !pooled {
		r = avro.NewReader(nil, 0)
	}
	r.Error = nil
	r.Reset(b)
	var v T
	dec.Decode(unsafe.Pointer(&st.v), r)
	v, st.v = st.v, v // v was the zero T: the state is ready for the next value
	err := r.Error
	if err == nil {
		var one [1]byte
		if r.Read(one[:]); r.Error == nil {
			err = ErrTrailingBytes
		}
	}
	r.Reset(nil) // the pool must not keep the value's bytes alive
	r.Error = nil
	d.states.Put(st)
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
