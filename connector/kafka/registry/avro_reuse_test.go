package registry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Rule: a decoded value shares no memory with what Decode reuses for the
// records after it (its reader's string slab, the record's own bytes):
// values kept from the first records are intact after thousands more
// records were decoded, and after the caller overwrote their input.
func TestAvroDecodedValuesDoNotShareBuffersWithLaterRecords(t *testing.T) {
	_, c := fakeRegistry(t)
	ser, err := NewAvroSerializer[benchEvent](context.Background(), c, "events", benchEventText, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	de := NewAvroDeserializer[benchEvent](c, parse(t, benchEventText))
	event := func(i int) benchEvent {
		coupon := fmt.Sprintf("coupon-%d", i)
		return benchEvent{
			ID: int64(i), User: fmt.Sprintf("user-%09d", i), Session: strings.Repeat(string(rune('a'+i%26)), 36),
			Page: fmt.Sprintf("/page/%d", i), Country: "DE", Amount: float64(i) / 4, Quantity: int64(i % 7),
			Paid: i%2 == 0, At: time.UnixMilli(int64(i)).UTC(), Coupon: &coupon,
		}
	}
	const n = 5000 // about 100 bytes of strings a record: hundreds of 1 KiB slabs
	kept := make([]benchEvent, 0, n)
	for i := range n {
		wire, err := ser.Encode(event(i))
		if err != nil {
			t.Fatal(err)
		}
		v, err := de.Decode(wire)
		if err != nil {
			t.Fatal(err)
		}
		clear(wire) // a source may reuse the record's bytes
		kept = append(kept, v)
	}
	for i, got := range kept {
		want := event(i)
		if got.ID != want.ID || got.User != want.User || got.Session != want.Session || got.Page != want.Page ||
			got.Country != want.Country || got.Coupon == nil || *got.Coupon != *want.Coupon || !got.At.Equal(want.At) {
			t.Fatalf("record %d decoded as %+v (coupon %v), changed after later records; want %+v", i, got, got.Coupon, want)
		}
	}
}

// blobV is a record with a bytes field before a string field.
type blobV struct {
	Data []byte `avro:"data"`
	Name string `avro:"name"`
}

const blobText = `{"type":"record","name":"Blob","namespace":"splitflow.test","fields":[
	{"name":"data","type":"bytes"},{"name":"name","type":"string"}]}`

// Rule: appending to a decoded bytes value does not write over the
// values of records decoded after it.
func TestAvroDecodedBytesAppendDoesNotOverwriteLaterRecords(t *testing.T) {
	_, c := fakeRegistry(t)
	ser, err := NewAvroSerializer[blobV](context.Background(), c, "blobs", blobText, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	de := NewAvroDeserializer[blobV](c, parse(t, blobText))
	decode := func(v blobV) blobV {
		t.Helper()
		wire, err := ser.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := de.Decode(wire)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := decode(blobV{Data: []byte("abc"), Name: "first"})
	second := decode(blobV{Data: []byte("def"), Name: "second"})
	first.Data = append(first.Data, strings.Repeat("X", 64)...)
	if second.Name != "second" || string(second.Data) != "def" {
		t.Fatalf("after an append to the first record's bytes, the second record reads %q, %q; want \"def\", \"second\"", second.Data, second.Name)
	}
}

// Rule: an Avro serializer and deserializer are safe for concurrent use,
// as documented: goroutines encoding and decoding at once each get their
// own values back.
func TestAvroSerdesAreSafeForConcurrentUse(t *testing.T) {
	_, c := fakeRegistry(t)
	ser, err := NewAvroSerializer[OrderV1](context.Background(), c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	de := NewAvroDeserializer[OrderV1](c, parse(t, orderV1Text))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				want := OrderV1{ID: int64(g*1000 + i), Amount: int64(i), Note: fmt.Sprintf("g%d-%d", g, i)}
				wire, err := ser.Encode(want)
				if err != nil {
					errs <- err
					return
				}
				got, err := de.Decode(wire)
				if err != nil {
					errs <- err
					return
				}
				if got != want {
					errs <- fmt.Errorf("goroutine %d decoded %+v, want %+v", g, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
