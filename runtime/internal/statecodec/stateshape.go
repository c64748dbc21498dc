package statecodec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State schema evolution. encoding/gob and encoding/json match a struct's
// fields by name and decode a value whose field is gone, or was renamed,
// without an error: the field's data is dropped, and a restored state
// reads it as its zero value (a job whose state struct renamed Total to
// Sum restored "fine" and emitted sums of 0). So every checkpoint records
// the shape of each state's types in those encodings (stateformat's
// Shape: fields by name, recursively), and a restore compares it with
// the types the state is declared with now: a removed, renamed or
// retyped field fails the restore naming it, an added field restores as
// its zero value, and a removed field the state's descriptor lists in
// AllowDroppedFields is let go (runtime's claimShape, with CheckShape).
// The heap backend writes the shape as an entry beside the state's data
// in every key group (KindShape), the pebble backend in its blob's table
// of states (pebblestate.StateID.Shape).
// Checkpoints written before shapes were recorded restore unchecked.

// shapeRules compute the shape of t as an encoding sees it: fields names
// the fields of a struct as the encoding writes them, self says whether a
// type encodes itself.
type shapeRules struct {
	encoding string
	self     func(reflect.Type) bool
	fields   func(t reflect.Type) []reflect.StructField
}

var (
	gobShapes = shapeRules{encoding: "gob",
		self: func(t reflect.Type) bool { return selfEncoding(t) == "ok" },
		fields: func(t reflect.Type) []reflect.StructField {
			// gob writes exported fields by their names; an embedded
			// struct is a field named after its type, not flattened.
			var out []reflect.StructField
			for i := range t.NumField() {
				if f := t.Field(i); f.IsExported() {
					out = append(out, f)
				}
			}
			return out
		}}
	jsonShapes = shapeRules{encoding: "json",
		self:   func(t reflect.Type) bool { return jsonSelfEncoding(t) == "ok" },
		fields: jsonFields}
)

