package registry

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// maxStrictJSONProblems bounds the problems one error lists.
const maxStrictJSONProblems = 10

// StrictJSONDeserializer reads plain JSON values (no registry, no wire
// format header) into T with encoding/json, strictly, so that a producer
// that renamed or dropped a field gives bad records rather than values
// with silent zeros:
//
//   - a member of a JSON object that names no field of its struct is an
//     error; names match exactly, not case-insensitively as encoding/json
//     lets them;
//   - a struct field is required unless its json tag says omitempty or
//     omitzero (the writer's own encoding/json would leave it out): a
//     required field missing is an error, null counts as present;
//   - a number that overflows its field's type (300 into an int8, -1 into
//     a uint, 1e40 into a float32) or has a fraction for an integer field
//     is an error, as is every other type mismatch;
//   - data after the value, a JSON null as the whole value, and a
//     tombstone are errors.
//
// Fields of embedded structs are the struct's own, as encoding/json has
// them. Values of types that decode themselves (json.Unmarshaler,
// encoding.TextUnmarshaler: time.Time), interface values and map keys are
// taken as encoding/json takes them. Each error is a bad record for the
// source's policy. It is safe for concurrent use.
type StrictJSONDeserializer[T any] struct {
	shape    *jsonShape
	typeName string
}

// NewStrictJSONDeserializer returns a strict deserializer into T, whose
// fields it reads once, now.
func NewStrictJSONDeserializer[T any]() *StrictJSONDeserializer[T] {
	t := reflect.TypeFor[T]()
	return &StrictJSONDeserializer[T]{shape: shapeOf(t, map[reflect.Type]*jsonShape{}), typeName: t.String()}
}

// Decode reads one JSON value.
func (d *StrictJSONDeserializer[T]) Decode(b []byte) (T, error) {
	var v T
	if b == nil {
		return v, errors.New("registry: strict JSON: a null value (a tombstone) holds no JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return v, fmt.Errorf("registry: strict JSON: the bytes are not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, errors.New("registry: strict JSON: data after the JSON value")
	}
	if tree == nil {
		return v, fmt.Errorf("registry: strict JSON: a JSON null holds no %s", d.typeName)
	}
	var problems []string
	d.shape.check(tree, "$", &problems)
	if len(problems) > 0 {
		more := ""
		if len(problems) > maxStrictJSONProblems {
			more = fmt.Sprintf("; and %d more", len(problems)-maxStrictJSONProblems)
			problems = problems[:maxStrictJSONProblems]
		}
		return v, fmt.Errorf("registry: strict JSON: the value does not fit %s: %s%s", d.typeName, strings.Join(problems, "; "), more)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("registry: strict JSON: the value does not read into %s: %w", d.typeName, err)
	}
	return v, nil
}

// Values returns the deserializer of kafka.NewSource that reads each
// record's value.
func (d *StrictJSONDeserializer[T]) Values() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Value) })
}

// Keys returns the deserializer of kafka.NewSource that reads each
// record's key.
func (d *StrictJSONDeserializer[T]) Keys() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Key) })
}

// jsonShape is what the strict deserializer checks of a JSON value
// before encoding/json reads it into a Go type: the members of objects
// read into structs, through lists and maps.
type jsonShape struct {
	kind shapeKind
	// object: the struct's fields by JSON name, in declaration order.
	fields map[string]jsonField
	names  []string
	// list, dict: the elements' shape.
	elem *jsonShape
}

type shapeKind int

const (
	leafShape   shapeKind = iota // checked by encoding/json alone
	objectShape                  // a struct
	listShape                    // a slice or an array
	dictShape                    // a map
)

type jsonField struct {
	required bool
	shape    *jsonShape
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf returns t's shape; seen holds the shapes of types met, so a
// recursive type's shape refers to itself.
func shapeOf(t reflect.Type, seen map[reflect.Type]*jsonShape) *jsonShape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem() // a pointer's JSON is its element's, or null
	}
	if s, ok := seen[t]; ok {
		return s
	}
	s := &jsonShape{}
	seen[t] = s
	if t.Kind() != reflect.Interface && (t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		return s
	}
	switch t.Kind() {
	case reflect.Struct:
		s.kind, s.fields = objectShape, map[string]jsonField{}
		addFields(s, t, seen, map[reflect.Type]bool{})
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return s // []byte is a base64 string
		}
		s.kind, s.elem = listShape, shapeOf(t.Elem(), seen)
	case reflect.Map:
		s.kind, s.elem = dictShape, shapeOf(t.Elem(), seen)
	}
	return s
}

// addFields adds t's fields to s: its own first, then those of the
// structs it embeds without a JSON name, which the shallower ones
// shadow, as encoding/json does.
func addFields(s *jsonShape, t reflect.Type, seen map[reflect.Type]*jsonShape, walked map[reflect.Type]bool) {
	if walked[t] {
		return
	}
	walked[t] = true
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := s.fields[name]; ok {
			continue
		}
		optional := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		s.fields[name] = jsonField{required: !optional, shape: shapeOf(f.Type, seen)}
		s.names = append(s.names, name)
	}
	for _, e := range embedded {
		addFields(s, e, seen, walked)
	}
}

// check appends to problems what in v, at path, does not fit s.
func (s *jsonShape) check(v any, path string, problems *[]string) {
	switch s.kind {
	case objectShape:
		obj, ok := v.(map[string]any)
		if !ok {
			return // null, or a type mismatch encoding/json reports
		}
		members := make([]string, 0, len(obj))
		for k := range obj {
			members = append(members, k)
		}
		slices.Sort(members)
		for _, k := range members {
			f, ok := s.fields[k]
			if !ok {
				*problems = append(*problems, fmt.Sprintf("%s: unknown field (known: %s)", memberPath(path, k), strings.Join(s.names, ", ")))
				continue
			}
			f.shape.check(obj[k], memberPath(path, k), problems)
		}
		for _, name := range s.names {
			if _, ok := obj[name]; !ok && s.fields[name].required {
				*problems = append(*problems, fmt.Sprintf("%s: required field missing (a field without omitempty or omitzero)", memberPath(path, name)))
			}
		}
	case listShape:
		list, _ := v.([]any)
		for i, e := range list {
			s.elem.check(e, path+"["+strconv.Itoa(i)+"]", problems)
		}
	case dictShape:
		obj, _ := v.(map[string]any)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s.elem.check(obj[k], path+"["+strconv.Quote(k)+"]", problems)
		}
	}
}

func memberPath(path, name string) string { return path + "." + name }
