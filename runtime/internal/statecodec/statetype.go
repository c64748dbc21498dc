package statecodec

import (
	"bytes"
	"encoding"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"reflect"
)

// Keyed state whose types have no built-in encoding is checkpointed with
// encoding/gob (serde.go). gob refuses some types only when it first
// encodes one, which is at the first snapshot, and it silently drops what
// it cannot see: unexported fields,
// and fields of func and chan type. A state whose type loses a field that
// way restores with that field at its zero value, with no error anywhere.
// So the types of a state are checked when the state is declared, and a
// type that would not come back whole fails the job there.

// StateTypeError is state.TypeError, whose documentation a job
// reads: why a state's type cannot be declared. The two have the same
// fields, so that runtime converts one to the other, and runtime's Error
// is this one.
type StateTypeError struct {
	State  string
	Role   string
	Type   string
	Field  string
	Reason string
}

func (e *StateTypeError) Error() string {
	at := ""
	if e.Field != "" {
		at = "field " + e.Field + ": "
	}
	return fmt.Sprintf("state %q: its %s %s cannot be checkpointed: %s%s", e.State, e.Role, e.Type, at, e.Reason)
}

var (
	gobEncoderType     = reflect.TypeFor[gob.GobEncoder]()
	gobDecoderType     = reflect.TypeFor[gob.GobDecoder]()
	binaryMarshaler    = reflect.TypeFor[encoding.BinaryMarshaler]()
	binaryUnmarshaler  = reflect.TypeFor[encoding.BinaryUnmarshaler]()
	selfEncodingAdvice = "encoding.BinaryMarshaler and BinaryUnmarshaler, or gob.GobEncoder and GobDecoder"
)

// CheckGob returns why values of t would not survive a gob round trip
// whole, or nil. State, Role and Type are left for the caller.
func CheckGob(t reflect.Type) *StateTypeError {
	if err := walkGobType(t, "", map[reflect.Type]bool{}); err != nil {
		return err
	}
	// What the walk cannot know, gob tells when it compiles the type: it
	// does so for a zero value too, whose fields it then skips.
	sample := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: t}})).Elem()
	if err := gob.NewEncoder(&bytes.Buffer{}).EncodeValue(sample); err != nil {
		return &StateTypeError{Reason: fmt.Sprintf("encoding/gob refuses it: %v", err)}
	}
	return nil
}

