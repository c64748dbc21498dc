package registry

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry/internal/testpb"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func testOrder(id int64) *testpb.Order {
	return &testpb.Order{
		Id:      id,
		Amount:  &testpb.Money{Currency: "EUR", Units: 10 * id},
		Placed:  timestamppb.New(time.UnixMilli(1_700_000_000_000 + id)),
		Lines:   []*testpb.Order_Line{{Sku: "a", Quantity: 1}, {Sku: "b", Quantity: 2}},
		Channel: &testpb.Order_Web{Web: "shop.example"},
	}
}

// Rule: the Protobuf serializer registers its .proto file with the files
// it imports as references (each under its import path, the well-known
// types left to the registry), writes the message indexes of its type in
// the file as Confluent's header does (one 0 byte for the first message,
// [1] for the second, [1, 0] for the first nested in it), and both
// deserializers, into the generated type and into a dynamic message of
// the registry's schema, read back what it wrote.
func TestProtobufRoundTripWithReferencesAndMessageIndexes(t *testing.T) {
	reg, c := fakeRegistry(t)
	ctx := context.Background()
	orders, err := NewProtobufSerializer[*testpb.Order](ctx, c, "orders", WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if orders.Subject() != "orders-value" || !reg.SubjectExists("splitflow/test/money.proto") || reg.SubjectExists("google/protobuf/timestamp.proto") {
		t.Fatalf("subject %q; want orders-value, with money.proto registered as a reference and timestamp.proto left out", orders.Subject())
	}
	got, err := c.schemaByVersion(ctx, "orders-value", -1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != sr.TypeProtobuf || len(got.References) != 1 || got.References[0] != (sr.SchemaReference{Name: "splitflow/test/money.proto", Subject: "splitflow/test/money.proto", Version: 1}) ||
		!strings.Contains(got.Schema.Schema, "message Order") || !strings.Contains(got.Schema.Schema, `import "google/protobuf/timestamp.proto"`) {
		t.Fatalf("registered %s with references %v:\n%s", got.Type, got.References, got.Schema.Schema)
	}
	// Without WithAutoRegister a registered file and its references are
	// looked up, not registered again.
	again, err := NewProtobufSerializer[*testpb.Order](ctx, c, "orders")
	if err != nil || again.ID() != orders.ID() {
		t.Fatalf("look-up: id %v, %v; want %d", again, err, orders.ID())
	}
	customers, err := NewProtobufSerializer[*testpb.Customer](ctx, c, "customers", WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	lines, err := NewProtobufSerializer[*testpb.Order_Line](ctx, c, "lines", WithAutoRegister(), WithSubjectNameStrategy(RecordName))
	if err != nil {
		t.Fatal(err)
	}
	if lines.Subject() != "splitflow.test.Order.Line" || customers.ID() != orders.ID() {
		t.Fatalf("line subject %q, customer id %d, order id %d; want the record name, and one id for one file", lines.Subject(), customers.ID(), orders.ID())
	}

	order := testOrder(7)
	ob, err := orders.Encode(order)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := customers.Encode(&testpb.Customer{Name: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := lines.Encode(&testpb.Order_Line{Sku: "x", Quantity: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		b       []byte
		indexes []byte // zigzag varints: a count, then each index
	}{
		{"first message", cb, []byte{0}},
		{"second message", ob, []byte{2, 2}},
		{"nested message", lb, []byte{4, 2, 0}},
	} {
		if tc.b[0] != 0 || !bytes.HasPrefix(tc.b[5:], tc.indexes) {
			t.Errorf("%s: header % x; want magic 0, the id, then indexes % x", tc.name, tc.b[:8], tc.indexes)
		}
	}

	o, err := NewProtobufDeserializer[*testpb.Order](c).Decode(ob)
	if err != nil || !proto.Equal(o, order) {
		t.Fatalf("generated: %v, %v; want %v", o, err, order)
	}
	l, err := NewProtobufDeserializer[*testpb.Order_Line](c).Decode(lb)
	if err != nil || l.GetSku() != "x" || l.GetQuantity() != 3 {
		t.Fatalf("nested: %v, %v", l, err)
	}
	dyn := NewDynamicProtobufDeserializer(c)
	for _, tc := range []struct {
		b    []byte
		want proto.Message
	}{{ob, order}, {cb, &testpb.Customer{Name: "ada"}}, {lb, &testpb.Order_Line{Sku: "x", Quantity: 3}}} {
		m, err := dyn.Decode(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if m.Descriptor().FullName() != tc.want.ProtoReflect().Descriptor().FullName() {
			t.Fatalf("dynamic message %s; want %s", m.Descriptor().FullName(), tc.want.ProtoReflect().Descriptor().FullName())
		}
		// The dynamic message holds every field: re-encoded, it reads
		// back as the generated one.
		raw, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back := tc.want.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(raw, back); err != nil || !proto.Equal(back, tc.want) {
			t.Fatalf("dynamic %v re-read as %v, %v; want %v", m, back, err, tc.want)
		}
	}
	m, _ := dyn.Decode(ob)
	if id := m.Get(m.Descriptor().Fields().ByName("id")).Int(); id != 7 {
		t.Fatalf("dynamic order id %d, want 7", id)
	}
}

// Rule: a Protobuf record the deserializer cannot read is an error that
// is not ErrUnavailable (so the source's bad-record policy applies): a
// wrong magic byte, an unknown id, message indexes the schema lacks, a
// message of another type, bytes that do not decode, an Avro schema's
// id, a tombstone; and the policies fail, skip and count, or dead-letter
// it.
func TestProtobufUndecodableRecordsAreBadRecords(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	orders, err := NewProtobufSerializer[*testpb.Order](ctx, c, "orders", WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	customers, err := NewProtobufSerializer[*testpb.Customer](ctx, c, "customers", WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	avroOrders, err := NewAvroSerializer[OrderV1](ctx, c, "avro", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := orders.Encode(testOrder(1))
	cb, _ := customers.Encode(&testpb.Customer{Name: "ada"})
	ab, _ := avroOrders.Encode(OrderV1{ID: 1})
	bad := map[string][]byte{
		"first byte 0x01":      append([]byte{1}, ob[1:]...),
		"schema id 12345":      append([]byte{0, 0, 0, 0x30, 0x39}, ob[5:]...),
		"name no message":      append(append([]byte{0, 0, 0, 0, byte(orders.ID())}, 2, 10), ob[7:]...), // [5]
		"not the splitflow":    cb,
		"do not decode as":     append(append([]byte(nil), ob[:7]...), 0xff, 0xff, 0xff),
		"not Protobuf":         ab,
		"indexes after schema": []byte{0, 0, 0, 0, byte(orders.ID()), 0x7f},
	}
	d := NewProtobufDeserializer[*testpb.Order](c)
	for want, b := range bad {
		_, err := d.Decode(b)
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, kafka.ErrDeserializerUnavailable) {
			t.Errorf("%v; want a bad-record error saying %q", err, want)
		}
	}
	if _, err := d.Decode(nil); err == nil || !strings.Contains(err.Error(), "tombstone") {
		t.Errorf("tombstone: %v", err)
	}
	good := make([][]byte, 20)
	for i := range good {
		good[i], _ = orders.Encode(testOrder(int64(i)))
	}
	checkBadRecordPolicies(t, d.Values(), good, bad)

	down, err := NewClient(WithURLs("http://127.0.0.1:1"), WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDynamicProtobufDeserializer(down).Decode(ob); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("registry not listening: %v; want ErrUnavailable", err)
	}
	if _, err := NewProtobufSerializer[*testpb.Order](ctx, down, "orders"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "money.proto") {
		t.Fatalf("serializer against a registry not listening: %v; want ErrUnavailable naming the reference", err)
	}
}

// Rule: a serializer's type must be a generated message type: an
// interface type or a dynamic message has no descriptor to register.
func TestProtobufSerializerNeedsAGeneratedType(t *testing.T) {
	_, c := fakeRegistry(t)
	if _, err := NewProtobufSerializer[proto.Message](context.Background(), c, "orders"); err == nil {
		t.Fatal("proto.Message accepted")
	}
	if _, err := NewProtobufSerializer[*dynamicpb.Message](context.Background(), c, "orders"); err == nil {
		t.Fatal("*dynamicpb.Message accepted")
	}
}
