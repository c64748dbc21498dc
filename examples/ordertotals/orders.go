package main

import (
	"fmt"
	"math/rand/v2"
)

// The input's writer schemas, in the order a producer moves through them:
// v2 adds currency with a default, so a v2 reader reads v1 records (the
// currency then is "EUR") and the registry accepts v2 as a compatible
// successor of v1.
const (
	orderV1Schema = `{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"order_id","type":"string"},
  {"name":"customer","type":"string"},
  {"name":"amount_cents","type":"long"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`
	orderV2Schema = `{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"order_id","type":"string"},
  {"name":"customer","type":"string"},
  {"name":"amount_cents","type":"long"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"currency","type":"string","default":"EUR"}]}`
	// totalSchema is the output's value schema.
	totalSchema = `{"type":"record","name":"Total","namespace":"shop","fields":[
  {"name":"customer","type":"string"},
  {"name":"window_start","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"orders","type":"long"},
  {"name":"amount_cents","type":"long"}]}`
)

// Order is an input record as the job reads it, with its reader schema
// (v2). Written with v1, Currency is not written.
type Order struct {
	OrderID     string `avro:"order_id"`
	Customer    string `avro:"customer"`
	AmountCents int64  `avro:"amount_cents"`
	TS          int64  `avro:"ts"` // event time, milliseconds since the epoch
	Currency    string `avro:"currency"`
}

// Total is an output record: one customer's orders in one window.
type Total struct {
	Customer    string `avro:"customer"`
	WindowStart int64  `avro:"window_start"`
	Orders      int64  `avro:"orders"`
	AmountCents int64  `avro:"amount_cents"`
}

// sum is what a window accumulates: its orders and their amount.
type sum struct {
	Orders, AmountCents int64
}

// windowStart is the start of the tumbling window of size that holds ts
// (windows aligned to the epoch, as window.Tumbling's).
func windowStart(ts, size int64) int64 {
	r := ts % size
	if r < 0 {
		r += size
	}
	return ts - r
}

// genStart is the event time the generated input starts at:
// 2026-01-01T00:00:00Z.
const genStart = 1767225600000

var genCustomers = []string{"acme", "bolt", "crux", "dyne", "echo", "flux", "grit", "helm", "iris", "jade"}

// genRecord is one generated input record: an order and the schema
// version it is written with (1 or 2), or, with bad > 0, a record no
// deserializer reads, of one of three kinds (see encodeBad).
type genRecord struct {
	order   Order
	version int
	bad     int
}

// generate returns n records, deterministic by seed, in the order they are
// written: about 100 ms of event time between two orders, each at most
// outOfOrderness behind the latest event time before it, so that none is
// late whatever the watermark the job has when it meets it (a watermark
// is at most the latest event time minus the bound minus 1 ms). The first
// half is written with schema v1, the rest with v2 (a producer moving to
// the new schema mid-stream); 1 record in 100 is undecodable: not in the
// wire format, of a schema id the registry does not know, or a truncated
// value.
func generate(n int, seed uint64, outOfOrderness int64) []genRecord {
	r := rand.New(rand.NewPCG(seed, seed^0x0dde5))
	out := make([]genRecord, 0, n)
	clock := int64(genStart)
	for i := 0; len(out) < n; i++ {
		if r.IntN(100) == 0 {
			out = append(out, genRecord{order: Order{OrderID: fmt.Sprintf("o-%06d", i)}, bad: 1 + r.IntN(3)})
			continue
		}
		clock += r.Int64N(201)
		o := Order{
			OrderID:     fmt.Sprintf("o-%06d", i),
			Customer:    genCustomers[r.IntN(len(genCustomers))],
			AmountCents: 100 + r.Int64N(20000),
			TS:          clock - r.Int64N(outOfOrderness+1),
		}
		v := 1
		if len(out) >= n/2 {
			v = 2
			o.Currency = []string{"EUR", "USD", "GBP"}[r.IntN(3)]
		}
		out = append(out, genRecord{order: o, version: v})
	}
	return out
}

// encodeBad returns the bytes of a bad record of kind 1 (not in the wire
// format), 2 (a schema id the registry does not hold) or 3 (a valid v1
// order cut short after its header and two bytes).
func encodeBad(kind int, id string, v1 func(Order) ([]byte, error)) ([]byte, error) {
	switch kind {
	case 1:
		return []byte("not avro: " + id), nil
	case 2:
		return []byte{0, 0x7f, 0xff, 0xff, 0xf0, 2, 'x'}, nil
	default:
		b, err := v1(Order{OrderID: id, Customer: "cut", AmountCents: 1, TS: genStart})
		if err != nil {
			return nil, err
		}
		return b[:7], nil
	}
}
