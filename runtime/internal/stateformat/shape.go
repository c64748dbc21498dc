package stateformat

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// State shapes: what a checkpoint records of the types of a state whose
// encoding matches struct fields by name (encoding/gob, encoding/json).
// Such an encoding decodes a value whose field was renamed or removed
// without an error, the field's data dropped; so a restore compares the
// recorded shape with the state's type now and refuses what would be
// lost (runtime/internal/statecodec/stateshape.go).
//
// A shape is structural: the names of struct types are recorded for
// messages only, pointers are not recorded (both encodings follow them),
// and integers, unsigned integers and floats are one kind each whatever
// their width (a value that does not fit fails the decode loudly). Its
// text, one line per encoded role of the state (StateShape):
//
//	shape := "bool" | "int" | "uint" | "float" | "complex" | "string" | "bytes"
//	       | "any"                    an interface
//	       | "self" name              a type that encodes itself
//	       | "[]" shape | "[" n "]" shape | "map[" shape "]" shape
//	       | "struct" [name] "{" [field {"; " field}] "}"
//	       | "^" n                    the n-th enclosing struct (1: the nearest), of a recursive type
//	field := fieldname " " shape
//
// A name is Go-quoted; a field name is written bare when it is a Go
// identifier and quoted otherwise (a JSON tag may hold any text).

// KindShape is a keyed snapshot entry (layout version 5 on) holding the
// StateShape of the state it names, written beside the state's entry in
// every key group the state has data in, so that the shape goes wherever
// the data goes when key groups are redistributed. Never renumber (see
// the other kinds in stateformat.go).
const KindShape byte = 7

// Shape kinds.
const (
	ShapeBool    = "bool"
	ShapeInt     = "int"
	ShapeUint    = "uint"
	ShapeFloat   = "float"
	ShapeComplex = "complex"
	ShapeString  = "string"
	ShapeBytes   = "bytes"
	ShapeAny     = "any"
	ShapeSelf    = "self"
	ShapeSlice   = "slice"
	ShapeArray   = "array"
	ShapeMap     = "map"
	ShapeStruct  = "struct"
	// ShapeRef is a recursive type's way back to an enclosing struct.
	ShapeRef = "ref"
)

// Shape is the shape of one type.
type Shape struct {
	Kind string
	// Name is the Go type's name, for messages: a struct's (empty for an
	// anonymous one) and a self-encoding type's.
	Name string
	// Len is an array's length.
	Len int
	// Key is a map's key; Elem a slice's, an array's or a map's element.
	Key, Elem *Shape
	// Fields are a struct's, in declaration order.
	Fields []Field
	// Up is a ref's distance to its struct (1: the nearest enclosing
	// one); Target is that struct.
	Up     int
	Target *Shape
}

// Field is a struct field as its encoding names it.
type Field struct {
	Name  string
	Shape *Shape
}

// String writes the shape's text.
func (s *Shape) String() string {
	var b strings.Builder
	s.write(&b)
	return b.String()
}

func (s *Shape) write(b *strings.Builder) {
	switch s.Kind {
	case ShapeSelf:
		b.WriteString("self " + strconv.Quote(s.Name))
	case ShapeSlice:
		b.WriteString("[]")
		s.Elem.write(b)
	case ShapeArray:
		fmt.Fprintf(b, "[%d]", s.Len)
		s.Elem.write(b)
	case ShapeMap:
		b.WriteString("map[")
		s.Key.write(b)
		b.WriteString("]")
		s.Elem.write(b)
	case ShapeStruct:
		b.WriteString("struct")
		if s.Name != "" {
			b.WriteString(" " + strconv.Quote(s.Name))
		}
		b.WriteString("{")
		for i, f := range s.Fields {
			if i > 0 {
				b.WriteString("; ")
			}
			if isIdent(f.Name) {
				b.WriteString(f.Name)
			} else {
				b.WriteString(strconv.Quote(f.Name))
			}
			b.WriteString(" ")
			f.Shape.write(b)
		}
		b.WriteString("}")
	case ShapeRef:
		fmt.Fprintf(b, "^%d", s.Up)
	default:
		b.WriteString(s.Kind)
	}
}

// Describe names the shape briefly, for messages: a struct or a
// self-encoding type by its Go name.
func (s *Shape) Describe() string {
	s = s.resolved()
	switch s.Kind {
	case ShapeStruct:
		if s.Name != "" {
			return s.Name
		}
		return "struct"
	case ShapeSelf:
		return s.Name
	case ShapeSlice:
		return "[]" + s.Elem.Describe()
	case ShapeArray:
		return fmt.Sprintf("[%d]%s", s.Len, s.Elem.Describe())
	case ShapeMap:
		return "map[" + s.Key.Describe() + "]" + s.Elem.Describe()
	case ShapeBytes:
		return "[]byte"
	case ShapeInt:
		return "integer"
	case ShapeUint:
		return "unsigned integer"
	case ShapeAny:
		return "interface"
	}
	return s.Kind
}

