package statecodec

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
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
// A snapshot writes values a column at a time (runtime's keyedstate.go,
// through Column): the codec
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
	IDGob     byte = 0
	IDString  byte = 1
	IDBytes   byte = 2
	IDInt     byte = 3
	IDUint    byte = 4
	IDFloat32 byte = 5
	IDFloat64 byte = 6
	IDBool    byte = 7
	// IDJSON is JSONSerde; IDUser a Serde of the job's own, whose
	// name follows the id in a column's header and in a pebble
	// checkpoint's table of states.
	IDJSON byte = 8
	IDUser byte = 9
)

func codecName(id byte) string {
	switch id {
	case IDGob:
		return "encoding/gob"
	case IDString:
		return "string"
	case IDBytes:
		return "[]byte"
	case IDInt:
		return "signed integer"
	case IDUint:
		return "unsigned integer"
	case IDFloat32:
		return "float32"
	case IDFloat64:
		return "float64"
	case IDBool:
		return "bool"
	case IDJSON:
		return "encoding/json"
	}
	return fmt.Sprintf("codec %d", id)
}

// Binary writes and reads single values of T in a binary form: the
// built-in encodings, self-delimiting so that a column is their
// concatenation. Runtime's key views implement it over another key type's
// (convSerde).
type Binary[T any] interface {
	// AppendValue appends v's encoding to dst.
	AppendValue(dst []byte, v T) []byte
	// ReadValue decodes the value at the start of b and says how many
	// bytes it took.
	ReadValue(b []byte) (T, int, error)
}

// Codec is how one state type is written: a built-in binary serde
// Bin; a Serde Ext (JSONSerde, or the job's own, named Name), each value
// framed by its length in a column; or gob when both are nil.
type Codec[T any] struct {
	ID   byte
	Bin  Binary[T]
	Ext  Serde[T]
	Name string
	// Boxed, for the key view of descriptors over a key type not of a
	// basic kind (viewBoxed, T being any), writes and reads a gob column
	// of the key type itself, so that the view's checkpoints hold the
	// bytes the key type's own column would.
	Boxed BoxedColumn
}

// BoxedColumn is a gob column of one key type, given and taken as a
// []any of its values.
type BoxedColumn interface {
	encodeColumn(vs []any) ([]byte, error)
	decodeColumn(data []byte) ([]any, error)
	// elem is the key type, for the shape a checkpoint records.
	elem() reflect.Type
}

// BoxedGob is the BoxedColumn of key type K.
type BoxedGob[K any] struct{}

