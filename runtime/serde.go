package runtime

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"math"
	"reflect"
	"unsafe"
)

// State encodings. Every key, value, map key and map value type of keyed
// state, and the key type of timers, has a codec chosen from the type when
// the state is declared: strings, byte slices, integers of every width,
// floats and bools, and named types over them, have a compact binary
// encoding of their own; every other type, and a named basic type that
// marshals itself (gob.GobEncoder, encoding.BinaryMarshaler), is written
// with encoding/gob, whose rules statetype.go checks at declaration.
//
// A snapshot writes values a column at a time (keyedstate.go): the codec
// id, uvarint(length) and the column's bytes: for a binary codec each
// value's encoding in turn, for gob one gob stream of the column as a
// slice. The id lets a restore with a changed type say so instead of
// misreading the bytes. Binary encodings:
//
//	string     uvarint(len) bytes
//	[]byte     uvarint(len+1) bytes; 0 is a nil slice
//	ints       varint (zigzag), any signed width; range-checked on restore
//	uints      uvarint, any unsigned width; range-checked on restore
//	float32    4 bytes, little-endian IEEE 754 bits
//	float64    8 bytes, little-endian IEEE 754 bits
//	bool       1 byte, 0 or 1

// Codec ids; never renumber, they are in checkpoints.
const (
	codecGob     byte = 0
	codecString  byte = 1
	codecBytes   byte = 2
	codecInt     byte = 3
	codecUint    byte = 4
	codecFloat32 byte = 5
	codecFloat64 byte = 6
	codecBool    byte = 7
)

func codecName(id byte) string {
	switch id {
	case codecGob:
		return "encoding/gob"
	case codecString:
		return "string"
	case codecBytes:
		return "[]byte"
	case codecInt:
		return "signed integer"
	case codecUint:
		return "unsigned integer"
	case codecFloat32:
		return "float32"
	case codecFloat64:
		return "float64"
	case codecBool:
		return "bool"
	}
	return fmt.Sprintf("codec %d", id)
}

// serde writes and reads single values of T in a binary form. It is the
// shape a user-supplied serializer will take.
type serde[T any] interface {
	// appendValue appends v's encoding to dst.
	appendValue(dst []byte, v T) []byte
	// readValue decodes the value at the start of b and says how many
	// bytes it took.
	readValue(b []byte) (T, int, error)
}

// stateCodec is how one state type is written: a binary serde, or gob
// when s is nil.
type stateCodec[T any] struct {
	id byte
	s  serde[T]
}

// codecFor chooses T's codec.
func codecFor[T any]() stateCodec[T] {
	t := reflect.TypeFor[T]()
	if selfEncoding(t) != "" {
		return stateCodec[T]{id: codecGob}
	}
	switch t.Kind() {
	case reflect.String:
		return builtin[T](codecString, stringSerde{})
	case reflect.Slice:
		if t.Elem() == reflect.TypeFor[byte]() {
			return builtin[T](codecBytes, bytesSerde{})
		}
	case reflect.Bool:
		return builtin[T](codecBool, boolSerde{})
	case reflect.Int:
		return builtin[T](codecInt, intSerde[int]{})
	case reflect.Int8:
		return builtin[T](codecInt, intSerde[int8]{})
	case reflect.Int16:
		return builtin[T](codecInt, intSerde[int16]{})
	case reflect.Int32:
		return builtin[T](codecInt, intSerde[int32]{})
	case reflect.Int64:
		return builtin[T](codecInt, intSerde[int64]{})
	case reflect.Uint:
		return builtin[T](codecUint, uintSerde[uint]{})
	case reflect.Uint8:
		return builtin[T](codecUint, uintSerde[uint8]{})
	case reflect.Uint16:
		return builtin[T](codecUint, uintSerde[uint16]{})
	case reflect.Uint32:
		return builtin[T](codecUint, uintSerde[uint32]{})
	case reflect.Uint64:
		return builtin[T](codecUint, uintSerde[uint64]{})
	case reflect.Float32:
		return builtin[T](codecFloat32, float32Serde{})
	case reflect.Float64:
		return builtin[T](codecFloat64, float64Serde{})
	}
	return stateCodec[T]{id: codecGob}
}

// builtin makes s, a serde of T's underlying type U, one of T: s itself
// when T is U, otherwise through a reinterpretation of T as U, whose
// memory layout it shares by definition of reflect.Kind.
func builtin[T, U any](id byte, s serde[U]) stateCodec[T] {
	if same, ok := any(s).(serde[T]); ok {
		return stateCodec[T]{id: id, s: same}
	}
	return stateCodec[T]{id: id, s: reinterpret[T, U]{s}}
}

type reinterpret[T, U any] struct{ s serde[U] }

func (r reinterpret[T, U]) appendValue(dst []byte, v T) []byte {
	return r.s.appendValue(dst, *(*U)(unsafe.Pointer(&v)))
}

func (r reinterpret[T, U]) readValue(b []byte) (T, int, error) {
	u, n, err := r.s.readValue(b)
	return *(*T)(unsafe.Pointer(&u)), n, err
}

