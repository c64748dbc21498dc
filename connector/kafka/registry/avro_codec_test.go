package registry

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// onePointer is a struct Go stores in an interface as its one pointer
// word, as it does a pointer or a map: hamba's encoder of it takes that
// word, not a pointer to the value.
type onePointer struct {
	Coupon *string `avro:"coupon"`
}

const onePointerText = `{"type":"record","name":"OnePointer","namespace":"splitflow.test","fields":[
	{"name":"coupon","type":["null","string"],"default":null}]}`

// Rule: the serializer's encoder, built once for its schema and T, writes
// every value byte for byte as hamba/avro's Marshal of the same schema
// does, after the wire-format header, whatever kind of type T is: a
// struct, a pointer to one, a struct held in an interface as a pointer,
// a map, a primitive, or an interface type (whose values' dynamic types
// pick the encoder).
func TestAvroSerializerEncodesAsMarshalDoes(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	coupon := "WINTER25"
	event := benchEvent{
		ID: 9, User: "u", Session: "s", Page: "/p", Country: "DE", Amount: 1.5, Quantity: 2,
		Paid: true, At: time.UnixMilli(1_796_000_000_123).UTC(), Coupon: &coupon,
	}
	check := func(t *testing.T, ser interface {
		ID() int
	}, text string, encode func() ([]byte, error), v any) {
		t.Helper()
		got, err := encode()
		if err != nil {
			t.Fatal(err)
		}
		body, err := avro.Marshal(parse(t, text), v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := header.AppendEncode(nil, ser.ID(), nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, body...)
		if !bytes.Equal(got, want) {
			t.Fatalf("Encode(%#v) = %x, want %x (the header, then avro.Marshal's bytes)", v, got, want)
		}
	}
	t.Run("struct", func(t *testing.T) {
		ser, err := NewAvroSerializer[benchEvent](ctx, c, "events", benchEventText, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []benchEvent{event, {}} {
			check(t, ser, benchEventText, func() ([]byte, error) { return ser.Encode(v) }, v)
		}
	})
	t.Run("pointer", func(t *testing.T) {
		ser, err := NewAvroSerializer[*benchEvent](ctx, c, "events", benchEventText, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		check(t, ser, benchEventText, func() ([]byte, error) { return ser.Encode(&event) }, &event)
	})
	t.Run("one-pointer struct", func(t *testing.T) {
		ser, err := NewAvroSerializer[onePointer](ctx, c, "coupons", onePointerText, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []onePointer{{Coupon: &coupon}, {}} {
			check(t, ser, onePointerText, func() ([]byte, error) { return ser.Encode(v) }, v)
		}
	})
	t.Run("map", func(t *testing.T) {
		ser, err := NewAvroSerializer[map[string]any](ctx, c, "orders", orderV1Text, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		v := map[string]any{"id": int64(7), "amount": int64(3), "note": "gift"}
		check(t, ser, orderV1Text, func() ([]byte, error) { return ser.Encode(v) }, v)
	})
	t.Run("primitive", func(t *testing.T) {
		const keyText = `{"type":"long"}`
		ser, err := NewAvroSerializer[int64](ctx, c, "orders", keyText, ForKeys(), WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		check(t, ser, keyText, func() ([]byte, error) { return ser.Encode(-12345) }, int64(-12345))
	})
	t.Run("interface", func(t *testing.T) {
		ser, err := NewAvroSerializer[any](ctx, c, "orders", orderV1Text, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []any{OrderV1{ID: 1, Amount: 2, Note: "n"}, &OrderV1{ID: 3}, map[string]any{"id": int64(4), "amount": int64(5), "note": ""}} {
			check(t, ser, orderV1Text, func() ([]byte, error) { return ser.Encode(v) }, v)
		}
	})
	t.Run("error", func(t *testing.T) {
		ser, err := NewAvroSerializer[map[string]any](ctx, c, "orders", orderV1Text, WithAutoRegister())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ser.Encode(map[string]any{"id": "not a long"}); err == nil {
			t.Fatal("a value the schema cannot hold encoded without an error")
		}
		// The failed value left nothing behind for the next one.
		v := map[string]any{"id": int64(1), "amount": int64(2), "note": "after"}
		check(t, ser, orderV1Text, func() ([]byte, error) { return ser.Encode(v) }, v)
	})
}

// Rule: a deserializer keeps one decoder per writer schema id, even when
// two ids are read into one Go type, and each reads its own records: v1
// and v2 records interleaved in one stream decode as avro.Unmarshal of
// the id's schema, resolved against the reader's, does.
func TestAvroDeserializerKeepsADecoderPerWriterSchemaID(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	w1, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	w2, err := NewAvroSerializer[OrderV2](ctx, c, "orders", orderV2Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	reader := parse(t, orderV2Text)
	de := NewAvroDeserializer[OrderV2](c, reader)
	for i := range 3 {
		b1, err := w1.Encode(OrderV1{ID: int64(i), Amount: 10, Note: "gift"})
		if err != nil {
			t.Fatal(err)
		}
		b2, err := w2.Encode(OrderV2{ID: int64(i), Amount: 20, Currency: "USD"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			b    []byte
			text string
			want OrderV2
		}{{b1, orderV1Text, OrderV2{int64(i), 10, "EUR"}}, {b2, orderV2Text, OrderV2{int64(i), 20, "USD"}}} {
			got, err := de.Decode(tc.b)
			if err != nil || got != tc.want {
				t.Fatalf("record %d: %+v, %v; want %+v", i, got, err, tc.want)
			}
			resolved, err := avro.NewSchemaCompatibility().Resolve(reader, parse(t, tc.text))
			if err != nil {
				t.Fatal(err)
			}
			var uncached OrderV2
			if err := avro.Unmarshal(resolved, tc.b[5:], &uncached); err != nil || uncached != got {
				t.Fatalf("record %d: avro.Unmarshal gives %+v, %v; Decode gave %+v", i, uncached, err, got)
			}
		}
	}
	d1, err := de.writers.get(w1.ID())
	if err != nil {
		t.Fatal(err)
	}
	d2, err := de.writers.get(w2.ID())
	if err != nil {
		t.Fatal(err)
	}
	if d1.dec == nil || d2.dec == nil || d1.dec == d2.dec {
		t.Fatalf("schema ids %d and %d read into one type have decoders %p and %p: want one each", w1.ID(), w2.ID(), d1.dec, d2.dec)
	}
}

// Rule: what Decode decodes into is the zero value again before the next
// record: a field the next record does not set is its zero, not the
// last record's, and a map handed out is not filled again by the next
// record.
func TestAvroDecodeStartsEachRecordFromTheZeroValue(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	ser, err := NewAvroSerializer[benchEvent](ctx, c, "events", benchEventText, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	coupon := "WINTER25"
	withCoupon, err := ser.Encode(benchEvent{ID: 1, Coupon: &coupon})
	if err != nil {
		t.Fatal(err)
	}
	without, err := ser.Encode(benchEvent{ID: 2})
	if err != nil {
		t.Fatal(err)
	}
	de := NewAvroDeserializer[benchEvent](c, parse(t, benchEventText))
	first, err := de.Decode(withCoupon)
	if err != nil || first.Coupon == nil || *first.Coupon != coupon {
		t.Fatalf("first record: %+v, %v", first, err)
	}
	second, err := de.Decode(without)
	if err != nil || second.ID != 2 || second.Coupon != nil {
		t.Fatalf("second record: %+v (coupon %v), %v; want id 2 and no coupon", second, second.Coupon, err)
	}

	generic := NewAvroDeserializer[map[string]any](c, nil)
	m1, err := generic.Decode(withCoupon)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(m1)
	m2, err := generic.Decode(without)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m1); got != want || reflect.ValueOf(m1).UnsafePointer() == reflect.ValueOf(m2).UnsafePointer() {
		t.Fatalf("after a second record, the first map reads %s (want %s), and is the second's: %v", got, want,
			reflect.ValueOf(m1).UnsafePointer() == reflect.ValueOf(m2).UnsafePointer())
	}
}

// Rule: the writer schema cache's shortcut, the id fetched last, never
// answers for another id: ids read in any order each get what their own
// schema made, and each is fetched once.
func TestWriterSchemasAnswerEachIDWithItsOwnEntry(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	w1, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	w2, err := NewAvroSerializer[OrderV2](ctx, c, "orders", orderV2Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	made := map[int]int{}
	ws := newWriterSchemas(c, func(_ context.Context, id int, s sr.Schema) (string, error) {
		made[id]++
		return s.Schema, nil
	})
	want := map[int]string{w1.ID(): orderV1Text, w2.ID(): orderV2Text}
	for i, id := range []int{w1.ID(), w2.ID(), w1.ID(), w2.ID(), w2.ID(), w1.ID()} {
		got, err := ws.get(id)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[id] {
			t.Fatalf("read %d, id %d: got the schema %s, want %s", i, id, got, want[id])
		}
	}
	if made[w1.ID()] != 1 || made[w2.ID()] != 1 {
		t.Fatalf("each id was made %v times, want once each", made)
	}
}
