package registry

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry/internal/testpb"
	"github.com/splitflow/splitflow/connector/kafka/registry/internal/testpb/v3pb"
	"github.com/splitflow/splitflow/integration/registrytest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
)

// The tests in this file run against a real registry (Apicurio Registry,
// integration/registrytest) and an in-process Kafka (kfake).

func TestMain(m *testing.M) { registrytest.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// realRegistry returns a client of the package's registry and a topic
// name unique to the test, whose value subject is set to BACKWARD.
func realRegistry(t *testing.T, prefix string) (*Client, string) {
	t.Helper()
	reg := registrytest.Get(t)
	topic := registrytest.Subject(prefix)
	res := reg.Client(t).SetCompatibility(context.Background(), sr.SetCompatibility{Level: sr.CompatBackward}, topic+"-value")
	if err := res[0].Err; err != nil {
		t.Fatalf("set BACKWARD on %s-value: %v", topic, err)
	}
	c, err := NewClient(WithURLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return c, topic
}

func kafkaCluster(t *testing.T, topics ...string) ([]string, *kgo.Client) {
	t.Helper()
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	seeds := f.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for _, tp := range topics {
		if resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", tp, err, resp.Err)
		}
	}
	return seeds, cl
}

func produce(t *testing.T, cl *kgo.Client, topic string, partition int32, value []byte) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: partition, Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readCommitted returns every committed record of topic: it polls until
// a poll of a few seconds brings nothing more.
func readCommitted(t *testing.T, seeds []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 {
			return out
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
}

// Rule: an exactly-once job reads a stream whose producer moved from v1
// to a compatible v2 of its schema mid-stream into the reader's v2 type
// (v1 records take the new field's default), through a failure and a
// restart, and its read_committed output holds every id exactly once;
// the registry is real and the serializers resolve their ids when made.
func TestEvolvedWriterIsReadExactlyOnceMidStream(t *testing.T) {
	c, in := realRegistry(t, "orders")
	seeds, cl := kafkaCluster(t, in, in+"-out")
	ctx := context.Background()
	v2 := parse(t, orderV2Text)
	w1, err := NewAvroSerializer[OrderV1](ctx, c, in, orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := range n / 2 {
		b, err := w1.Encode(OrderV1{ID: int64(i), Amount: int64(i), Note: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, cl, in, int32(i%2), b)
	}
	// The producer moves to v2, which the registry takes under BACKWARD.
	w2, err := NewAvroSerializer[OrderV2](ctx, c, in, orderV2Text, WithAutoRegister())
	if err != nil {
		t.Fatalf("register the compatible v2: %v", err)
	}
	for i := n / 2; i < n; i++ {
		b, err := w2.Encode(OrderV2{ID: int64(i), Amount: int64(i), Currency: "USD"})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, cl, in, int32(i%2), b)
	}

	src, err := kafka.NewSource(NewAvroDeserializer[OrderV2](c, v2).Values(), kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewAvroSerializer[OrderV2](ctx, c, in+"-out", orderV2Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := kafka.NewSink(out.Values(), kafka.WithBrokers(seeds...), kafka.WithExactlyOnce(in), kafka.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet()),
		runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 10*time.Millisecond)))
	var failed atomic.Bool
	orders := runtime.Map(runtime.FromSource(env, src, "orders").UID("in"), func(o OrderV2) (OrderV2, error) {
		if o.ID == n*3/4 && failed.CompareAndSwap(false, true) {
			return o, errors.New("injected failure after the schema moved")
		}
		return o, nil
	})
	runtime.SinkTo(orders.UID("map"), sink).UID("out")
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := env.Execute(rctx, "evolution"); err != nil {
		t.Fatal(err)
	}
	if !failed.Load() {
		t.Fatal("the injected failure never happened")
	}

	recs := readCommitted(t, seeds, in+"-out")
	read := NewAvroDeserializer[OrderV2](c, v2)
	seen := map[int64]int{}
	for _, r := range recs {
		o, err := read.Decode(r.Value)
		if err != nil {
			t.Fatalf("output record at offset %d: %v", r.Offset, err)
		}
		seen[o.ID]++
		want := "EUR" // v1's records take v2's default
		if o.ID >= n/2 {
			want = "USD"
		}
		if o.Currency != want || o.Amount != o.ID {
			t.Fatalf("output %+v; want amount %d and currency %s", o, o.ID, want)
		}
	}
	for i := range int64(n) {
		if seen[i] != 1 {
			t.Fatalf("id %d written %d times under read_committed; want once (%d records in all)", i, seen[i], len(recs))
		}
	}
}

// Rule: a schema the subject's compatibility rule forbids is refused by
// the registry when the serializer registers it, with an error naming the
// registry, the subject and the registry's reason; nothing is registered.
func TestIncompatibleSchemaIsRefusedAtRegistration(t *testing.T) {
	c, topic := realRegistry(t, "refused")
	ctx := context.Background()
	for _, text := range []string{orderV1Text, orderV2Text} {
		if _, err := NewAvroSerializer[map[string]any](ctx, c, topic, text, WithAutoRegister()); err != nil {
			t.Fatalf("register a compatible version: %v", err)
		}
	}
	_, err := NewAvroSerializer[map[string]any](ctx, c, topic, orderV3Text, WithAutoRegister())
	var re *Error
	if !errors.As(err, &re) || re.Status != http.StatusConflict || re.Unavailable ||
		!strings.Contains(err.Error(), `subject "`+topic+`-value"`) || !strings.Contains(err.Error(), c.cfg.urls[0]) {
		t.Fatalf("register the incompatible v3 = %v; want a 409 *Error naming the registry and subject", err)
	}
	versions, err := registrytest.Get(t).Client(t).SubjectVersions(ctx, topic+"-value")
	if err != nil || len(versions) != 2 {
		t.Fatalf("subject versions %v, %v; want v1 and v2 only", versions, err)
	}
}

// Rule: records the deserializer cannot read (a wrong magic byte, a
// schema id the registry does not know, bytes cut short) go to the
// dead-letter topic with the reason, exactly once, and the good records
// to the output; with WithSkipBadRecords they are counted and dropped.
func TestUndecodableRecordsGoToTheDeadLetterTopic(t *testing.T) {
	c, in := realRegistry(t, "dlq")
	seeds, cl := kafkaCluster(t, in, in+"-out", in+"-dlq")
	ctx := context.Background()
	v1 := parse(t, orderV1Text)
	w, err := NewAvroSerializer[OrderV1](ctx, c, in, orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	const good = 20
	var sample []byte
	for i := range good {
		b, err := w.Encode(OrderV1{ID: int64(i), Note: "a note long enough to cut"})
		if err != nil {
			t.Fatal(err)
		}
		sample = b
		produce(t, cl, in, int32(i%2), b)
	}
	bad := map[string][]byte{
		"first byte 0x01": append([]byte{1}, sample[1:]...),
		"schema id":       append([]byte{0, 0x7f, 0xff, 0xff, 0x00}, sample[5:]...),
		"do not decode":   sample[:len(sample)-5],
	}
	for _, b := range bad {
		produce(t, cl, in, 0, b)
	}

	for _, policy := range []string{"dead letters", "skip"} {
		t.Run(policy, func(t *testing.T) {
			opts := []kafka.SourceOption{kafka.WithBrokers(seeds...), kafka.WithTopics(in), kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(quiet())}
			if policy == "skip" {
				opts = append(opts, kafka.WithSkipBadRecords())
			} else {
				opts = append(opts, kafka.WithDeadLetterOutput("dead"))
			}
			src, err := kafka.NewSource(NewAvroDeserializer[OrderV1](c, v1).Values(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet()),
				runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithRestartStrategy(restart.None()))
			orders := runtime.FromSource(env, src, "orders")
			prefix := in + "-" + strings.ReplaceAll(policy, " ", "")
			if policy == "dead letters" {
				dead := runtime.NewOutputTag[kafka.DeadLetter]("dead")
				orders = orders.DeclareSideOutputs(dead)
				dlq, err := kafka.NewSink(kafka.DeadLetterSerializer(in+"-dlq"), kafka.WithBrokers(seeds...),
					kafka.WithExactlyOnce(prefix+"-dlq"), kafka.WithLogger(quiet()))
				if err != nil {
					t.Fatal(err)
				}
				runtime.SinkTo(runtime.SideOutput(orders, dead), dlq)
			}
			count := &countSink[OrderV1]{}
			runtime.SinkTo(orders, connector.Sink[OrderV1](count))
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := env.Execute(rctx, "bad records"); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if got := count.n.Load(); got != good {
				t.Fatalf("%d good records reached the sink, want %d", got, good)
			}
			if policy == "skip" {
				return
			}
			dead := readCommitted(t, seeds, in+"-dlq")
			if len(dead) != len(bad) {
				t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
			}
			reasons := map[string]bool{}
			for _, r := range dead {
				for _, h := range r.Headers {
					if h.Key == kafka.DeadLetterErrorHeader {
						for want := range bad {
							if strings.Contains(string(h.Value), want) {
								reasons[want] = true
							}
						}
					}
					if h.Key == kafka.DeadLetterOffsetHeader {
						if off, _ := strconv.Atoi(string(h.Value)); off < good/2 {
							t.Fatalf("dead letter from offset %d, a good record's", off)
						}
					}
				}
			}
			if len(reasons) != len(bad) {
				t.Fatalf("dead-letter reasons %v; want one for each of %d kinds", reasons, len(bad))
			}
		})
	}
}

// countSink counts what every subtask writes.
type countSink[T any] struct{ n atomic.Int64 }

func (s *countSink[T]) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[T], error) {
	return s, nil
}
func (s *countSink[T]) Write(T, connector.WriteContext) error { s.n.Add(1); return nil }
func (s *countSink[T]) Flush(bool) error                      { return nil }
func (s *countSink[T]) Close() error                          { return nil }

// Rule: against a real registry, the Protobuf serializer registers its
// file with its imports as references, the deserializers (generated and
// dynamic) read back what it wrote by the registry's text, and a file
// whose message changes a field's type is refused under BACKWARD.
func TestProtobufSchemaOnARealRegistry(t *testing.T) {
	c, topic := realRegistry(t, "proto")
	ctx := context.Background()
	w, err := NewProtobufSerializer[*testpb.Order](ctx, c, topic, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	got, err := registrytest.Get(t).Client(t).SchemaByVersion(ctx, topic+"-value", -1)
	if err != nil || got.Type != sr.TypeProtobuf || len(got.References) != 1 || got.References[0].Name != "splitflow/test/money.proto" {
		t.Fatalf("registered %+v, %v; want Protobuf referencing money.proto", got, err)
	}
	order := testOrder(3)
	b, err := w.Encode(order)
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewProtobufDeserializer[*testpb.Order](c).Decode(b)
	if err != nil || !proto.Equal(o, order) {
		t.Fatalf("generated: %v, %v", o, err)
	}
	m, err := NewDynamicProtobufDeserializer(c).Decode(b)
	if err != nil || m.Descriptor().FullName() != "splitflow.test.Order" {
		t.Fatalf("dynamic: %v, %v", m, err)
	}
	_, err = NewProtobufSerializer[*v3pb.Order](ctx, c, topic, WithAutoRegister())
	var re *Error
	if !errors.As(err, &re) || re.Status != http.StatusConflict || !strings.Contains(err.Error(), `subject "`+topic+`-value"`) || !strings.Contains(err.Error(), "int64") {
		t.Fatalf("register the incompatible Order = %v; want a 409 *Error naming the subject", err)
	}
}

// Rule: against a real registry, the JSON Schema serializer registers its
// schema as schemaType JSON, the deserializer reads back what it wrote
// and validates it by the registry's text, and a schema that changes a
// property's type is refused under BACKWARD.
func TestJSONSchemaOnARealRegistry(t *testing.T) {
	c, topic := realRegistry(t, "json")
	ctx := context.Background()
	w, err := NewJSONSchemaSerializer[Payment](ctx, c, topic, paymentSchema, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	got, err := registrytest.Get(t).Client(t).SchemaByVersion(ctx, topic+"-value", -1)
	if err != nil || got.Type != sr.TypeJSON || got.ID != w.ID() {
		t.Fatalf("registered %+v, %v; want a JSON schema of id %d", got, err, w.ID())
	}
	p := Payment{ID: 4, Amount: 2.5, Currency: "USD"}
	b, err := w.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	d := NewJSONSchemaDeserializer[Payment](c)
	if back, err := d.Decode(b); err != nil || back != p {
		t.Fatalf("read %+v, %v; want %+v", back, err, p)
	}
	if _, err := d.Decode(append(b[:5:5], `{"id":4,"amount":-1}`...)); err == nil || !strings.Contains(err.Error(), "does not validate") {
		t.Fatalf("an invalid value: %v; want a validation error", err)
	}
	_, err = NewJSONSchemaSerializer[map[string]any](ctx, c, topic, paymentV2Schema, WithAutoRegister())
	var re *Error
	if !errors.As(err, &re) || re.Status != http.StatusConflict || !strings.Contains(err.Error(), `subject "`+topic+`-value"`) {
		t.Fatalf("register the incompatible v2 = %v; want a 409 *Error naming the subject", err)
	}
}

// Rule: against a real registry, an Avro schema whose named type lives
// under another subject, which references a third (two levels), is
// registered with the references WithReferences gives, and the
// deserializer reads it back, fetching the references, into a reader
// that defines the types inline and into a generic map.
func TestAvroReferencesOnARealRegistry(t *testing.T) {
	c, topic := realRegistry(t, "avroref")
	ctx := context.Background()
	cl := registrytest.Get(t).Client(t)
	currency, money := registrytest.Subject("currency"), registrytest.Subject("money")
	cur, err := cl.CreateSchema(ctx, currency, sr.Schema{Schema: currencyText, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("register shop.Currency: %v", err)
	}
	mon, err := cl.CreateSchema(ctx, money, sr.Schema{Schema: moneyText, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "shop.Currency", Subject: currency, Version: cur.Version}}})
	if err != nil {
		t.Fatalf("register shop.Money: %v", err)
	}
	w, err := NewAvroSerializer[ShopOrder](ctx, c, topic, shopOrderText, WithAutoRegister(),
		WithReferences(sr.SchemaReference{Name: "shop.Money", Subject: money, Version: mon.Version}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.SchemaByVersion(ctx, topic+"-value", -1)
	if err != nil || got.ID != w.ID() || len(got.References) != 1 || got.References[0].Subject != money {
		t.Fatalf("registered %+v, %v; want id %d referencing %s", got, err, w.ID(), money)
	}
	b, err := w.Encode(ShopOrder{ID: 8, Amount: Money{Units: 12, Currency: "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewAvroDeserializer[ShopOrderRead](c, parse(t, shopOrderReaderText)).Decode(b)
	if want := (ShopOrderRead{ID: 8, Amount: Money{Units: 12, Currency: "EUR"}, Note: "none"}); err != nil || r != want {
		t.Fatalf("reader: %+v, %v; want %+v", r, err, want)
	}
	if g, err := NewAvroDeserializer[map[string]any](c, nil).Decode(b); err != nil || g["id"] != int64(8) {
		t.Fatalf("generic reader: %v, %v", g, err)
	}
}

// Rule: against a real registry, a JSON schema whose $ref names a
// reference, which references another, is registered with its references,
// and the deserializer validates by all three documents: a value the
// second level refuses is a bad record.
func TestJSONSchemaReferencesOnARealRegistry(t *testing.T) {
	c, topic := realRegistry(t, "jsonref")
	ctx := context.Background()
	cl := registrytest.Get(t).Client(t)
	currency, money := registrytest.Subject("currency"), registrytest.Subject("money")
	cur, err := cl.CreateSchema(ctx, currency, sr.Schema{Schema: currencyJSON, Type: sr.TypeJSON})
	if err != nil {
		t.Fatalf("register currency.json: %v", err)
	}
	mon, err := cl.CreateSchema(ctx, money, sr.Schema{Schema: moneyJSON, Type: sr.TypeJSON,
		References: []sr.SchemaReference{{Name: "currency.json", Subject: currency, Version: cur.Version}}})
	if err != nil {
		t.Fatalf("register money.json: %v", err)
	}
	w, err := NewJSONSchemaSerializer[Invoice](ctx, c, topic, invoiceJSON, WithAutoRegister(),
		WithReferences(sr.SchemaReference{Name: "money.json", Subject: money, Version: mon.Version}))
	if err != nil {
		t.Fatal(err)
	}
	inv := Invoice{ID: 3, Total: JSONMoney{Units: 7, Currency: "USD"}}
	b, err := w.Encode(inv)
	if err != nil {
		t.Fatal(err)
	}
	d := NewJSONSchemaDeserializer[Invoice](c)
	if back, err := d.Decode(b); err != nil || back != inv {
		t.Fatalf("read %+v, %v; want %+v", back, err, inv)
	}
	bad := append(b[:5:5], `{"id":4,"total":{"units":1,"currency":"usd"}}`...)
	if _, err := d.Decode(bad); err == nil || !strings.Contains(err.Error(), "does not validate") || errors.Is(err, kafka.ErrDeserializerUnavailable) {
		t.Fatalf("a currency the second-level reference refuses: %v; want a bad-record validation error", err)
	}
}