func (BoxedGob[K]) encodeColumn(vs []any) ([]byte, error) {
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

func (BoxedGob[K]) decodeColumn(data []byte) ([]any, error) {
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

func (BoxedGob[K]) elem() reflect.Type { return reflect.TypeFor[K]() }

// String names the codec in errors and declarations.
func (c Codec[T]) String() string {
	return Label(c.ID, c.Name)
}

func Label(id byte, name string) string {
	if id == IDUser {
		return fmt.Sprintf("serde %q", name)
	}
	return codecName(id)
}

// Desc is the codec as a pebble checkpoint records it: the id, and the
// name of a Serde of the job's own.
func (c Codec[T]) Desc() string {
	b := []byte{c.ID}
	if c.ID == IDUser {
		b = append(binary.AppendUvarint(b, uint64(len(c.Name))), c.Name...)
	}
	return string(b)
}

// Serde is state.Serde, whose documentation a job reads: the encoding
// of one value of T in checkpoints, built in or the job's own. It has
// state.Serde's methods, so that each converts to the other (runtime
// checks that it compiles), and a serde a job implements needs nothing of
// this package. Methods may be called from any goroutine at once (the
// heap backend encodes snapshots off the task goroutine).
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
	codec() Codec[T]
}

// builtinSerde is one of the engine's encodings as a Serde.
type builtinSerde[T any] struct{ c Codec[T] }

func (b builtinSerde[T]) Name() string                           { return b.c.String() }
func (b builtinSerde[T]) Append(dst []byte, v T) ([]byte, error) { return AppendOne(dst, b.c, v) }
func (b builtinSerde[T]) Decode(data []byte) (T, error)          { return ReadOne(data, b.c) }
func (b builtinSerde[T]) codec() Codec[T]                        { return b.c }

// Default is state.DefaultSerde: the built-in codec For chooses, as a
// Serde.
func Default[T any]() Serde[T] { return builtinSerde[T]{For[T]()} }

// Gob is state.GobSerde: encoding/gob, whatever T is.
func Gob[T any]() Serde[T] { return builtinSerde[T]{Codec[T]{ID: IDGob}} }

// JSON is state.JSONSerde: encoding/json, with T checked by
// checkJSONType when a state is declared with it.
func JSON[T any]() Serde[T] { return jsonSerde[T]{} }

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

func (j jsonSerde[T]) codec() Codec[T] { return Codec[T]{ID: IDJSON, Ext: j} }

// codecOf is the codec of serde s.
func codecOf[T any](s Serde[T]) Codec[T] {
	if b, ok := s.(codecSerde[T]); ok {
		return b.codec()
	}
	return Codec[T]{ID: IDUser, Ext: s, Name: s.Name()}
}

// Choose is the codec of a descriptor's role (value type, map key
// type...) from the serde given by option opt (nil for the default),
// with the type checked for that codec. It panics on a mistake in the
// descriptor (a serde of another type, or without a name, or with a
// schema for map keys) and returns the refusal of a type the codec would
// not bring back whole, named for state name and role, which runtime
// panics with as its *StateTypeError.
func Choose[T any](name, role string, given any, opt string) (Codec[T], *StateTypeError) {
	c := For[T]()
	if given != nil {
		s, ok := given.(Serde[T])
		if !ok || s == nil {
			panic(fmt.Sprintf("state %q: %s is given a %T, not a Serde[%s]", name, opt, given, reflect.TypeFor[T]()))
		}
		if _, evolves := s.(SchemaSerde[T]); evolves && role == "map key type" {
			panic(fmt.Sprintf("state %q: the map key serde %q is a SchemaSerde: map keys are found by their bytes, which a schema change would change; give the map keys a serde without a schema", name, s.Name()))
		}
		c = codecOf(s)
	}
	var err *StateTypeError
	switch {
	case c.ID == IDUser && c.Name == "":
		panic(fmt.Sprintf("state %q: the %s's serde %T has an empty Name; a checkpoint records the name", name, role, given))
	case c.ID == IDGob:
		err = CheckGob(reflect.TypeFor[T]())
	case c.ID == IDJSON:
		err = checkJSONType(reflect.TypeFor[T]())
	}
	if err != nil {
		err.State, err.Role, err.Type = name, role, reflect.TypeFor[T]().String()
		return c, err
	}
	return c, nil
}

// AppendOne appends v in codec c.
func AppendOne[T any](dst []byte, c Codec[T], v T) ([]byte, error) {
	if c.Bin != nil {
		return c.Bin.AppendValue(dst, v), nil
	}
	if c.Ext != nil {
		return c.Ext.Append(dst, v)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&v); err != nil {
		return nil, err
	}
	return append(dst, buf.Bytes()...), nil
}

// ReadOne decodes b, all of it, in codec c.
func ReadOne[T any](b []byte, c Codec[T]) (T, error) {
	if c.Ext != nil {
		return c.Ext.Decode(b)
	}
	var v T
	if c.Bin != nil {
		v, n, err := c.Bin.ReadValue(b)
		if err != nil {
			return v, err
		}
		if n != len(b) {
			return v, fmt.Errorf("%d bytes after the value", len(b)-n)
		}
		return v, nil
	}
	err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v)
	return v, err
}

// For chooses T's codec.
func For[T any]() Codec[T] {
	t := reflect.TypeFor[T]()
	if selfEncoding(t) != "" {
		return Codec[T]{ID: IDGob}
	}
	id, s := kindCodec(t)
	if s == nil {
		return Codec[T]{ID: IDGob}
	}
	if same, ok := s.(Binary[T]); ok {
		return Codec[T]{ID: id, Bin: same}
	}
	return Codec[T]{ID: id, Bin: kindSerde[T]{t.Kind()}}
}

