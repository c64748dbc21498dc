package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/splitflow/splitflow/connector/kafka"
)

// Payment is written and read with paymentSchema.
type Payment struct {
	ID       int64   `json:"id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency,omitempty"`
}

const (
	paymentSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"splitflow.test.Payment","type":"object",
		"properties":{"id":{"type":"number"},"amount":{"type":"number","minimum":0},"currency":{"type":"string","pattern":"^[A-Z]{3}$"}},
		"required":["id","amount"]}`
	// paymentV2Schema changes id's type: no reader of v1 can read it.
	paymentV2Schema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"splitflow.test.Payment","type":"object",
		"properties":{"id":{"type":"string"},"amount":{"type":"number","minimum":0},"currency":{"type":"string","pattern":"^[A-Z]{3}$"}},
		"required":["id","amount"]}`
)

// Rule: the JSON Schema serializer registers its schema as schemaType
// JSON, writes the wire format with plain JSON after the header, and the
// deserializer validates each value against the writer's schema and
// reads it into a struct or a generic map.
func TestJSONSchemaRoundTrip(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	w, err := NewJSONSchemaSerializer[Payment](ctx, c, "payments", paymentSchema, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.schemaByVersion(ctx, "payments-value", -1)
	if err != nil || got.Type.String() != "JSON" || got.ID != w.ID() {
		t.Fatalf("registered %+v, %v; want a JSON schema of id %d", got, err, w.ID())
	}
	p := Payment{ID: 9, Amount: 12.5, Currency: "EUR"}
	b, err := w.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || string(b[5:]) != `{"id":9,"amount":12.5,"currency":"EUR"}` {
		t.Fatalf("wire bytes % x", b)
	}
	back, err := NewJSONSchemaDeserializer[Payment](c).Decode(b)
	if err != nil || back != p {
		t.Fatalf("read %+v, %v; want %+v", back, err, p)
	}
	m, err := NewJSONSchemaDeserializer[map[string]any](c).Decode(b)
	if err != nil || m["currency"] != "EUR" {
		t.Fatalf("generic: %v, %v", m, err)
	}
	r, err := NewJSONSchemaSerializer[Payment](ctx, c, "payments", paymentSchema, WithAutoRegister(), WithSubjectNameStrategy(RecordName))
	if err != nil || r.Subject() != "splitflow.test.Payment" {
		t.Fatalf("record strategy: %v, %v; want the schema's title", r, err)
	}
	if _, err := NewJSONSchemaSerializer[Payment](ctx, c, "payments", `{"type":"object","properties":{"a":{"$ref":"file:///etc/hosts"}}}`, WithAutoRegister()); err == nil || !strings.Contains(err.Error(), "outside the schema") {
		t.Fatalf("a schema with an outside $ref: %v; want it refused without reading the file", err)
	}
}

// Rule: a value the schema does not validate is not written: Encode
// fails with the *jsonschema.ValidationError, which says where.
func TestJSONSchemaSerializerRefusesInvalidValues(t *testing.T) {
	_, c := fakeRegistry(t)
	w, err := NewJSONSchemaSerializer[Payment](context.Background(), c, "payments", paymentSchema, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Payment{{ID: 1, Amount: -1}, {ID: 1, Amount: 1, Currency: "euro"}} {
		_, err := w.Encode(p)
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "is not written") {
			t.Errorf("Encode(%+v) = %v; want a validation error", p, err)
		}
	}
}

// Rule: a JSON Schema record the deserializer cannot read is an error
// that is not ErrUnavailable (so the source's bad-record policy applies):
// a wrong magic byte, an unknown id, bytes that are not JSON, a value the
// schema does not validate, one that does not read into T, an Avro
// schema's id; and the policies fail, skip and count, or dead-letter it.
func TestJSONSchemaUndecodableRecordsAreBadRecords(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	w, err := NewJSONSchemaSerializer[Payment](ctx, c, "payments", paymentSchema, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAvroSerializer[OrderV1](ctx, c, "avro", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := a.Encode(OrderV1{ID: 1})
	hdr := func(body string) []byte { return append([]byte{0, 0, 0, 0, byte(w.ID())}, body...) }
	bad := map[string][]byte{
		"first byte 0x01":              append([]byte{1}, hdr(`{"id":1,"amount":1}`)[1:]...),
		"schema id 12345":              append([]byte{0, 0, 0, 0x30, 0x39}, `{"id":1,"amount":1}`...),
		"not one JSON value":           hdr(`{"id":1,"amount":1} {}`),
		"does not validate":            hdr(`{"id":1,"amount":-5}`),
		"does not read into":           hdr(`{"id":1.5,"amount":5}`),
		"not a JSON schema":            ab,
		"an empty value is not in the": {},
	}
	d := NewJSONSchemaDeserializer[Payment](c)
	for want, b := range bad {
		_, err := d.Decode(b)
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, kafka.ErrDeserializerUnavailable) {
			t.Errorf("%v; want a bad-record error saying %q", err, want)
		}
	}
	good := make([][]byte, 20)
	for i := range good {
		good[i], _ = w.Encode(Payment{ID: int64(i), Amount: float64(i)})
	}
	checkBadRecordPolicies(t, d.Values(), good, bad)
}
