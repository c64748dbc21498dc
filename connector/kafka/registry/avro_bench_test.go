package registry

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// benchEvent is a 10-field record of the kind pipelines carry: strings,
// longs, a double, a boolean, a timestamp-millis and an optional field.
type benchEvent struct {
	ID       int64     `avro:"id"`
	User     string    `avro:"user"`
	Session  string    `avro:"session"`
	Page     string    `avro:"page"`
	Country  string    `avro:"country"`
	Amount   float64   `avro:"amount"`
	Quantity int64     `avro:"quantity"`
	Paid     bool      `avro:"paid"`
	At       time.Time `avro:"at"`
	Coupon   *string   `avro:"coupon"`
}

const benchEventText = `{"type":"record","name":"Event","namespace":"splitflow.bench","fields":[
	{"name":"id","type":"long"},
	{"name":"user","type":"string"},
	{"name":"session","type":"string"},
	{"name":"page","type":"string"},
	{"name":"country","type":"string"},
	{"name":"amount","type":"double"},
	{"name":"quantity","type":"long"},
	{"name":"paid","type":"boolean"},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"coupon","type":["null","string"],"default":null}]}`

// benchSink keeps the benchmarks' results alive, so the compiler cannot
// drop the work that made them.
var benchSink struct {
	b []byte
	e benchEvent
}

// BenchmarkAvroSerdes measures what Avro through the registry serdes costs
// per record beside a pipeline that moves the value's bytes as they are.
// One op is one record, so ns/op is ns/record. The schema id is resolved
// before the timer starts (the serializer resolves it when made, the
// deserializer on the first record), against a registry in the process:
// no op calls the registry.
//
//   - raw: copies the wire-format value into a new slice of its size, the
//     baseline.
//   - avro: decodes the wire-format value into the struct and encodes the
//     struct back, what a job that reads and writes Avro does per record.
//   - avro-decode, avro-encode: each half alone.
func BenchmarkAvroSerdes(b *testing.B) {
	reg := srfake.New()
	b.Cleanup(reg.Close)
	c, err := NewClient(WithURLs(reg.URL()), WithRetries(2, time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	ser, err := NewAvroSerializer[benchEvent](context.Background(), c, "events", benchEventText, WithAutoRegister())
	if err != nil {
		b.Fatal(err)
	}
	de := NewAvroDeserializer[benchEvent](c, parse(b, benchEventText))
	coupon := "WINTER25"
	in := benchEvent{
		ID:       9_184_467_231,
		User:     "user-000184467",
		Session:  "5f1c9a2e-7d3b-4e8a-9c61-2b0d8e4f7a13",
		Page:     "/shop/category/outdoor/tents?page=3",
		Country:  "DE",
		Amount:   149.95,
		Quantity: 2,
		Paid:     true,
		At:       time.UnixMilli(1_796_000_000_123).UTC(),
		Coupon:   &coupon,
	}
	wire, err := ser.Encode(in)
	if err != nil {
		b.Fatal(err)
	}
	got, err := de.Decode(wire) // resolves and caches the schema id
	if err != nil {
		b.Fatal(err)
	}
	if got.ID != in.ID || got.Page != in.Page || !got.At.Equal(in.At) || got.Coupon == nil || *got.Coupon != coupon {
		b.Fatalf("round trip gave %+v, want %+v", got, in)
	}
	b.Logf("wire-format value: %d bytes (5-byte header, %d bytes of Avro)", len(wire), len(wire)-5)

	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			out := make([]byte, len(wire))
			copy(out, wire)
			benchSink.b = out
		}
	})
	b.Run("avro", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			v, err := de.Decode(wire)
			if err != nil {
				b.Fatal(err)
			}
			out, err := ser.Encode(v)
			if err != nil {
				b.Fatal(err)
			}
			benchSink.b = out
		}
	})
	b.Run("avro-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			v, err := de.Decode(wire)
			if err != nil {
				b.Fatal(err)
			}
			benchSink.e = v
		}
	})
	b.Run("avro-encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			out, err := ser.Encode(in)
			if err != nil {
				b.Fatal(err)
			}
			benchSink.b = out
		}
	})
}