func walkGobType(t reflect.Type, path string, seen map[reflect.Type]bool) *StateTypeError {
	if r := selfEncoding(t); r != "" {
		if r == "ok" {
			return nil
		}
		return &StateTypeError{Field: path, Reason: r}
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return &StateTypeError{Field: path, Reason: fmt.Sprintf("encoding/gob cannot encode a %s (%s); keep it out of state", t.Kind(), t)}
	case reflect.Pointer:
		return walkGobType(t.Elem(), path, seen)
	case reflect.Slice, reflect.Array:
		return walkGobType(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if err := walkGobType(t.Key(), path+"[key]", seen); err != nil {
			return err
		}
		return walkGobType(t.Elem(), path+"[]", seen)
	case reflect.Struct:
		if seen[t] {
			return nil // a recursive type, checked on the way in
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			at := f.Name
			if path != "" {
				at = path + "." + f.Name
			}
			if !f.IsExported() {
				return &StateTypeError{Field: at, Reason: fmt.Sprintf("%s.%s is unexported, and encoding/gob silently drops unexported fields: a restore would bring it back as its zero value; export it, or implement %s on %s", t, f.Name, selfEncodingAdvice, t)}
			}
			if k := f.Type.Kind(); k == reflect.Func || k == reflect.Chan {
				return &StateTypeError{Field: at, Reason: fmt.Sprintf("%s.%s is a %s, which encoding/gob silently drops; keep it out of state, or implement %s on %s", t, f.Name, k, selfEncodingAdvice, t)}
			}
			if err := walkGobType(f.Type, at, seen); err != nil {
				return err
			}
		}
	}
	// Basic kinds, and interfaces: gob encodes an interface value's
	// concrete type when it was registered with gob.Register, and says so
	// at the snapshot otherwise.
	return nil
}

// selfEncoding is "ok" when t encodes itself through gob's or
// encoding's marshaling interfaces and can be decoded again, a reason when
// it does only one half, and "" when it does neither.
func selfEncoding(t reflect.Type) string {
	return encodesItself(t, [2]reflect.Type{gobEncoderType, gobDecoderType}, [2]reflect.Type{binaryMarshaler, binaryUnmarshaler})
}

// encodesItself is "ok" when t (or *t) implements both halves of one of
// the (encoder, decoder) pairs, a reason when it implements only the
// encoder of the first pair it has, and "" when it has none.
func encodesItself(t reflect.Type, pairs ...[2]reflect.Type) string {
	p := reflect.PointerTo(t)
	for _, pair := range pairs {
		enc, dec := pair[0], pair[1]
		if !t.Implements(enc) && !p.Implements(enc) {
			continue
		}
		if t.Implements(dec) || p.Implements(dec) {
			return "ok"
		}
		return fmt.Sprintf("%s implements %s but not %s, so a restore could not decode it", t, enc, dec)
	}
	return ""
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkJSONType returns why values of t would not survive an
// encoding/json round trip whole, or nil: JSON, like gob, drops what it
// cannot see (unexported fields, fields tagged "-"), and decodes an
// interface as maps and float64s, not as the value that was written.
func checkJSONType(t reflect.Type) *StateTypeError {
	return walkJSONType(t, "", map[reflect.Type]bool{})
}

func walkJSONType(t reflect.Type, path string, seen map[reflect.Type]bool) *StateTypeError {
	if r := jsonSelfEncoding(t); r != "" {
		if r == "ok" {
			return nil
		}
		return &StateTypeError{Field: path, Reason: r}
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return &StateTypeError{Field: path, Reason: fmt.Sprintf("encoding/json cannot encode a %s (%s); keep it out of state", t.Kind(), t)}
	case reflect.Interface:
		return &StateTypeError{Field: path, Reason: fmt.Sprintf("encoding/json decodes an interface (%s) as maps, slices and float64s, not as the value written; use a concrete type", t)}
	case reflect.Pointer:
		return walkJSONType(t.Elem(), path, seen)
	case reflect.Slice, reflect.Array:
		return walkJSONType(t.Elem(), path+"[]", seen)
	case reflect.Map:
		k := t.Key()
		switch k.Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			if !(k.Implements(textMarshaler) || reflect.PointerTo(k).Implements(textMarshaler)) || !reflect.PointerTo(k).Implements(textUnmarshaler) {
				return &StateTypeError{Field: path + "[key]", Reason: fmt.Sprintf("encoding/json writes map keys as strings: a key of type %s must be a string, an integer or implement encoding.TextMarshaler and TextUnmarshaler", k)}
			}
		}
		return walkJSONType(t.Elem(), path+"[]", seen)
	case reflect.Struct:
		if seen[t] {
			return nil
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			at := f.Name
			if path != "" {
				at = path + "." + f.Name
			}
			if !f.IsExported() && !f.Anonymous {
				return &StateTypeError{Field: at, Reason: fmt.Sprintf("%s.%s is unexported, and encoding/json silently drops unexported fields: a restore would bring it back as its zero value; export it, or implement json.Marshaler and json.Unmarshaler on %s", t, f.Name, t)}
			}
			if f.Tag.Get("json") == "-" {
				return &StateTypeError{Field: at, Reason: fmt.Sprintf(`%s.%s is tagged json:"-", so encoding/json drops it: a restore would bring it back as its zero value`, t, f.Name)}
			}
			if err := walkJSONType(f.Type, at, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonSelfEncoding is "ok" when t encodes itself for encoding/json (as
// JSON or as text) both ways, a reason when it does only one half, and ""
// when it does neither.
func jsonSelfEncoding(t reflect.Type) string {
	return encodesItself(t, [2]reflect.Type{jsonMarshaler, jsonUnmarshaler}, [2]reflect.Type{textMarshaler, textUnmarshaler})
}
