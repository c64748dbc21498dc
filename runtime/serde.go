package runtime

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/splitflow/splitflow/runtime/internal/engine"
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
	// codecJSON is JSONSerde; codecUser a Serde of the job's own, whose
	// name follows the id in a column's header and in a pebble
	// checkpoint's table of states.
	codecJSON byte = 8
	codecUser byte = 9
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
	case codecJSON:
		return "encoding/json"
	}
	return fmt.Sprintf("codec %d", id)
}

// serde writes and reads single values of T in a binary form: the
// built-in encodings, self-delimiting so that a column is their
// concatenation.
type serde[T any] interface {
	// appendValue appends v's encoding to dst.
	appendValue(dst []byte, v T) []byte
	// readValue decodes the value at the start of b and says how many
	// bytes it took.
	readValue(b []byte) (T, int, error)
}

// stateCodec is how one state type is written: a built-in binary serde
// s; a Serde ext (JSONSerde, or the job's own, named name), each value
// framed by its length in a column; or gob when both are nil.
type stateCodec[T any] struct {
	id   byte
	s    serde[T]
	ext  Serde[T]
	name string
	// boxed, for the key view of descriptors over a key type not of a
	// basic kind (viewBoxed, T being any), writes and reads a gob column
	// of the key type itself, so that the view's checkpoints hold the
	// bytes the key type's own column would.
	boxed boxedColumn
}

// boxedColumn is a gob column of one key type, given and taken as a
// []any of its values.
type boxedColumn interface {
	encodeColumn(vs []any) ([]byte, error)
	decodeColumn(data []byte) ([]any, error)
	// elem is the key type, for the shape a checkpoint records.
	elem() reflect.Type
}

// boxedGob is the boxedColumn of key type K.
type boxedGob[K any] struct{}

