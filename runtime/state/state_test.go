package state

import (
	"reflect"
	"strings"
	"testing"
)

// unexportedField has a field gob and JSON leave out.
type unexportedField struct {
	Name  string
	count int
}

// point is a struct gob keeps whole.
type point struct{ X, Y int }

// reading is a struct gob and JSON both keep whole.
type reading struct {
	Sensor string         `json:"sensor"`
	Values []float64      `json:"values"`
	Tags   map[string]int `json:"tags,omitempty"`
}

// unnamedSerde is a serde without a name, which a checkpoint could not
// record.
type unnamedSerde struct{}

func (unnamedSerde) Name() string                               { return "" }
func (unnamedSerde) Append(dst []byte, p point) ([]byte, error) { return dst, nil }
func (unnamedSerde) Decode([]byte) (point, error)               { return point{}, nil }

// A descriptor whose type cannot be checkpointed panics when it is made,
// with a *TypeError naming the state, the role and the field; so do
// a serde of another type and a serde without a name.
func TestDescriptorBadTypePanicsAtDeclaration(t *testing.T) {
	panicOf := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	for _, c := range []struct {
		name       string
		make       func()
		role, elem string
	}{
		{"gob value", func() { NewValueState[unexportedField]("bad") }, "value type", "count"},
		{"gob map value", func() { NewMapState[string, []unexportedField]("bad") }, "map value type", "count"},
		{"json value", func() {
			NewValueState[unexportedField]("bad", WithSerde(JSONSerde[unexportedField]()))
		}, "value type", "count"},
		{"json interface", func() {
			NewValueState[struct{ V any }]("bad", WithSerde(JSONSerde[struct{ V any }]()))
		}, "value type", "interface"},
		{"json dropped field", func() {
			type tagged struct {
				A int `json:"-"`
			}
			NewValueState[tagged]("bad", WithSerde(JSONSerde[tagged]()))
		}, "value type", `json:"-"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := panicOf(c.make)
			err, ok := v.(*TypeError)
			if !ok {
				t.Fatalf("panic %v (%T); want a *TypeError", v, v)
			}
			if err.State != "bad" || err.Role != c.role || !strings.Contains(err.Error(), c.elem) {
				t.Fatalf("panic %v; want state \"bad\", role %s, naming %s", err, c.role, c.elem)
			}
		})
	}
	for name, f := range map[string]func(){
		"serde of another type": func() { NewValueState[int64]("x", WithSerde(DefaultSerde[string]())) },
		"unnamed serde":         func() { NewValueState[point]("x", WithSerde[point](unnamedSerde{})) },
		"no name":               func() { NewValueState[int64]("") },
		"map key serde":         func() { NewValueState[int64]("x", WithMapKeySerde(DefaultSerde[int64]())) },
	} {
		if v := panicOf(f); v == nil {
			t.Errorf("%s: no panic", name)
		}
	}
	// The JSON fallback takes what gob and JSON both keep whole.
	if v := panicOf(func() { NewValueState[reading]("ok", WithSerde(JSONSerde[reading]())) }); v != nil {
		t.Fatalf("JSONSerde of reading: %v", v)
	}
}

// The built-in serdes round-trip their values, and name the encodings a
// checkpoint records.
func TestBuiltinSerdes(t *testing.T) {
	check := func(name string, b []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	b, err := DefaultSerde[int64]().Append(nil, -3)
	check("int64", b, err)
	if v, err := DefaultSerde[int64]().Decode(b); err != nil || v != -3 {
		t.Fatalf("DefaultSerde[int64]: %d, %v", v, err)
	}
	b, err = DefaultSerde[string]().Append(nil, "héllo")
	check("string", b, err)
	if v, err := DefaultSerde[string]().Decode(b); err != nil || v != "héllo" {
		t.Fatalf("DefaultSerde[string]: %q, %v", v, err)
	}
	if _, err := DefaultSerde[string]().Decode(append(b, 0)); err == nil {
		t.Fatal("DefaultSerde[string] decoded trailing bytes")
	}
	type word string
	b, err = DefaultSerde[word]().Append(nil, "w")
	check("word", b, err)
	if v, err := DefaultSerde[word]().Decode(b); err != nil || v != "w" {
		t.Fatalf("DefaultSerde[word]: %q, %v", v, err)
	}
	g := GobSerde[reading]()
	r := reading{Sensor: "a", Values: []float64{1}}
	b, err = g.Append(nil, r)
	check("gob", b, err)
	if v, err := g.Decode(b); err != nil || !reflect.DeepEqual(v, r) {
		t.Fatalf("GobSerde: %+v, %v", v, err)
	}
	for s, want := range map[interface{ Name() string }]string{
		DefaultSerde[int64](): "signed integer", DefaultSerde[string](): "string", DefaultSerde[bool](): "bool", GobSerde[point](): "encoding/gob", JSONSerde[point](): "encoding/json",
	} {
		if s.Name() != want {
			t.Errorf("%T named %q, want %q", s, s.Name(), want)
		}
	}
}

// ParseBackend reads the backends' names as flags give them, and refuses
// a pebble setting given with the heap backend and an unknown name.
func TestParseBackendRefusesPebbleSettingsForHeap(t *testing.T) {
	for _, c := range []struct {
		name, dir string
		opts      []PebbleOption
		want      string // the backend, or "" for an error
		wantDir   string
		wantCache int64
	}{
		{name: "heap", want: "heap"},
		{name: "pebble", want: "pebble", wantCache: 64 << 20},
		{name: "pebble", dir: "/var/lib/job", opts: []PebbleOption{PebbleBlockCacheSize(8 << 20)}, want: "pebble", wantDir: "/var/lib/job", wantCache: 8 << 20},
		{name: "heap", dir: "/var/lib/job"},
		{name: "heap", opts: []PebbleOption{PebbleBlockCacheSize(8 << 20)}},
		{name: "rocksdb"},
		{name: ""},
	} {
		b, err := ParseBackend(c.name, c.dir, c.opts...)
		if c.want == "" {
			if err == nil {
				t.Errorf("ParseBackend(%q, %q, %d options) = %v; want an error", c.name, c.dir, len(c.opts), b)
			}
			continue
		}
		if err != nil || b.String() != c.want || b.Dir() != c.wantDir || b.BlockCacheSize() != c.wantCache {
			t.Errorf("ParseBackend(%q, %q, %d options) = %v (dir %q, cache %d), %v; want %s (dir %q, cache %d)",
				c.name, c.dir, len(c.opts), b, b.Dir(), b.BlockCacheSize(), err, c.want, c.wantDir, c.wantCache)
		}
	}
	if (Backend{}).String() != "heap" {
		t.Errorf("the zero Backend is %v, want heap", Backend{})
	}
}
