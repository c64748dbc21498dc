package stateformat

import (
	"reflect"
	"testing"
)

// A shape's text reads back as the same shape, recursive references
// included, and Compare names a removed field, a retyped one, and not an
// added one.
func TestShapeTextRoundTripsAndCompareNamesLostFields(t *testing.T) {
	was := `struct "main.Node"{Word string; Total int; Kids []^1; Tags map[string]struct{"a b" bool}}`
	s, err := ParseShape(was)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != was {
		t.Fatalf("text %q read back as %q", was, got)
	}
	if s.Fields[2].Shape.Elem.Target != s {
		t.Fatalf("^1 does not refer to the enclosing struct")
	}
	now, err := ParseShape(`struct "main.Node"{Word string; Sum int; Kids []^1; Tags map[string]struct{"a b" string}; Extra float}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mismatch{
		{Path: "Total", Removed: true, Was: "integer"},
		{Path: "Tags[].a b", Was: "bool", Now: "string"},
	}
	if got := Compare(s, now); !reflect.DeepEqual(got, want) {
		t.Fatalf("Compare = %+v, want %+v", got, want)
	}
	if got := Compare(s, s); len(got) != 0 {
		t.Fatalf("a shape compared with itself: %+v", got)
	}
	for _, bad := range []string{"", "struct{", "^1", "[]", "map[int]", "struct{A int}x", "widget"} {
		if _, err := ParseShape(bad); err == nil {
			t.Errorf("ParseShape(%q) accepted it", bad)
		}
	}
}

// Rule: a record's writer schemas read back as written, whatever their
// text holds (quotes, new lines), beside the shapes of other roles; the
// union of two records keeps the first's lines and adds the second's
// schemas it lacks, once.
func TestSchemaLinesRoundTripAndUnion(t *testing.T) {
	v1 := "{\"type\":\"record\",\"name\":\"P\",\"fields\":[]}"
	v2 := "{\"type\": \"record\",\n \"name\": \"P\", \"doc\": \"): \\\"x\\\"\", \"fields\": []}"
	a := StateShape{
		{Role: "key type", Encoding: "gob", Shape: &Shape{Kind: ShapeString}},
		{Role: "value type", Encoding: SchemaEncoding, Schema: v1},
	}
	got, err := ParseStateShape(a.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Schemas("value type"); len(s) != 1 || s[0] != v1 || got.Role("key type", "gob") == nil {
		t.Fatalf("parsed %+v", got)
	}
	b := StateShape{{Role: "value type", Encoding: SchemaEncoding, Schema: v2}, {Role: "value type", Encoding: SchemaEncoding, Schema: v1}}
	u, err := ParseStateShape([]byte(UnionSchemas(string(a.Encode()), string(b.Encode()))))
	if err != nil {
		t.Fatal(err)
	}
	if s := u.Schemas("value type"); len(s) != 2 || s[0] != v1 || s[1] != v2 || u.Role("key type", "gob") == nil {
		t.Fatalf("union %+v", u)
	}
	if got := UnionSchemas("", string(b.Encode())); got != string(b.Encode()) {
		t.Fatalf("union with an empty record = %q", got)
	}
}