func (boxedGob[K]) encodeColumn(vs []any) ([]byte, error) {
	ks := make([]K, len(vs))
	for i, v := range vs {
		ks[i] = v.(K)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(ks); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (boxedGob[K]) decodeColumn(data []byte) ([]any, error) {
	var ks []K
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&ks); err != nil {
		return nil, err
	}
	vs := make([]any, len(ks))
	for i, k := range ks {
		vs[i] = k
	}
	return vs, nil
}

func (boxedGob[K]) elem() reflect.Type { return reflect.TypeFor[K]() }

// String names the codec in errors and declarations.
func (c stateCodec[T]) String() string {
	return codecLabel(c.id, c.name)
}

func codecLabel(id byte, name string) string {
	if id == codecUser {
		return fmt.Sprintf("serde %q", name)
	}
	return codecName(id)
}

// desc is the codec as a pebble checkpoint records it: the id, and the
// name of a Serde of the job's own.
func (c stateCodec[T]) desc() string {
	b := []byte{c.id}
	if c.id == codecUser {
		b = append(binary.AppendUvarint(b, uint64(len(c.name))), c.name...)
	}
	return string(b)
}

// Serde is how values of T are written in checkpoints (and held, with the
// pebble backend): the encoding of one value, given to a state descriptor
// with WithSerde or WithMapKeySerde. The built-in ones are DefaultSerde
// (the binary encodings of strings, numbers and bools, gob for the rest),
// GobSerde and JSONSerde; a job may implement its own.
//
// A checkpoint records which serde wrote each state: the built-in ones by
// their encoding, the job's own by Name. A restore whose state was
// written by another serde, or under another name, is refused with an
// error naming both, so a job that changes an encoding incompatibly
// changes its serde's name with it (a version in the name, "point/v2",
// and a state of a new name, is one way to move); a serde that reads
// values written under its earlier schemas implements SchemaSerde, and
// its state's type may then change as its schema's rules allow (package
// runtime/avrostate: Avro's). Methods may be called
// from any goroutine at once (the heap backend encodes snapshots off the
// task goroutine).
type Serde[T any] interface {
	// Name identifies the encoding in checkpoints; never empty.
	Name() string
	// Append appends v's encoding to dst and returns the extended slice.
	Append(dst []byte, v T) ([]byte, error)
	// Decode decodes a value from b, which holds exactly what one Append
	// appended. It must not keep b.
	Decode(b []byte) (T, error)
}

// codecSerde is a built-in Serde, which the engine writes by its codec.
type codecSerde[T any] interface {
	Serde[T]
	codec() stateCodec[T]
}

// builtinSerde is one of the engine's encodings as a Serde.
type builtinSerde[T any] struct{ c stateCodec[T] }

func (b builtinSerde[T]) Name() string                           { return b.c.String() }
func (b builtinSerde[T]) Append(dst []byte, v T) ([]byte, error) { return appendOne(dst, b.c, v) }
func (b builtinSerde[T]) Decode(data []byte) (T, error)          { return readOne(data, b.c) }
func (b builtinSerde[T]) codec() stateCodec[T]                   { return b.c }

// DefaultSerde is the serde a state of T gets when none is given: a
// compact binary encoding for strings, byte slices, integers (varints),
// floats (IEEE 754 bits) and bools, and named types over them that do
// not encode themselves; encoding/gob for every other type.
//
// The gob rule: a type written with gob must be one gob encodes whole:
// basic types, slices, arrays, maps and pointers of such, and structs
// whose fields are all exported and of such types, at any depth;
// interface values need their concrete types registered with
// gob.Register. A type that encodes itself (encoding.BinaryMarshaler
// with BinaryUnmarshaler, or gob.GobEncoder with GobDecoder) is taken as
// it is. Anything else (an unexported field, which gob would silently
// drop so that a restore brings it back as its zero value; a func or
// chan field; a chan or func type) is refused with a *StateTypeError
// naming the state, the type and the field: a descriptor's value, map
// and element types when it is made (it panics), the stream's key type
// when the state is first used (the job fails at once, without
// restarts).
func DefaultSerde[T any]() Serde[T] { return builtinSerde[T]{codecFor[T]()} }

// GobSerde writes values with encoding/gob, the default for types without
// a built-in binary encoding; gob's rules are checked when the state is
// declared (see DefaultSerde).
func GobSerde[T any]() Serde[T] { return builtinSerde[T]{stateCodec[T]{id: codecGob}} }

// JSONSerde writes values with encoding/json: the fallback for types gob
// does not suit, or whose checkpoints other tools read. The type is
// checked when the state is declared: a field JSON would drop or could
// not bring back (unexported, tagged "-", an interface, func, chan or
// complex number, a map key that is not a string, integer or
// encoding.TextMarshaler) is refused, unless the type implements
// json.Marshaler and json.Unmarshaler itself.
func JSONSerde[T any]() Serde[T] { return jsonSerde[T]{} }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Name() string { return "encoding/json" }

func (jsonSerde[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

func (jsonSerde[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

func (j jsonSerde[T]) codec() stateCodec[T] { return stateCodec[T]{id: codecJSON, ext: j} }

// codecOf is the codec of serde s.
func codecOf[T any](s Serde[T]) stateCodec[T] {
	if b, ok := s.(codecSerde[T]); ok {
		return b.codec()
	}
	return stateCodec[T]{id: codecUser, ext: s, name: s.Name()}
}

// StateOption configures a state descriptor (NewValueState, NewMapState).
type StateOption interface{ applyState(*stateOptions) }

type stateOptions struct {
	serde, mapKeySerde any
	ttl                *ttlConfig // WithTTL (ttl.go)
	dropped            []string   // AllowDroppedFields (stateshape.go)
}

type stateOptionFunc func(*stateOptions)

func (f stateOptionFunc) applyState(o *stateOptions) { f(o) }

// WithSerde sets the serde of a state's values (a MapState's map values);
// default DefaultSerde of the value type. It must be a Serde of that
// type, or the descriptor's constructor panics.
func WithSerde[T any](s Serde[T]) StateOption {
	return stateOptionFunc(func(o *stateOptions) { o.serde = s })
}

// WithMapKeySerde sets the serde of a MapState's map keys; default
// DefaultSerde of the map key type.
func WithMapKeySerde[T any](s Serde[T]) StateOption {
	return stateOptionFunc(func(o *stateOptions) { o.mapKeySerde = s })
}

func stateOptionsOf(name string, opts []StateOption) stateOptions {
	if name == "" {
		panic("runtime: a state descriptor needs a name")
	}
	var o stateOptions
	for _, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("state %q: nil StateOption", name))
		}
		opt.applyState(&o)
	}
	return o
}

// mustCodec is the codec of a descriptor's role (value type, map key
// type...) from the serde given by option opt (nil for the default),
// with the type checked for that codec; it panics on a mistake.
func mustCodec[T any](name, role string, given any, opt string) stateCodec[T] {
	c := codecFor[T]()
	if given != nil {
		s, ok := given.(Serde[T])
		if !ok || s == nil {
			panic(fmt.Sprintf("state %q: %s is given a %T, not a Serde[%s]", name, opt, given, typeOf[T]()))
		}
		if _, evolves := s.(SchemaSerde[T]); evolves && role == "map key type" {
			panic(fmt.Sprintf("state %q: the map key serde %q is a SchemaSerde: map keys are found by their bytes, which a schema change would change; give the map keys a serde without a schema", name, s.Name()))
		}
		c = codecOf(s)
	}
	var err *StateTypeError
	switch {
	case c.id == codecUser && c.name == "":
		panic(fmt.Sprintf("state %q: the %s's serde %T has an empty Name; a checkpoint records the name", name, role, given))
	case c.id == codecGob:
		err = checkGobType(typeOf[T]())
	case c.id == codecJSON:
		err = checkJSONType(typeOf[T]())
	}
	if err != nil {
		err.State, err.Role, err.Type = name, role, typeOf[T]().String()
		panic(err)
	}
	return c
}

// codecFor chooses T's codec.
func codecFor[T any]() stateCodec[T] {
	t := reflect.TypeFor[T]()
	if selfEncoding(t) != "" {
		return stateCodec[T]{id: codecGob}
	}
	id, s := kindCodec(t)
	if s == nil {
		return stateCodec[T]{id: codecGob}
	}
	if same, ok := s.(serde[T]); ok {
		return stateCodec[T]{id: id, s: same}
	}
	return stateCodec[T]{id: id, s: kindSerde[T]{t.Kind()}}
}

// kindCodec is the built-in codec of t's kind (a serde of the kind's own
// type), or a nil serde for a kind without one.
func kindCodec(t reflect.Type) (byte, any) {
	switch t.Kind() {
	case reflect.String:
		return codecString, stringSerde{}
	case reflect.Slice:
		if t.Elem() == reflect.TypeFor[byte]() {
			return codecBytes, bytesSerde{}
		}
	case reflect.Bool:
		return codecBool, boolSerde{}
	case reflect.Int:
		return codecInt, intSerde[int]{}
	case reflect.Int8:
		return codecInt, intSerde[int8]{}
	case reflect.Int16:
		return codecInt, intSerde[int16]{}
	case reflect.Int32:
		return codecInt, intSerde[int32]{}
	case reflect.Int64:
		return codecInt, intSerde[int64]{}
	case reflect.Uint:
		return codecUint, uintSerde[uint]{}
	case reflect.Uint8:
		return codecUint, uintSerde[uint8]{}
	case reflect.Uint16:
		return codecUint, uintSerde[uint16]{}
	case reflect.Uint32:
		return codecUint, uintSerde[uint32]{}
	case reflect.Uint64:
		return codecUint, uintSerde[uint64]{}
	case reflect.Float32:
		return codecFloat32, float32Serde{}
	case reflect.Float64:
		return codecFloat64, float64Serde{}
	}
	return 0, nil
}

// kindSerde is the built-in serde of a named type over a basic kind: the
// kind's own serde, on T's memory seen as the kind's type (which shares
// its layout by definition of reflect.Kind). One serde type switching on
// the kind, not one per kind, keeps the compiled code at one serde per T.
type kindSerde[T any] struct{ kind reflect.Kind }

func (k kindSerde[T]) appendValue(dst []byte, v T) []byte {
	p := unsafe.Pointer(&v)
	switch k.kind {
	case reflect.String:
		return stringSerde{}.appendValue(dst, *(*string)(p))
	case reflect.Slice:
		return bytesSerde{}.appendValue(dst, *(*[]byte)(p))
	case reflect.Bool:
		return boolSerde{}.appendValue(dst, *(*bool)(p))
	case reflect.Int:
		return intSerde[int]{}.appendValue(dst, *(*int)(p))
	case reflect.Int8:
		return intSerde[int8]{}.appendValue(dst, *(*int8)(p))
	case reflect.Int16:
		return intSerde[int16]{}.appendValue(dst, *(*int16)(p))
	case reflect.Int32:
		return intSerde[int32]{}.appendValue(dst, *(*int32)(p))
	case reflect.Int64:
		return intSerde[int64]{}.appendValue(dst, *(*int64)(p))
	case reflect.Uint:
		return uintSerde[uint]{}.appendValue(dst, *(*uint)(p))
	case reflect.Uint8:
		return uintSerde[uint8]{}.appendValue(dst, *(*uint8)(p))
	case reflect.Uint16:
		return uintSerde[uint16]{}.appendValue(dst, *(*uint16)(p))
	case reflect.Uint32:
		return uintSerde[uint32]{}.appendValue(dst, *(*uint32)(p))
	case reflect.Uint64:
		return uintSerde[uint64]{}.appendValue(dst, *(*uint64)(p))
	case reflect.Float32:
		return float32Serde{}.appendValue(dst, *(*float32)(p))
	case reflect.Float64:
		return float64Serde{}.appendValue(dst, *(*float64)(p))
	}
	panic(fmt.Sprintf("kindSerde of kind %v", k.kind))
}

func (k kindSerde[T]) readValue(b []byte) (T, int, error) {
	var v T
	var n int
	var err error
	p := unsafe.Pointer(&v)
	switch k.kind {
	case reflect.String:
		*(*string)(p), n, err = stringSerde{}.readValue(b)
	case reflect.Slice:
		*(*[]byte)(p), n, err = bytesSerde{}.readValue(b)
	case reflect.Bool:
		*(*bool)(p), n, err = boolSerde{}.readValue(b)
	case reflect.Int:
		*(*int)(p), n, err = intSerde[int]{}.readValue(b)
	case reflect.Int8:
		*(*int8)(p), n, err = intSerde[int8]{}.readValue(b)
	case reflect.Int16:
		*(*int16)(p), n, err = intSerde[int16]{}.readValue(b)
	case reflect.Int32:
		*(*int32)(p), n, err = intSerde[int32]{}.readValue(b)
	case reflect.Int64:
		*(*int64)(p), n, err = intSerde[int64]{}.readValue(b)
	case reflect.Uint:
		*(*uint)(p), n, err = uintSerde[uint]{}.readValue(b)
	case reflect.Uint8:
		*(*uint8)(p), n, err = uintSerde[uint8]{}.readValue(b)
	case reflect.Uint16:
		*(*uint16)(p), n, err = uintSerde[uint16]{}.readValue(b)
	case reflect.Uint32:
		*(*uint32)(p), n, err = uintSerde[uint32]{}.readValue(b)
	case reflect.Uint64:
		*(*uint64)(p), n, err = uintSerde[uint64]{}.readValue(b)
	case reflect.Float32:
		*(*float32)(p), n, err = float32Serde{}.readValue(b)
	case reflect.Float64:
		*(*float64)(p), n, err = float64Serde{}.readValue(b)
	default:
		panic(fmt.Sprintf("kindSerde of kind %v", k.kind))
	}
	return v, n, err
}

type stringSerde struct{}

func (stringSerde) appendValue(dst []byte, v string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(v))), v...)
}

