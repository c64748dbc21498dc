package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry/internal/testpb"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Shop's schemas: an Order's amount is a shop.Money, registered under a
// subject of its own, whose currency is a shop.Currency, registered under
// another: two levels of references.
const (
	currencyText = `{"type":"enum","name":"Currency","namespace":"shop","symbols":["EUR","USD"]}`
	moneyText    = `{"type":"record","name":"Money","namespace":"shop","fields":[
		{"name":"units","type":"long"},{"name":"currency","type":"Currency"}]}`
	// shopOrderText uses shop.Money without defining it.
	shopOrderText = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"long"},{"name":"amount","type":"Money"}]}`
	// shopOrderReaderText defines every type inline, as a reader that
	// knows them may; it adds a field with a default.
	shopOrderReaderText = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"long"},
		{"name":"amount","type":{"type":"record","name":"Money","fields":[
			{"name":"units","type":"long"},
			{"name":"currency","type":{"type":"enum","name":"Currency","symbols":["EUR","USD"]}}]}},
		{"name":"note","type":"string","default":"none"}]}`
)

type Money struct {
	Units    int64  `avro:"units"`
	Currency string `avro:"currency"`
}

type ShopOrder struct {
	ID     int64 `avro:"id"`
	Amount Money `avro:"amount"`
}

type ShopOrderRead struct {
	ID     int64  `avro:"id"`
	Amount Money  `avro:"amount"`
	Note   string `avro:"note"`
}

// registerShopTypes registers shop.Currency, then shop.Money referencing
// it, each under the subject of its full name.
func registerShopTypes(t *testing.T, reg *srfake.Registry) {
	t.Helper()
	if _, _, err := reg.RegisterSchema("shop.Currency", sr.Schema{Schema: currencyText, Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.RegisterSchema("shop.Money", sr.Schema{Schema: moneyText, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "shop.Currency", Subject: "shop.Currency", Version: 1}}}); err != nil {
		t.Fatal(err)
	}
}

// Rule: a writer schema whose named types live under other subjects (a
// reference, which references another) is read: the deserializer fetches
// the referenced schemas, parses them first, and resolves the writer
// against the reader as ever; a generic reader reads it too. The
// serializer registers its schema with the references WithReferences
// gives, a version -1 fixed to the subject's latest.
func TestAvroWriterSchemaWithReferencesIsRead(t *testing.T) {
	reg, c := fakeRegistry(t)
	registerShopTypes(t, reg)
	ctx := context.Background()
	if _, err := NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText, WithAutoRegister()); err == nil || !strings.Contains(err.Error(), "does not parse as Avro") {
		t.Fatalf("a schema using shop.Money with no references: %v; want a parse error", err)
	}
	w, err := NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText, WithAutoRegister(),
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: -1}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.schemaByVersion(ctx, "orders-value", -1)
	if err != nil || got.ID != w.ID() || len(got.References) != 1 || got.References[0] != (sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: 1}) {
		t.Fatalf("registered %+v, %v; want id %d referencing shop.Money version 1", got, err, w.ID())
	}
	// Looked up, not registered, it finds the same id.
	again, err := NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText,
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: 1}))
	if err != nil || again.ID() != w.ID() {
		t.Fatalf("look-up with references: %v, %v; want id %d", again, err, w.ID())
	}
	b, err := w.Encode(ShopOrder{ID: 3, Amount: Money{Units: 250, Currency: "USD"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewAvroDeserializer[ShopOrderRead](c, parse(t, shopOrderReaderText)).Decode(b)
	if want := (ShopOrderRead{ID: 3, Amount: Money{Units: 250, Currency: "USD"}, Note: "none"}); err != nil || r != want {
		t.Fatalf("reader: %+v, %v; want %+v", r, err, want)
	}
	g, err := NewAvroDeserializer[map[string]any](c, nil).Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := g["amount"].(map[string]any); m["currency"] != "USD" || m["units"] != int64(250) {
		t.Fatalf("generic reader: %v", g)
	}
	if _, err := NewProtobufSerializer[*testpb.Order](ctx, c, "orders", WithReferences(sr.SchemaReference{Name: "x", Subject: "x", Version: 1})); err == nil || !strings.Contains(err.Error(), "WithReferences") {
		t.Fatalf("Protobuf serializer with WithReferences: %v; want it refused", err)
	}
}

// Rule: a writer schema whose reference (here the second level's) the
// registry does not have is a bad record, not ErrUnavailable, with an
// error naming the schema id and the chain of references to the one that
// failed; the source's policies fail, skip or dead-letter it while records
// of other schemas pass. An unreachable registry while fetching a
// reference is ErrUnavailable, which fails the job.
func TestAvroReferenceThatCannotBeFetchedIsABadRecordNamingIt(t *testing.T) {
	reg, c := fakeRegistry(t)
	registerShopTypes(t, reg)
	ctx := context.Background()
	w, err := NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText, WithAutoRegister(),
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: 1}))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewAvroSerializer[OrderV1](ctx, c, "plain", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Encode(ShopOrder{ID: 1, Amount: Money{Units: 1, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	status := http.StatusNotFound
	reg.Intercept(func(rw http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/subjects/shop.Currency/versions/1" {
			return false
		}
		rw.WriteHeader(status)
		rw.Write([]byte(`{"error_code":40402,"message":"Version 1 not found."}`))
		return true
	})
	_, err = NewAvroDeserializer[map[string]any](c, nil).Decode(b)
	for _, want := range []string{"schema id " + strconv.Itoa(w.ID()), "references shop.Money", "which references shop.Currency", "cannot be fetched"} {
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, kafka.ErrDeserializerUnavailable) {
			t.Fatalf("an unfetchable reference: %v; want a bad-record error saying %q", err, want)
		}
	}
	good := make([][]byte, 10)
	for i := range good {
		good[i], _ = plain.Encode(OrderV1{ID: int64(i)})
	}
	checkBadRecordPolicies(t, NewAvroDeserializer[map[string]any](c, nil).Values(), good, map[string][]byte{"shop.Currency": b})

	status = http.StatusServiceUnavailable
	_, err = NewAvroDeserializer[map[string]any](c, nil).Decode(b)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "shop.Currency") {
		t.Fatalf("a registry answering 503 for a reference: %v; want ErrUnavailable naming it", err)
	}
	_, err = NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText,
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: 1}))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "shop.Currency") {
		t.Fatalf("a serializer whose reference's reference is unavailable: %v; want ErrUnavailable naming it", err)
	}
}