func (s *Shape) resolved() *Shape {
	if s.Kind == ShapeRef && s.Target != nil {
		return s.Target
	}
	return s
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// errShape is wrapped by every parse error.
var errShape = errors.New("state shape does not parse")

// ParseShape reads a shape's text.
func ParseShape(text string) (*Shape, error) {
	p := &shapeParser{s: text}
	s := p.shape()
	if p.err == nil && p.s != "" {
		p.fail("text after the shape")
	}
	if p.err != nil {
		return nil, p.err
	}
	return s, nil
}

type shapeParser struct {
	s     string
	err   error
	stack []*Shape // enclosing structs
	depth int
}

func (p *shapeParser) fail(what string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: %s at %q", errShape, what, p.s[:min(len(p.s), 20)])
	}
}

func (p *shapeParser) eat(prefix string) bool {
	if p.err == nil && strings.HasPrefix(p.s, prefix) {
		p.s = p.s[len(prefix):]
		return true
	}
	return false
}

func (p *shapeParser) quoted() string {
	q, err := strconv.QuotedPrefix(p.s)
	if err != nil {
		p.fail("a bad quoted name")
		return ""
	}
	p.s = p.s[len(q):]
	v, _ := strconv.Unquote(q)
	return v
}

func (p *shapeParser) number() int {
	i := 0
	for i < len(p.s) && p.s[i] >= '0' && p.s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(p.s[:i])
	if err != nil || n < 0 {
		p.fail("a bad number")
		return 0
	}
	p.s = p.s[i:]
	return n
}

// maxShapeDepth bounds the nesting a parse follows (a checkpoint is
// untrusted input).
const maxShapeDepth = 200

func (p *shapeParser) shape() *Shape {
	if p.err != nil {
		return nil
	}
	if p.depth++; p.depth > maxShapeDepth {
		p.fail("nesting too deep")
		return nil
	}
	defer func() { p.depth-- }()
	switch {
	case p.eat("self "):
		return &Shape{Kind: ShapeSelf, Name: p.quoted()}
	case p.eat("[]"):
		return &Shape{Kind: ShapeSlice, Elem: p.shape()}
	case p.eat("["):
		n := p.number()
		if !p.eat("]") {
			p.fail("an array without ]")
			return nil
		}
		return &Shape{Kind: ShapeArray, Len: n, Elem: p.shape()}
	case p.eat("map["):
		s := &Shape{Kind: ShapeMap, Key: p.shape()}
		if !p.eat("]") {
			p.fail("a map without ]")
			return nil
		}
		s.Elem = p.shape()
		return s
	case p.eat("struct"):
		s := &Shape{Kind: ShapeStruct}
		if p.eat(" ") {
			s.Name = p.quoted()
		}
		if !p.eat("{") {
			p.fail("a struct without {")
			return nil
		}
		p.stack = append(p.stack, s)
		defer func() { p.stack = p.stack[:len(p.stack)-1] }()
		for p.err == nil && !p.eat("}") {
			if len(s.Fields) > 0 && !p.eat("; ") {
				p.fail("fields without ;")
				return nil
			}
			var name string
			if strings.HasPrefix(p.s, `"`) {
				name = p.quoted()
			} else {
				i := strings.IndexByte(p.s, ' ')
				if i <= 0 || !isIdent(p.s[:i]) {
					p.fail("a bad field name")
					return nil
				}
				name, p.s = p.s[:i], p.s[i:]
			}
			if !p.eat(" ") {
				p.fail("a field without a type")
				return nil
			}
			s.Fields = append(s.Fields, Field{Name: name, Shape: p.shape()})
		}
		return s
	case p.eat("^"):
		n := p.number()
		if n < 1 || n > len(p.stack) {
			p.fail("a reference to no enclosing struct")
			return nil
		}
		return &Shape{Kind: ShapeRef, Up: n, Target: p.stack[len(p.stack)-n]}
	}
	for _, k := range []string{ShapeBool, ShapeInt, ShapeUint, ShapeFloat, ShapeComplex, ShapeString, ShapeBytes, ShapeAny} {
		if p.eat(k) {
			return &Shape{Kind: k}
		}
	}
	p.fail("an unknown kind")
	return nil
}

// Mismatch is a difference between a recorded shape and the one a type
// has now that a decode would not survive whole.
type Mismatch struct {
	// Path is where, as runtime/internal/statecodec/statetype.go writes
	// field paths:
	// "Total", "Items[].Total", "ByName[key]"; empty for the type
	// itself.
	Path string
	// Removed: the field at Path is gone (it was Was); otherwise the type
	// at Path changed from Was to Now.
	Removed  bool
	Was, Now string
}

// Compare lists what of a value of shape was would not come back whole
// as a value of shape now: a field removed (a renamed one is removed and
// added) or a type changed. A field now has that was lacks is no
// mismatch: it decodes as its zero value.
func Compare(was, now *Shape) []Mismatch {
	var out []Mismatch
	compare(was, now, "", map[[2]*Shape]bool{}, &out)
	return out
}

