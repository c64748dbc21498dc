package avrostate

import (
	"errors"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/state"
)

// Three versions of one state type, and two that Avro cannot read the
// first as.
type (
	profileV1 struct {
		Name  string `avro:"name"`
		Count int64  `avro:"count"`
	}
	// profileV2 adds a field with a default.
	profileV2 struct {
		Name  string `avro:"name"`
		Count int64  `avro:"count"`
		Tier  string `avro:"tier"`
	}
	// profileRenamed renames count to hits, with count as an alias.
	profileRenamed struct {
		Name string `avro:"name"`
		Hits int64  `avro:"hits"`
	}
	// profileNoDefault adds a field without a default.
	profileNoDefault struct {
		Name   string `avro:"name"`
		Count  int64  `avro:"count"`
		Region string `avro:"region"`
	}
	// profileRetyped makes count a string, which Avro does not promote a
	// long to.
	profileRetyped struct {
		Name  string `avro:"name"`
		Count string `avro:"count"`
	}
)

const (
	schemaV1 = `{"type": "record", "name": "Profile", "namespace": "test",
	  "fields": [{"name": "name", "type": "string"}, {"name": "count", "type": "long"}]}`
	schemaV2 = `{"type": "record", "name": "Profile", "namespace": "test",
	  "fields": [{"name": "name", "type": "string"}, {"name": "count", "type": "long"},
	             {"name": "tier", "type": "string", "default": "legacy"}]}`
	schemaRenamed = `{"type": "record", "name": "Profile", "namespace": "test",
	  "fields": [{"name": "name", "type": "string"}, {"name": "hits", "type": "long", "aliases": ["count"]}]}`
	schemaNoDefault = `{"type": "record", "name": "Profile", "namespace": "test",
	  "fields": [{"name": "name", "type": "string"}, {"name": "count", "type": "long"},
	             {"name": "region", "type": "string"}]}`
	schemaRetyped = `{"type": "record", "name": "Profile", "namespace": "test",
	  "fields": [{"name": "name", "type": "string"}, {"name": "count", "type": "string"}]}`
)

// Rule: Decode gives back what Append wrote, appended after what dst
// held; Schema is the schema's text without its white space.
func TestSerdeRoundTripsAValueAfterWhatDstHeld(t *testing.T) {
	s := Must[profileV1](schemaV1)
	want := profileV1{Name: "k07", Count: 1 << 40}
	b, err := s.Append([]byte("head"), want)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "head" {
		t.Fatalf("Append overwrote dst: %q", b[:4])
	}
	got, err := s.Decode(b[4:])
	if err != nil || got != want {
		t.Fatalf("Decode = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.Decode(append(b[4:], 0)); err == nil {
		t.Fatal("Decode of a value with a byte after it succeeded")
	}
	if strings.ContainsAny(s.Schema(), " \n\t") || !strings.Contains(s.Schema(), `"name":"Profile"`) {
		t.Fatalf("Schema() = %s, want the text compacted", s.Schema())
	}
}

// Rule (Avro resolution): a value written under v1 reads under v2 with
// the new field's default, and under a schema that renamed count to hits
// with count among its aliases, with its count as hits.
func TestResolveReadsAnOldValueWithDefaultsAndAliases(t *testing.T) {
	b, err := Must[profileV1](schemaV1).Append(nil, profileV1{Name: "k01", Count: 41})
	if err != nil {
		t.Fatal(err)
	}
	v2 := Must[profileV2](schemaV2)
	dec, err := v2.Resolve(Must[profileV1](schemaV1).Schema())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dec(b); err != nil || got != (profileV2{Name: "k01", Count: 41, Tier: "legacy"}) {
		t.Fatalf("v1 read as v2 = %+v, %v", got, err)
	}
	renamed := Must[profileRenamed](schemaRenamed)
	dec2, err := renamed.Resolve(Must[profileV1](schemaV1).Schema())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dec2(b); err != nil || got != (profileRenamed{Name: "k01", Hits: 41}) {
		t.Fatalf("v1 read as renamed = %+v, %v", got, err)
	}
}

// Rule: Resolve refuses what Avro cannot read, naming every field that
// blocks it and the differences it could resolve, and says what to do.
func TestResolveRefusalNamesTheFieldsAndWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name, reader string
		resolve      func(string) error
		blocking     string
	}{
		{"field without default", schemaNoDefault, func(w string) error { _, err := Must[profileNoDefault](schemaNoDefault).Resolve(w); return err },
			`field "region" (string), which is new and has no default`},
		{"long to string", schemaRetyped, func(w string) error { _, err := Must[profileRetyped](schemaRetyped).Resolve(w); return err },
			`field "count" was long and is now string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.resolve(Must[profileV1](schemaV1).Schema())
			var ie *IncompatibleError
			if !errors.As(err, &ie) || len(ie.Blocking) != 1 || ie.Blocking[0] != tc.blocking {
				t.Fatalf("Resolve = %v, want an *IncompatibleError blocked by %s", err, tc.blocking)
			}
			if !strings.Contains(err.Error(), "Give every new field a default") || !strings.Contains(err.Error(), "new name") {
				t.Fatalf("the refusal does not say what to do: %v", err)
			}
		})
	}
}

// Rule: a map key's serde may not be a SchemaSerde (pebble finds map keys
// by their bytes); the descriptor panics naming the state.
func TestMapKeySchemaSerdeRefusedAtDeclaration(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `state "by-profile"`) {
			t.Fatalf("recover() = %v, want a panic naming the state", r)
		}
	}()
	state.NewMapState[profileV1, int64]("by-profile", state.WithMapKeySerde[profileV1](Must[profileV1](schemaV1)))
}

// BenchmarkSerde compares Append and Decode of a small record with
// DefaultSerde's (gob, for a struct) and JSONSerde's; ratios only.
func BenchmarkSerde(b *testing.B) {
	v := profileV2{Name: "customer-000042", Count: 123456, Tier: "gold"}
	for _, s := range []struct {
		name  string
		serde state.Serde[profileV2]
	}{
		{"avrostate", Must[profileV2](schemaV2)},
		{"default-gob", state.DefaultSerde[profileV2]()},
		{"json", state.JSONSerde[profileV2]()},
	} {
		b.Run(s.name+"/append", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = s.serde.Append(buf[:0], v); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(buf)), "bytes/value")
		})
		b.Run(s.name+"/decode", func(b *testing.B) {
			enc, err := s.serde.Append(nil, v)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.serde.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