// Rule: references that lead back to a schema they came from are a bad
// record naming the schema id and the cycle, not an endless fetch.
func TestAvroReferenceCycleIsABadRecordNamingIt(t *testing.T) {
	reg, c := fakeRegistry(t)
	registerShopTypes(t, reg)
	ctx := context.Background()
	w, err := NewAvroSerializer[ShopOrder](ctx, c, "orders", shopOrderText, WithAutoRegister(),
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: "shop.Money", Version: 1}))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w.Encode(ShopOrder{ID: 1, Amount: Money{Units: 1, Currency: "EUR"}})
	// The registry answers that shop.Currency references shop.Money back.
	reg.Intercept(func(rw http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/subjects/shop.Currency/versions/1" {
			return false
		}
		json.NewEncoder(rw).Encode(sr.SubjectSchema{Subject: "shop.Currency", Version: 1, ID: 99, Schema: sr.Schema{
			Schema: currencyText, References: []sr.SchemaReference{{Name: "shop.Money", Subject: "shop.Money", Version: 1}}}})
		return true
	})
	_, err = NewAvroDeserializer[map[string]any](c, nil).Decode(b)
	if err == nil || !strings.Contains(err.Error(), "schema id "+strconv.Itoa(w.ID())) || !strings.Contains(err.Error(), "cycle") ||
		!strings.Contains(err.Error(), "which references shop.Currency") || errors.Is(err, kafka.ErrDeserializerUnavailable) {
		t.Fatalf("a reference cycle: %v; want a bad-record error naming the schema id and the cycle", err)
	}
}

