package registry

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
)

type strictLine struct {
	SKU string `json:"sku"`
	Qty int8   `json:"qty"`
}

type strictAudit struct {
	By string `json:"by"`
}

type strictOrder struct {
	strictAudit                       // embedded: "by" is the order's own field
	ID          uint32                `json:"id"`
	Amount      float32               `json:"amount"`
	Note        *string               `json:"note"` // required; null is a value
	Tags        []string              `json:"tags,omitempty"`
	Lines       []strictLine          `json:"lines"`
	ByName      map[string]strictLine `json:"by_name,omitzero"`
	At          time.Time             `json:"at"`
	Ignored     string                `json:"-"`
}

type strictNode struct {
	Name     string       `json:"name"`
	Children []strictNode `json:"children,omitempty"`
	Next     *strictNode  `json:"next,omitempty"`
}

const strictGood = `{"by":"ada","id":7,"amount":2.5,"note":null,"lines":[{"sku":"a","qty":1}],
	"by_name":{"a":{"sku":"a","qty":1}},"at":"2026-01-02T03:04:05Z"}`

// Rule: the strict deserializer reads a value that fits its type exactly,
// and rejects, naming where: a member no field has (a renamed field
// gives that and the missing one), a name in another case, a required
// field missing (one without omitempty or omitzero), at any depth
// (lists, maps, embedded and recursive structs); numbers that overflow
// their field's type or have a fraction for an integer; data after the
// value, null, a tombstone and bytes that are not JSON.
func TestStrictJSONRejectsWhatDoesNotFit(t *testing.T) {
	d := NewStrictJSONDeserializer[strictOrder]()
	got, err := d.Decode([]byte(strictGood))
	if err != nil || got.By != "ada" || got.ID != 7 || got.Note != nil || got.Lines[0].Qty != 1 || got.ByName["a"].SKU != "a" || got.At.Year() != 2026 {
		t.Fatalf("good value: %+v, %v", got, err)
	}
	replace := func(old, new string) []byte { return []byte(strings.Replace(strictGood, old, new, 1)) }
	for _, tc := range []struct {
		name string
		b    []byte
		want []string
	}{
		{"renamed field", replace(`"amount":`, `"amt":`), []string{"$.amt: unknown field", "$.amount: required field missing"}},
		{"other case", replace(`"id":`, `"ID":`), []string{"$.ID: unknown field", "$.id: required field missing"}},
		{"missing pointer field", replace(`"note":null,`, ``), []string{"$.note: required field missing"}},
		{"missing embedded field", replace(`"by":"ada",`, ``), []string{"$.by: required field missing"}},
		{"missing in a list", replace(`[{"sku":"a","qty":1}]`, `[{"sku":"a","qty":1},{"qty":2}]`), []string{"$.lines[1].sku: required field missing"}},
		{"unknown in a map", replace(`{"a":{"sku":"a","qty":1}}`, `{"a":{"sku":"a","qty":1,"price":3}}`), []string{`$.by_name["a"].price: unknown field`}},
		{"int8 overflow", replace(`"qty":1}]`, `"qty":300}]`), []string{"300", "int8"}},
		{"negative uint", replace(`"id":7`, `"id":-1`), []string{"-1", "uint32"}},
		{"float32 overflow", replace(`"amount":2.5`, `"amount":1e40`), []string{"1e40", "float32"}},
		{"fraction for an integer", replace(`"id":7`, `"id":7.5`), []string{"7.5", "uint32"}},
		{"wrong type", replace(`"id":7`, `"id":"7"`), []string{"uint32"}},
		{"data after the value", append([]byte(strictGood), ` {}`...), []string{"data after"}},
		{"null", []byte(`null`), []string{"null holds no"}},
		{"tombstone", nil, []string{"tombstone"}},
		{"not JSON", []byte(`{"id":`), []string{"not JSON"}},
	} {
		_, err := d.Decode(tc.b)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", tc.name, err, w)
			}
		}
	}
	// The optional fields may be left out.
	if _, err := d.Decode(replace(`"by_name":{"a":{"sku":"a","qty":1}},`, ``)); err != nil {
		t.Errorf("omitzero field left out: %v", err)
	}

	n := NewStrictJSONDeserializer[*strictNode]()
	if v, err := n.Decode([]byte(`{"name":"a","children":[{"name":"b","next":{"name":"c"}}]}`)); err != nil || v.Children[0].Next.Name != "c" {
		t.Fatalf("recursive type: %+v, %v", v, err)
	}
	if _, err := n.Decode([]byte(`{"name":"a","children":[{"name":"b","next":{"nam":"c"}}]}`)); err == nil ||
		!strings.Contains(err.Error(), "$.children[0].next.nam: unknown field") || !strings.Contains(err.Error(), "$.children[0].next.name: required") {
		t.Fatalf("recursive type, renamed deep down: %v", err)
	}
}

// Rule: what the strict deserializer rejects is a bad record for the
// source's policy (not ErrDeserializerUnavailable): the job fails, skips
// and counts it, or dead-letters it with the reason.
func TestStrictJSONRejectionsAreBadRecords(t *testing.T) {
	d := NewStrictJSONDeserializer[strictLine]()
	bad := map[string][]byte{
		"$.quantity: unknown field": []byte(`{"sku":"a","quantity":1}`),
		"int8":                      []byte(`{"sku":"a","qty":1000}`),
	}
	for want, b := range bad {
		if _, err := d.Decode(b); err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, kafka.ErrDeserializerUnavailable) {
			t.Fatalf("%v; want a bad-record error saying %q", err, want)
		}
	}
	good := make([][]byte, 20)
	for i := range good {
		good[i] = []byte(`{"sku":"a","qty":1}`)
	}
	checkBadRecordPolicies(t, d.Values(), good, bad)
}