// kindCodec is the built-in codec of t's kind (a serde of the kind's own
// type), or a nil serde for a kind without one.
func kindCodec(t reflect.Type) (byte, any) {
	switch t.Kind() {
	case reflect.String:
		return IDString, stringSerde{}
	case reflect.Slice:
		if t.Elem() == reflect.TypeFor[byte]() {
			return IDBytes, bytesSerde{}
		}
	case reflect.Bool:
		return IDBool, boolSerde{}
	case reflect.Int:
		return IDInt, intSerde[int]{}
	case reflect.Int8:
		return IDInt, intSerde[int8]{}
	case reflect.Int16:
		return IDInt, intSerde[int16]{}
	case reflect.Int32:
		return IDInt, intSerde[int32]{}
	case reflect.Int64:
		return IDInt, intSerde[int64]{}
	case reflect.Uint:
		return IDUint, uintSerde[uint]{}
	case reflect.Uint8:
		return IDUint, uintSerde[uint8]{}
	case reflect.Uint16:
		return IDUint, uintSerde[uint16]{}
	case reflect.Uint32:
		return IDUint, uintSerde[uint32]{}
	case reflect.Uint64:
		return IDUint, uintSerde[uint64]{}
	case reflect.Float32:
		return IDFloat32, float32Serde{}
	case reflect.Float64:
		return IDFloat64, float64Serde{}
	}
	return 0, nil
}

// kindSerde is the built-in serde of a named type over a basic kind: the
// kind's own serde, on T's memory seen as the kind's type (which shares
// its layout by definition of reflect.Kind). One serde type switching on
// the kind, not one per kind, keeps the compiled code at one serde per T.
type kindSerde[T any] struct{ kind reflect.Kind }

func (k kindSerde[T]) AppendValue(dst []byte, v T) []byte {
	p := unsafe.Pointer(&v)
	switch k.kind {
	case reflect.String:
		return stringSerde{}.AppendValue(dst, *(*string)(p))
	case reflect.Slice:
		return bytesSerde{}.AppendValue(dst, *(*[]byte)(p))
	case reflect.Bool:
		return boolSerde{}.AppendValue(dst, *(*bool)(p))
	case reflect.Int:
		return intSerde[int]{}.AppendValue(dst, *(*int)(p))
	case reflect.Int8:
		return intSerde[int8]{}.AppendValue(dst, *(*int8)(p))
	case reflect.Int16:
		return intSerde[int16]{}.AppendValue(dst, *(*int16)(p))
	case reflect.Int32:
		return intSerde[int32]{}.AppendValue(dst, *(*int32)(p))
	case reflect.Int64:
		return intSerde[int64]{}.AppendValue(dst, *(*int64)(p))
	case reflect.Uint:
		return uintSerde[uint]{}.AppendValue(dst, *(*uint)(p))
	case reflect.Uint8:
		return uintSerde[uint8]{}.AppendValue(dst, *(*uint8)(p))
	case reflect.Uint16:
		return uintSerde[uint16]{}.AppendValue(dst, *(*uint16)(p))
	case reflect.Uint32:
		return uintSerde[uint32]{}.AppendValue(dst, *(*uint32)(p))
	case reflect.Uint64:
		return uintSerde[uint64]{}.AppendValue(dst, *(*uint64)(p))
	case reflect.Float32:
		return float32Serde{}.AppendValue(dst, *(*float32)(p))
	case reflect.Float64:
		return float64Serde{}.AppendValue(dst, *(*float64)(p))
	}
	panic(fmt.Sprintf("kindSerde of kind %v", k.kind))
}

func (k kindSerde[T]) ReadValue(b []byte) (T, int, error) {
	var v T
	var n int
	var err error
	p := unsafe.Pointer(&v)
	switch k.kind {
	case reflect.String:
		*(*string)(p), n, err = stringSerde{}.ReadValue(b)
	case reflect.Slice:
		*(*[]byte)(p), n, err = bytesSerde{}.ReadValue(b)
	case reflect.Bool:
		*(*bool)(p), n, err = boolSerde{}.ReadValue(b)
	case reflect.Int:
		*(*int)(p), n, err = intSerde[int]{}.ReadValue(b)
	case reflect.Int8:
		*(*int8)(p), n, err = intSerde[int8]{}.ReadValue(b)
	case reflect.Int16:
		*(*int16)(p), n, err = intSerde[int16]{}.ReadValue(b)
	case reflect.Int32:
		*(*int32)(p), n, err = intSerde[int32]{}.ReadValue(b)
	case reflect.Int64:
		*(*int64)(p), n, err = intSerde[int64]{}.ReadValue(b)
	case reflect.Uint:
		*(*uint)(p), n, err = uintSerde[uint]{}.ReadValue(b)
	case reflect.Uint8:
		*(*uint8)(p), n, err = uintSerde[uint8]{}.ReadValue(b)
	case reflect.Uint16:
		*(*uint16)(p), n, err = uintSerde[uint16]{}.ReadValue(b)
	case reflect.Uint32:
		*(*uint32)(p), n, err = uintSerde[uint32]{}.ReadValue(b)
	case reflect.Uint64:
		*(*uint64)(p), n, err = uintSerde[uint64]{}.ReadValue(b)
	case reflect.Float32:
		*(*float32)(p), n, err = float32Serde{}.ReadValue(b)
	case reflect.Float64:
		*(*float64)(p), n, err = float64Serde{}.ReadValue(b)
	default:
		panic(fmt.Sprintf("kindSerde of kind %v", k.kind))
	}
	return v, n, err
}