// jsonFields are t's fields as encoding/json names them: by their tags,
// the fields of an untagged embedded struct promoted, a name already
// taken by a shallower field left out.
func jsonFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	taken := map[string]bool{}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct && jsonSelfEncoding(et) == "" {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name != "" {
			f.Name = name
		}
		taken[f.Name] = true
		out = append(out, f)
	}
	for _, et := range embedded {
		for _, f := range jsonFields(et) {
			if !taken[f.Name] {
				taken[f.Name] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// shapeOf is t's shape by the rules r.
func (r shapeRules) shapeOf(t reflect.Type) *stateformat.Shape {
	return r.walk(t, nil)
}

// walk computes t's shape; structs are the structs t is inside of, the
// nearest last, which a recursive type refers back to.
func (r shapeRules) walk(t reflect.Type, structs []structAt) *stateformat.Shape {
	if r.self(t) {
		return &stateformat.Shape{Kind: stateformat.ShapeSelf, Name: t.String()}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return r.walk(t.Elem(), structs)
	case reflect.Bool:
		return &stateformat.Shape{Kind: stateformat.ShapeBool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &stateformat.Shape{Kind: stateformat.ShapeInt}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &stateformat.Shape{Kind: stateformat.ShapeUint}
	case reflect.Float32, reflect.Float64:
		return &stateformat.Shape{Kind: stateformat.ShapeFloat}
	case reflect.Complex64, reflect.Complex128:
		return &stateformat.Shape{Kind: stateformat.ShapeComplex}
	case reflect.String:
		return &stateformat.Shape{Kind: stateformat.ShapeString}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !r.self(t.Elem()) {
			return &stateformat.Shape{Kind: stateformat.ShapeBytes}
		}
		return &stateformat.Shape{Kind: stateformat.ShapeSlice, Elem: r.walk(t.Elem(), structs)}
	case reflect.Array:
		return &stateformat.Shape{Kind: stateformat.ShapeArray, Len: t.Len(), Elem: r.walk(t.Elem(), structs)}
	case reflect.Map:
		return &stateformat.Shape{Kind: stateformat.ShapeMap, Key: r.walk(t.Key(), structs), Elem: r.walk(t.Elem(), structs)}
	case reflect.Struct:
		for i := len(structs) - 1; i >= 0; i-- {
			if structs[i].t == t {
				return &stateformat.Shape{Kind: stateformat.ShapeRef, Up: len(structs) - i, Target: structs[i].s}
			}
		}
		s := &stateformat.Shape{Kind: stateformat.ShapeStruct, Name: t.Name()}
		if s.Name != "" {
			s.Name = t.String()
		}
		structs = append(structs, structAt{t, s})
		for _, f := range r.fields(t) {
			s.Fields = append(s.Fields, stateformat.Field{Name: f.Name, Shape: r.walk(f.Type, structs)})
		}
		return s
	}
	// Interfaces, and the func and chan kinds that the declaration's
	// type check refuses before a shape is needed.
	return &stateformat.Shape{Kind: stateformat.ShapeAny}
}

type structAt struct {
	t reflect.Type
	s *stateformat.Shape
}

// WrappingSerde is a serde of the engine's own around a codec of the
// job's type (a TTL value, a list, a window record): the shape is that
// codec's.
type WrappingSerde interface {
	WrappedShape() (encoding string, s *stateformat.Shape)
}

// ShapeOf is the shape of T in codec c and the encoding, or nil when c
// does not match fields by name (the binary serdes, a job's own Serde).
func ShapeOf[T any](c Codec[T]) (string, *stateformat.Shape) {
	if w, ok := c.Ext.(WrappingSerde); ok {
		return w.WrappedShape()
	}
	switch {
	case c.Boxed != nil:
		return gobShapes.encoding, gobShapes.shapeOf(c.Boxed.elem())
	case c.ID == IDGob && c.Bin == nil && c.Ext == nil:
		return gobShapes.encoding, gobShapes.shapeOf(reflect.TypeFor[T]())
	case c.ID == IDJSON:
		return jsonShapes.encoding, jsonShapes.shapeOf(reflect.TypeFor[T]())
	}
	return "", nil
}

// DeclaredShape is a state's shape as declared now: the record to write
// in its checkpoints (nil when no role is recorded).
type DeclaredShape struct {
	Roles stateformat.StateShape
	Text  []byte
}

// ShapeRole adds role, in codec c, to the shape.
func ShapeRole[T any](d *DeclaredShape, role string, c Codec[T]) {
	enc, s := ShapeOf(c)
	if s == nil {
		return
	}
	d.Roles = append(d.Roles, stateformat.RoleShape{Role: role, Encoding: enc, Shape: s})
	d.Text = d.Roles.Encode()
}

// CheckShape compares the shapes recorded for state name (one per old
// subtask the state comes from, most alike) with the shape declared now,
// and refuses what a restore would lose: a removed or renamed field not
// in dropped, or a changed type, with a *StateSchemaError.
func CheckShape(name string, recorded [][]byte, now DeclaredShape, dropped []string) error {
	done := map[string]bool{}
	for _, rec := range recorded {
		if done[string(rec)] {
			continue
		}
		done[string(rec)] = true
		was, err := stateformat.ParseStateShape(rec)
		if err != nil {
			return fmt.Errorf("state %q: the checkpoint's record of its types: %w", name, err)
		}
		for _, r := range was {
			cur := now.Roles.Role(r.Role, r.Encoding)
			if cur == nil {
				continue // another encoding now: the codec check says so
			}
			for _, m := range stateformat.Compare(r.Shape, cur) {
				if m.Removed && slices.Contains(dropped, m.Path) {
					continue
				}
				return &StateSchemaError{State: name, Role: r.Role, Type: cur.Describe(), Encoding: r.Encoding, Mismatch: m}
			}
		}
	}
	return nil
}

// StateSchemaError is state.SchemaError, whose documentation a
// job reads: a restore refused because a state's type lost or changed a
// field. The two have the same fields, so that runtime/state converts
// one to the other, and its Error is this one.
type StateSchemaError struct {
	State          string
	Role           string
	Type, Encoding string
	Mismatch       stateformat.Mismatch
}

func (e *StateSchemaError) Error() string {
	m := e.Mismatch
	var what string
	switch {
	case m.Removed:
		what = fmt.Sprintf("the checkpoint's %s has field %s (%s), which %s lacks: encoding/%s would drop its data without an error. Keep the field, migrate the state (docs/datastream.md, \"State schema evolution\"), or let its data go by declaring the state with AllowDroppedFields(%q)",
			e.Role, m.Path, m.Was, e.Type, e.Encoding, m.Path)
	case m.Path == "":
		what = fmt.Sprintf("the checkpoint's %s is a %s and is now %s. Keep the type, or migrate the state (docs/datastream.md, \"State schema evolution\")",
			e.Role, m.Was, m.Now)
	default:
		what = fmt.Sprintf("field %s of the checkpoint's %s is a %s and is now a %s in %s. Keep its type, or migrate the state (docs/datastream.md, \"State schema evolution\")",
			m.Path, e.Role, m.Was, m.Now, e.Type)
	}
	return fmt.Sprintf("restore state %q: %s", e.State, what)
}