// Shop's JSON schemas: an invoice's total is money.json, registered under
// a subject of its own, whose currency is currency.json, under another.
// currency.json names its draft: Apicurio Registry does not take a
// document with neither $schema nor properties as a JSON schema.
const (
	currencyJSON = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"string","pattern":"^[A-Z]{3}$"}`
	moneyJSON    = `{"type":"object","properties":{"units":{"type":"integer"},"currency":{"$ref":"currency.json"}},"required":["units","currency"]}`
	invoiceJSON  = `{"title":"shop.Invoice","type":"object","properties":{"id":{"type":"integer"},"total":{"$ref":"money.json"}},"required":["id","total"]}`
)

type JSONMoney struct {
	Units    int64  `json:"units"`
	Currency string `json:"currency"`
}

type Invoice struct {
	ID    int64     `json:"id"`
	Total JSONMoney `json:"total"`
}

func registerJSONShopTypes(t *testing.T, reg *srfake.Registry) {
	t.Helper()
	if _, _, err := reg.RegisterSchema("currency", sr.Schema{Schema: currencyJSON, Type: sr.TypeJSON}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.RegisterSchema("money", sr.Schema{Schema: moneyJSON, Type: sr.TypeJSON,
		References: []sr.SchemaReference{{Name: "currency.json", Subject: "currency", Version: 1}}}); err != nil {
		t.Fatal(err)
	}
}

// Rule: a JSON schema whose $ref names one of its references (which
// references another) is compiled with them: the serializer and the
// deserializer validate the value against the referenced schemas too; a
// $ref to a name that is neither inside the schema nor a reference is an
// error naming it, and a reference that cannot be fetched is a bad record
// naming it.
func TestJSONSchemaRefToAReferenceIsResolved(t *testing.T) {
	reg, c := fakeRegistry(t)
	registerJSONShopTypes(t, reg)
	ctx := context.Background()
	money := sr.SchemaReference{Name: "money.json", Subject: "money", Version: -1}
	w, err := NewJSONSchemaSerializer[Invoice](ctx, c, "invoices", invoiceJSON, WithAutoRegister(), WithReferences(money))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.schemaByVersion(ctx, "invoices-value", -1)
	if err != nil || got.ID != w.ID() || len(got.References) != 1 || got.References[0].Version != 1 {
		t.Fatalf("registered %+v, %v; want id %d referencing money version 1", got, err, w.ID())
	}
	inv := Invoice{ID: 1, Total: JSONMoney{Units: 5, Currency: "EUR"}}
	b, err := w.Encode(inv)
	if err != nil {
		t.Fatal(err)
	}
	var ve *jsonschema.ValidationError
	if _, err := w.Encode(Invoice{ID: 2, Total: JSONMoney{Units: 5, Currency: "euro"}}); !errors.As(err, &ve) {
		t.Fatalf("a currency the second-level reference refuses: %v; want a validation error", err)
	}
	d := NewJSONSchemaDeserializer[Invoice](c)
	if back, err := d.Decode(b); err != nil || back != inv {
		t.Fatalf("read %+v, %v; want %+v", back, err, inv)
	}
	bad := append(b[:5:5], `{"id":2,"total":{"units":1,"currency":"euro"}}`...)
	if _, err := d.Decode(bad); err == nil || !strings.Contains(err.Error(), "does not validate") {
		t.Fatalf("a value the second-level reference refuses: %v; want a validation error", err)
	}

	// Relative to the schema's $id, as a $ref in it resolves.
	withID := `{"$id":"https://shop.example/invoice.json",` + invoiceJSON[1:]
	if _, err := NewJSONSchemaSerializer[Invoice](ctx, c, "invoices-id", withID, WithAutoRegister(), WithReferences(money)); err != nil {
		t.Fatalf("a schema with an $id: %v", err)
	}

	stray := strings.Replace(invoiceJSON, "money.json", "price.json", 1)
	if _, err := NewJSONSchemaSerializer[Invoice](ctx, c, "stray", stray, WithAutoRegister(), WithReferences(money)); err == nil ||
		!strings.Contains(err.Error(), "price.json") || !strings.Contains(err.Error(), "none of its schema references") {
		t.Fatalf("a $ref to no reference: %v; want an error naming price.json", err)
	}

	reg.Intercept(func(rw http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/subjects/currency/versions/1" {
			return false
		}
		rw.WriteHeader(http.StatusNotFound)
		rw.Write([]byte(`{"error_code":40402,"message":"Version 1 not found."}`))
		return true
	})
	_, err = NewJSONSchemaDeserializer[Invoice](c).Decode(b)
	if err == nil || !strings.Contains(err.Error(), "schema id "+strconv.Itoa(w.ID())) || !strings.Contains(err.Error(), "which references currency.json") ||
		errors.Is(err, kafka.ErrDeserializerUnavailable) {
		t.Fatalf("an unfetchable reference: %v; want a bad-record error naming the schema id and the reference", err)
	}
}