func (stringSerde) readValue(b []byte) (string, int, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return "", 0, engine.ErrShortState
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
		return nil, 0, engine.ErrShortState
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
		return false, 0, engine.ErrShortState
	}
	return b[0] == 1, 1, nil
}

type intSerde[T int | int8 | int16 | int32 | int64] struct{}

func (intSerde[T]) appendValue(dst []byte, v T) []byte { return binary.AppendVarint(dst, int64(v)) }

func (intSerde[T]) readValue(b []byte) (T, int, error) {
	x, n := binary.Varint(b)
	if n <= 0 {
		return 0, 0, engine.ErrShortState
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
		return 0, 0, engine.ErrShortState
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
		return 0, 0, engine.ErrShortState
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b)), 4, nil
}

type float64Serde struct{}

func (float64Serde) appendValue(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func (float64Serde) readValue(b []byte) (float64, int, error) {
	if len(b) < 8 {
		return 0, 0, engine.ErrShortState
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), 8, nil
}

// column collects one column of a snapshot entry.
type column[T any] struct {
	c   stateCodec[T]
	n   int
	buf []byte // binary codecs and Serdes
	vs  []T    // gob
	// one is a Serde's encoding of one value; err its first failure,
	// returned by appendTo.
	one []byte
	err error
}

func (w *column[T]) add(v T) {
	w.n++
	switch {
	case w.c.s != nil:
		w.buf = w.c.s.appendValue(w.buf, v)
	case w.c.ext != nil:
		b, err := w.c.ext.Append(w.one[:0], v)
		if err != nil {
			if w.err == nil {
				w.err = fmt.Errorf("%s: %w", w.c, err)
			}
			return
		}
		w.one = b
		w.buf = append(binary.AppendUvarint(w.buf, uint64(len(b))), b...)
	default:
		w.vs = append(w.vs, v)
	}
}

// size is what appendTo appends, for a binary codec or a Serde.
func (w *column[T]) size() int { return 1 + 2*binary.MaxVarintLen64 + len(w.c.name) + len(w.buf) }

// appendTo appends the column, framed, to dst: the codec id (with a
// Serde's name), uvarint(length), the data.
func (w *column[T]) appendTo(dst []byte) ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	dst = append(dst, w.c.id)
	if w.c.id == codecUser {
		dst = append(binary.AppendUvarint(dst, uint64(len(w.c.name))), w.c.name...)
	}
	data := w.buf
	if w.c.boxed != nil && len(w.vs) > 0 {
		b, err := w.c.boxed.encodeColumn(any(w.vs).([]any))
		if err != nil {
			return nil, err
		}
		data = b
	} else if w.c.s == nil && w.c.ext == nil && len(w.vs) > 0 {
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
		return nil, nil, engine.ErrShortState
	}
	id, name := b[0], ""
	b = b[1:]
	if id == codecUser {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return nil, nil, engine.ErrShortState
		}
		name, b = string(b[k:k+int(l)]), b[k+int(l):]
	}
	if err := sameCodec(id, name, c, reflect.TypeFor[T]()); err != nil {
		return nil, nil, err
	}
	l, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < l {
		return nil, nil, engine.ErrShortState
	}
	data, rest := b[k:k+int(l)], b[k+int(l):]
	if n == 0 {
		return nil, rest, nil
	}
	// A value takes a byte at least in a binary codec or a Serde's
	// framing: a count beyond the column's bytes is a damaged or crafted
	// checkpoint, refused before it sizes anything.
	if (c.s != nil || c.ext != nil) && n > len(data) {
		return nil, nil, fmt.Errorf("%w: a column of %d values holds %d bytes", engine.ErrShortState, n, len(data))
	}
	if c.ext != nil {
		vs := make([]T, n)
		for i := range vs {
			l, k := binary.Uvarint(data)
			if k <= 0 || uint64(len(data)-k) < l {
				return nil, nil, engine.ErrShortState
			}
			v, err := c.ext.Decode(data[k : k+int(l)])
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", c, err)
			}
			vs[i], data = v, data[k+int(l):]
		}
		if len(data) != 0 {
			return nil, nil, fmt.Errorf("%d bytes after the last of %d values", len(data), n)
		}
		return vs, rest, nil
	}
	if c.boxed != nil {
		vs, err := c.boxed.decodeColumn(data)
		if err != nil {
			return nil, nil, err
		}
		if len(vs) != n {
			return nil, nil, fmt.Errorf("column holds %d values, want %d", len(vs), n)
		}
		return any(vs).([]T), rest, nil
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

// sameCodec refuses data written by codec id (a Serde's of the job named
// name) for a state now encoded by c.
func sameCodec[T any](id byte, name string, c stateCodec[T], t reflect.Type) error {
	if id == c.id && name == c.name {
		return nil
	}
	if id <= codecBool && c.id <= codecBool {
		return fmt.Errorf("it was checkpointed as %s and its type %s is now encoded as %s; keep the type, or rename the state", codecName(id), t, codecName(c.id))
	}
	if hint := ttlChanged(isTTLCodec(id, name), isTTLCodec(c.id, c.name)); hint != "" {
		return &unrecoverableError{Err: fmt.Errorf("it was checkpointed with %s and the state now has %s%s", codecLabel(id, name), c, hint)}
	}
	return &unrecoverableError{Err: fmt.Errorf("it was checkpointed with %s and the state now has %s (type %s); restore it with the serde that wrote it, or rename the state", codecLabel(id, name), c, t)}
}

// copier makes copies of values of T that share no memory with the
// originals, through the codec c: a copy is the value a snapshot of the
// original would restore. The heap backend copies, on the task goroutine,
// a value it hands the function while an encoder reads the original (see
// valueState). A copier is for one goroutine.
type copier[T any] struct {
	c   stateCodec[T]
	buf []byte
	// For gob: an encoder and a decoder over one stream, so that the
	// type is described once, not with every value.
	stream *bytes.Buffer
	enc    *gob.Encoder
	dec    *gob.Decoder
}

func (cp *copier[T]) copy(v T) (T, error) {
	if cp.c.s != nil || cp.c.ext != nil {
		b, err := appendOne(cp.buf[:0], cp.c, v)
		if err != nil {
			return v, err
		}
		cp.buf = b
		return readOne(b, cp.c)
	}
	var zero T
	if reflect.ValueOf(&v).Elem().IsZero() {
		// A nil pointer, slice or map, which gob does not send; the zero
		// value shares nothing.
		return zero, nil
	}
	if cp.enc == nil {
		cp.stream = &bytes.Buffer{}
		cp.enc, cp.dec = gob.NewEncoder(cp.stream), gob.NewDecoder(cp.stream)
	}
	if err := cp.enc.Encode(&v); err != nil {
		cp.enc = nil // the stream may hold part of a value
		return v, err
	}
	out := zero
	if err := cp.dec.Decode(&out); err != nil {
		cp.enc = nil
		return v, err
	}
	if cp.stream.Len() == 0 {
		cp.stream.Reset() // keep the buffer from growing
	}
	return out, nil
}