func compare(was, now *Shape, path string, seen map[[2]*Shape]bool, out *[]Mismatch) {
	was, now = was.resolved(), now.resolved()
	if was.Kind != now.Kind || was.Kind == ShapeArray && was.Len != now.Len {
		*out = append(*out, Mismatch{Path: path, Was: was.Describe(), Now: now.Describe()})
		return
	}
	switch was.Kind {
	case ShapeSlice, ShapeArray:
		compare(was.Elem, now.Elem, path+"[]", seen, out)
	case ShapeMap:
		compare(was.Key, now.Key, path+"[key]", seen, out)
		compare(was.Elem, now.Elem, path+"[]", seen, out)
	case ShapeStruct:
		pair := [2]*Shape{was, now}
		if seen[pair] {
			return // a recursive type, compared on the way in
		}
		seen[pair] = true
		for _, f := range was.Fields {
			at := f.Name
			if path != "" {
				at = path + "." + f.Name
			}
			i := slices.IndexFunc(now.Fields, func(g Field) bool { return g.Name == f.Name })
			if i < 0 {
				*out = append(*out, Mismatch{Path: at, Removed: true, Was: f.Shape.Describe()})
				continue
			}
			compare(f.Shape, now.Fields[i].Shape, at, seen, out)
		}
	}
}

// StateShape is what a checkpoint records of one state: the shape of each
// of its roles ("value type", "map key type", ...) whose encoding matches
// fields by name, with that encoding, and the writer schemas of each role
// encoded by a schema serde (state.SchemaSerde: Encoding SchemaEncoding,
// Schema the text, one line per schema its values may carry). Roles in
// other encodings are not recorded: the codec recorded with the data
// guards them.
type StateShape []RoleShape

// SchemaEncoding is the encoding of a record's schema lines.
const SchemaEncoding = "schema"

// RoleShape is one role's shape, or one of its writer schemas.
type RoleShape struct {
	Role, Encoding string
	Shape          *Shape
	// Schema is a writer schema's text when Encoding is SchemaEncoding
	// (Shape is nil then).
	Schema string
}

// Encode writes the record: a line "role (encoding): shape" a role, and
// "role (schema): quoted text" a writer schema.
func (s StateShape) Encode() []byte {
	var b []byte
	for _, r := range s {
		if r.Encoding == SchemaEncoding {
			b = fmt.Appendf(b, "%s (%s): %s\n", r.Role, r.Encoding, strconv.Quote(r.Schema))
			continue
		}
		b = fmt.Appendf(b, "%s (%s): %s\n", r.Role, r.Encoding, r.Shape)
	}
	return b
}

// ParseStateShape reads a record written by Encode.
func ParseStateShape(b []byte) (StateShape, error) {
	var out StateShape
	for line := range strings.Lines(string(b)) {
		line, ok := strings.CutSuffix(line, "\n")
		head, text, found := strings.Cut(line, "): ")
		role, enc, found2 := strings.Cut(head, " (")
		if !ok || !found || !found2 {
			return nil, fmt.Errorf("%w: line %q", errShape, line)
		}
		if enc == SchemaEncoding {
			schema, err := strconv.Unquote(text)
			if err != nil {
				return nil, fmt.Errorf("%s: %w: a schema that is not a quoted string", role, errShape)
			}
			out = append(out, RoleShape{Role: role, Encoding: enc, Schema: schema})
			continue
		}
		sh, err := ParseShape(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		out = append(out, RoleShape{Role: role, Encoding: enc, Shape: sh})
	}
	return out, nil
}

// Role returns the role's shape in encoding, nil if the record has none.
func (s StateShape) Role(role, encoding string) *Shape {
	for _, r := range s {
		if r.Role == role && r.Encoding == encoding {
			return r.Shape
		}
	}
	return nil
}

// Schemas returns the writer schemas the record holds for role.
func (s StateShape) Schemas(role string) []string {
	var out []string
	for _, r := range s {
		if r.Role == role && r.Encoding == SchemaEncoding {
			out = append(out, r.Schema)
		}
	}
	return out
}

// UnionSchemas is record a with the schema lines of record b that a
// lacks. Pebble merges the tables of states of the old subtasks a
// restore takes key groups from into one DB, whose values keep the
// schemas they were written with: its record must name all of them. A
// record that does not parse is left as it is (the restore's check
// reports it).
func UnionSchemas(a, b string) string {
	if a == "" || a == b {
		return cmp.Or(a, b)
	}
	ra, err := ParseStateShape([]byte(a))
	if err != nil {
		return a
	}
	rb, err := ParseStateShape([]byte(b))
	if err != nil {
		return a
	}
	for _, r := range rb {
		if r.Encoding == SchemaEncoding && !slices.ContainsFunc(ra, func(x RoleShape) bool {
			return x.Encoding == SchemaEncoding && x.Role == r.Role && x.Schema == r.Schema
		}) {
			ra = append(ra, r)
		}
	}
	return string(ra.Encode())
}