type stringSerde struct{}

func (stringSerde) appendValue(dst []byte, v string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(v))), v...)
}

func (stringSerde) readValue(b []byte) (string, int, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return "", 0, errShortState
	}
	return string(b[n : n+int(l)]), n + int(l), nil
}

type bytesSerde struct{}

func (bytesSerde) appendValue(dst []byte, v []byte) []byte {
	if v == nil {
		return append(dst, 0)
	}
	return append(binary.AppendUvarint(dst, uint64(len(v))+1), v...)
}

func (bytesSerde) readValue(b []byte) ([]byte, int, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || (l > 0 && uint64(len(b)-n) < l-1) {
		return nil, 0, errShortState
	}
	if l == 0 {
		return nil, n, nil
	}
	return bytes.Clone(b[n : n+int(l-1)]), n + int(l-1), nil
}

type boolSerde struct{}

func (boolSerde) appendValue(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (boolSerde) readValue(b []byte) (bool, int, error) {
	if len(b) < 1 || b[0] > 1 {
		return false, 0, errShortState
	}
	return b[0] == 1, 1, nil
}

type intSerde[T int | int8 | int16 | int32 | int64] struct{}

func (intSerde[T]) appendValue(dst []byte, v T) []byte { return binary.AppendVarint(dst, int64(v)) }

func (intSerde[T]) readValue(b []byte) (T, int, error) {
	x, n := binary.Varint(b)
	if n <= 0 {
		return 0, 0, errShortState
	}
	if int64(T(x)) != x {
		return 0, 0, fmt.Errorf("integer %d does not fit in %T", x, T(0))
	}
	return T(x), n, nil
}

type uintSerde[T uint | uint8 | uint16 | uint32 | uint64] struct{}

func (uintSerde[T]) appendValue(dst []byte, v T) []byte { return binary.AppendUvarint(dst, uint64(v)) }

func (uintSerde[T]) readValue(b []byte) (T, int, error) {
	x, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, errShortState
	}
	if uint64(T(x)) != x {
		return 0, 0, fmt.Errorf("integer %d does not fit in %T", x, T(0))
	}
	return T(x), n, nil
}

type float32Serde struct{}

func (float32Serde) appendValue(dst []byte, v float32) []byte {
	return binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
}

func (float32Serde) readValue(b []byte) (float32, int, error) {
	if len(b) < 4 {
		return 0, 0, errShortState
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b)), 4, nil
}

type float64Serde struct{}

func (float64Serde) appendValue(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func (float64Serde) readValue(b []byte) (float64, int, error) {
	if len(b) < 8 {
		return 0, 0, errShortState
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), 8, nil
}

// column collects one column of a snapshot entry.
type column[T any] struct {
	c   stateCodec[T]
	n   int
	buf []byte // binary codecs
	vs  []T    // gob
}

func (w *column[T]) add(v T) {
	w.n++
	if w.c.s != nil {
		w.buf = w.c.s.appendValue(w.buf, v)
	} else {
		w.vs = append(w.vs, v)
	}
}

// size is what appendTo appends, for a binary codec.
func (w *column[T]) size() int { return 1 + binary.MaxVarintLen64 + len(w.buf) }

// appendTo appends the column, framed, to dst.
func (w *column[T]) appendTo(dst []byte) ([]byte, error) {
	dst = append(dst, w.c.id)
	data := w.buf
	if w.c.s == nil && len(w.vs) > 0 {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(w.vs); err != nil {
			return nil, err
		}
		data = buf.Bytes()
	}
	dst = binary.AppendUvarint(dst, uint64(len(data)))
	return append(dst, data...), nil
}

// readColumn reads a column of n values of T written by appendTo and
// returns the rest of b.
func readColumn[T any](b []byte, n int, c stateCodec[T]) ([]T, []byte, error) {
	if len(b) < 1 {
		return nil, nil, errShortState
	}
	id := b[0]
	if id != c.id {
		return nil, nil, fmt.Errorf("it was checkpointed as %s and its type %s is now encoded as %s; keep the type, or rename the state", codecName(id), reflect.TypeFor[T](), codecName(c.id))
	}
	l, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < l {
		return nil, nil, errShortState
	}
	data, rest := b[1+k:1+k+int(l)], b[1+k+int(l):]
	if n == 0 {
		return nil, rest, nil
	}
	if c.s == nil {
		var vs []T
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&vs); err != nil {
			return nil, nil, err
		}
		if len(vs) != n {
			return nil, nil, fmt.Errorf("column holds %d values, want %d", len(vs), n)
		}
		return vs, rest, nil
	}
	vs := make([]T, n)
	for i := range vs {
		v, m, err := c.s.readValue(data)
		if err != nil {
			return nil, nil, err
		}
		vs[i], data = v, data[m:]
	}
	if len(data) != 0 {
		return nil, nil, fmt.Errorf("%d bytes after the last of %d values", len(data), n)
	}
	return vs, rest, nil
}
