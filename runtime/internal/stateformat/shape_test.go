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