type stringSerde struct{}

func (stringSerde) AppendValue(dst []byte, v string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(v))), v...)
}

func (stringSerde) ReadValue(b []byte) (string, int, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return "", 0, engine.ErrShortState
	}
	return string(b[n : n+int(l)]), n + int(l), nil
}

type bytesSerde struct{}

func (bytesSerde) AppendValue(dst []byte, v []byte) []byte {
	if v == nil {
		return append(dst, 0)
	}
	return append(binary.AppendUvarint(dst, uint64(len(v))+1), v...)
}

func (bytesSerde) ReadValue(b []byte) ([]byte, int, error) {
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

func (boolSerde) AppendValue(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (boolSerde) ReadValue(b []byte) (bool, int, error) {
	if len(b) < 1 || b[0] > 1 {
		return false, 0, engine.ErrShortState
	}
	return b[0] == 1, 1, nil
}

type intSerde[T int | int8 | int16 | int32 | int64] struct{}

func (intSerde[T]) AppendValue(dst []byte, v T) []byte { return binary.AppendVarint(dst, int64(v)) }

func (intSerde[T]) ReadValue(b []byte) (T, int, error) {
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

func (uintSerde[T]) AppendValue(dst []byte, v T) []byte { return binary.AppendUvarint(dst, uint64(v)) }

func (uintSerde[T]) ReadValue(b []byte) (T, int, error) {
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

func (float32Serde) AppendValue(dst []byte, v float32) []byte {
	return binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
}

func (float32Serde) ReadValue(b []byte) (float32, int, error) {
	if len(b) < 4 {
		return 0, 0, engine.ErrShortState
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b)), 4, nil
}

type float64Serde struct{}

func (float64Serde) AppendValue(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func (float64Serde) ReadValue(b []byte) (float64, int, error) {
	if len(b) < 8 {
		return 0, 0, engine.ErrShortState
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), 8, nil
}

// Column collects one column of a snapshot entry: Add each value, then
// AppendTo.
type Column[T any] struct {
	Codec Codec[T]
	// N is how many values were added.
	N   int
	buf []byte // binary codecs and Serdes
	vs  []T    // gob
	// one is a Serde's encoding of one value; err its first failure,
	// returned by AppendTo.
	one []byte
	err error
}

func (w *Column[T]) Add(v T) {
	w.N++
	switch {
	case w.Codec.Bin != nil:
		w.buf = w.Codec.Bin.AppendValue(w.buf, v)
	case w.Codec.Ext != nil:
		b, err := w.Codec.Ext.Append(w.one[:0], v)
		if err != nil {
			if w.err == nil {
				w.err = fmt.Errorf("%s: %w", w.Codec, err)
			}
			return
		}
		w.one = b
		w.buf = append(binary.AppendUvarint(w.buf, uint64(len(b))), b...)
	default:
		w.vs = append(w.vs, v)
	}
}

// Size is what AppendTo appends, for a binary codec or a Serde.
func (w *Column[T]) Size() int {
	return 1 + 2*binary.MaxVarintLen64 + len(w.Codec.Name) + len(w.buf)
}

// AppendTo appends the column, framed, to dst: the codec id (with a
// Serde's name), uvarint(length), the data.
func (w *Column[T]) AppendTo(dst []byte) ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	dst = append(dst, w.Codec.ID)
	if w.Codec.ID == IDUser {
		dst = append(binary.AppendUvarint(dst, uint64(len(w.Codec.Name))), w.Codec.Name...)
	}
	data := w.buf
	if w.Codec.Boxed != nil && len(w.vs) > 0 {
		b, err := w.Codec.Boxed.encodeColumn(any(w.vs).([]any))
		if err != nil {
			return nil, err
		}
		data = b
	} else if w.Codec.Bin == nil && w.Codec.Ext == nil && len(w.vs) > 0 {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(w.vs); err != nil {
			return nil, err
		}
		data = buf.Bytes()
	}
	dst = binary.AppendUvarint(dst, uint64(len(data)))
	return append(dst, data...), nil
}

// ReadColumn reads a column of n values of T written by AppendTo and
// returns the rest of b.
func ReadColumn[T any](b []byte, n int, c Codec[T]) ([]T, []byte, error) {
	if len(b) < 1 {
		return nil, nil, engine.ErrShortState
	}
	id, name := b[0], ""
	b = b[1:]
	if id == IDUser {
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
	if (c.Bin != nil || c.Ext != nil) && n > len(data) {
		return nil, nil, fmt.Errorf("%w: a column of %d values holds %d bytes", engine.ErrShortState, n, len(data))
	}
	if c.Ext != nil {
		vs := make([]T, n)
		for i := range vs {
			l, k := binary.Uvarint(data)
			if k <= 0 || uint64(len(data)-k) < l {
				return nil, nil, engine.ErrShortState
			}
			v, err := c.Ext.Decode(data[k : k+int(l)])
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
	if c.Boxed != nil {
		vs, err := c.Boxed.decodeColumn(data)
		if err != nil {
			return nil, nil, err
		}
		if len(vs) != n {
			return nil, nil, fmt.Errorf("column holds %d values, want %d", len(vs), n)
		}
		return any(vs).([]T), rest, nil
	}
	if c.Bin == nil {
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
		v, m, err := c.Bin.ReadValue(data)
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
func sameCodec[T any](id byte, name string, c Codec[T], t reflect.Type) error {
	if id == c.ID && name == c.Name {
		return nil
	}
	if id <= IDBool && c.ID <= IDBool {
		return fmt.Errorf("it was checkpointed as %s and its type %s is now encoded as %s; keep the type, or rename the state", codecName(id), t, codecName(c.ID))
	}
	if hint := TTLChanged(isTTLCodec(id, name), isTTLCodec(c.ID, c.Name)); hint != "" {
		return &engine.UnrecoverableError{Err: fmt.Errorf("it was checkpointed with %s and the state now has %s%s", Label(id, name), c, hint)}
	}
	return &engine.UnrecoverableError{Err: fmt.Errorf("it was checkpointed with %s and the state now has %s (type %s); restore it with the serde that wrote it, or rename the state", Label(id, name), c, t)}
}

// TTLSerdePrefix starts the name of every TTL state's serde (runtime's
// ttlSerde), by which a codec mismatch that is a TTL turned on or off is
// told apart.
const TTLSerdePrefix = "splitflow/ttl("

// isTTLCodec reports that a codec (id and Serde name) is a TTL state's.
func isTTLCodec(id byte, name string) bool {
	return id == IDUser && strings.HasPrefix(name, TTLSerdePrefix)
}

// TTLChanged explains a codec mismatch that is TTL turned on or off.
func TTLChanged(wasTTL, nowTTL bool) string {
	switch {
	case wasTTL && !nowTTL:
		return "; it was checkpointed with a TTL and is now declared without one (TTL values are stored with their timestamps): keep WithTTL, or rename the state"
	case !wasTTL && nowTTL:
		return "; it was checkpointed without a TTL and is now declared WithTTL (TTL values are stored with their timestamps): declare it without WithTTL, or rename the state"
	}
	return ""
}

// Copier makes copies of values of T that share no memory with the
// originals, through the codec c: a copy is the value a snapshot of the
// original would restore. The heap backend copies, on the task goroutine,
// a value it hands the function while an encoder reads the original (see
// runtime's valueState). A Copier is for one goroutine.
type Copier[T any] struct {
	Codec Codec[T]
	buf   []byte
	// For gob: an encoder and a decoder over one stream, so that the
	// type is described once, not with every value.
	stream *bytes.Buffer
	enc    *gob.Encoder
	dec    *gob.Decoder
}

func (cp *Copier[T]) Copy(v T) (T, error) {
	if cp.Codec.Bin != nil || cp.Codec.Ext != nil {
		b, err := AppendOne(cp.buf[:0], cp.Codec, v)
		if err != nil {
			return v, err
		}
		cp.buf = b
		return ReadOne(b, cp.Codec)
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
