package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// OrderV1 and OrderV2 are one record's two versions: v2 adds a field
// with a default, a BACKWARD and FORWARD compatible change.
type OrderV1 struct {
	ID     int64  `avro:"id"`
	Amount int64  `avro:"amount"`
	Note   string `avro:"note"`
}

type OrderV2 struct {
	ID       int64  `avro:"id"`
	Amount   int64  `avro:"amount"`
	Currency string `avro:"currency"`
}

const (
	orderV1Text = `{"type":"record","name":"Order","namespace":"splitflow.test","fields":[
		{"name":"id","type":"long"},{"name":"amount","type":"long"},{"name":"note","type":"string","default":""}]}`
	orderV2Text = `{"type":"record","name":"Order","namespace":"splitflow.test","fields":[
		{"name":"id","type":"long"},{"name":"amount","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}`
	// orderV3Text changes id's type: no reader of v2 can read it.
	orderV3Text = `{"type":"record","name":"Order","namespace":"splitflow.test","fields":[
		{"name":"id","type":"string"},{"name":"amount","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}`
)

// Each schema text parses into a cache of its own: v1 and v2 share a name.
func parse(t testing.TB, text string) avro.Schema {
	t.Helper()
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fakeRegistry(t *testing.T, opts ...srfake.Option) (*srfake.Registry, *Client) {
	t.Helper()
	reg := srfake.New(opts...)
	t.Cleanup(reg.Close)
	c, err := NewClient(WithURLs(reg.URL()), WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return reg, c
}

// Rule: the reader reads every writer version Avro's resolution rules
// allow into its own type, in one stream: v1 records into a v2 reader
// take the new field's default and lose the dropped one, v2 records into
// a v1 reader lose the new field and take the old one's default.
func TestReaderResolvesEveryCompatibleWriterSchema(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	v1, v2 := parse(t, orderV1Text), parse(t, orderV2Text)
	w1, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	w2, err := NewAvroSerializer[OrderV2](ctx, c, "orders", orderV2Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if w1.ID() == w2.ID() || w1.Subject() != "orders-value" {
		t.Fatalf("v1 id %d subject %q, v2 id %d: want two ids under orders-value", w1.ID(), w1.Subject(), w2.ID())
	}
	b1, err := w1.Encode(OrderV1{ID: 1, Amount: 10, Note: "gift"})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := w2.Encode(OrderV2{ID: 2, Amount: 20, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	r2 := NewAvroDeserializer[OrderV2](c, v2)
	for _, tc := range []struct {
		b    []byte
		want OrderV2
	}{{b1, OrderV2{1, 10, "EUR"}}, {b2, OrderV2{2, 20, "USD"}}, {b1, OrderV2{1, 10, "EUR"}}} {
		got, err := r2.Decode(tc.b)
		if err != nil || got != tc.want {
			t.Fatalf("v2 reader: %+v, %v; want %+v", got, err, tc.want)
		}
	}
	r1 := NewAvroDeserializer[OrderV1](c, v1)
	for _, tc := range []struct {
		b    []byte
		want OrderV1
	}{{b2, OrderV1{2, 20, ""}}, {b1, OrderV1{1, 10, "gift"}}} {
		got, err := r1.Decode(tc.b)
		if err != nil || got != tc.want {
			t.Fatalf("v1 reader: %+v, %v; want %+v", got, err, tc.want)
		}
	}
	// A generic reader reads each record as its writer wrote it.
	g := NewAvroDeserializer[map[string]any](c, nil)
	got, err := g.Decode(b2)
	if err != nil || got["currency"] != "USD" || got["id"] != int64(2) {
		t.Fatalf("generic reader: %v, %v", got, err)
	}
}

// Rule: a serializer resolves its schema id once, when it is made, and
// never calls the registry per record; without WithAutoRegister (the
// default) it only looks up, and a schema not registered is an error
// naming the registry and the subject.
func TestSerializerCallsTheRegistryOnceAndRegistersOnlyWhenAsked(t *testing.T) {
	reg, c := fakeRegistry(t)
	var calls atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool { calls.Add(1); return false })
	ctx := context.Background()
	_, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text)
	var re *Error
	if !errors.As(err, &re) || !re.NotFound() || !strings.Contains(err.Error(), `subject "orders-value"`) ||
		!strings.Contains(err.Error(), reg.URL()) || !strings.Contains(err.Error(), "WithAutoRegister") {
		t.Fatalf("look-up of an unregistered schema = %v; want a not-found *Error naming the registry and subject", err)
	}
	if reg.SubjectExists("orders-value") {
		t.Fatal("a look-up registered the schema")
	}
	if _, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister()); err != nil {
		t.Fatal(err)
	}
	w, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text)
	if err != nil {
		t.Fatalf("look-up of a registered schema: %v", err)
	}
	before := calls.Load()
	ser := w.Values()
	for i := range 100 {
		if _, err := ser.Serialize(OrderV1{ID: int64(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.Load() - before; got != 0 {
		t.Fatalf("100 records made %d registry calls, want 0", got)
	}
}

// Rule: a record the deserializer cannot read is an error that is not
// ErrUnavailable (so the source's bad-record policy applies): a wrong
// magic byte, an id the registry does not know, bytes that do not decode,
// a tombstone; and an unknown id is asked about once, not per record.
func TestUndecodableRecordsAreBadRecords(t *testing.T) {
	reg, c := fakeRegistry(t)
	ctx := context.Background()
	w, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	good, err := w.Encode(OrderV1{ID: 1, Amount: 5, Note: "a long note to cut short"})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool { calls.Add(1); return false })
	d := NewAvroDeserializer[OrderV2](c, parse(t, orderV2Text))
	unknown := append([]byte{0, 0, 0, 0x30, 0x39}, good[5:]...) // id 12345
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"wrong magic byte", append([]byte{1}, good[1:]...), "first byte 0x01"},
		{"too short", []byte{0, 0}, "wire format"},
		{"unknown id", unknown, "schema id 12345"},
		{"unknown id again", unknown, "schema id 12345"},
		{"truncated", good[:len(good)-4], "do not decode"},
		{"left over bytes", append(append([]byte(nil), good...), 0, 0), "left over"},
		{"tombstone", nil, "tombstone"},
	} {
		_, err := d.Decode(tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, kafka.ErrDeserializerUnavailable) {
			t.Errorf("%s: %v; want a bad-record error saying %q", tc.name, err, tc.want)
		}
	}
	if got := calls.Load(); got != 2 { // id 1 once, id 12345 once
		t.Fatalf("%d registry calls, want 2: one per id met", got)
	}
}

// Rule: a registry that cannot be reached is retried, then the error
// names the registry and wraps ErrUnavailable, and so
// kafka.ErrDeserializerUnavailable, which fails the job under every
// bad-record policy; server errors are retried too.
func TestUnreachableRegistryIsRetriedThenUnavailable(t *testing.T) {
	reg, c := fakeRegistry(t)
	w, err := NewAvroSerializer[OrderV1](context.Background(), c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w.Encode(OrderV1{ID: 1})
	var calls atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		calls.Add(1)
		http.Error(w, `{"error_code":50001,"message":"storage down"}`, http.StatusServiceUnavailable)
		return true
	})
	_, err = NewAvroDeserializer[OrderV1](c, nil).Decode(b)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, kafka.ErrDeserializerUnavailable) || !strings.Contains(err.Error(), reg.URL()) {
		t.Fatalf("registry answering 503: %v; want ErrUnavailable naming %s", err, reg.URL())
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d attempts, want the 2 WithRetries allows", got)
	}

	down, err := NewClient(WithURLs("http://127.0.0.1:1"), WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAvroDeserializer[OrderV1](down, nil).Decode(b)
	if !errors.Is(err, kafka.ErrDeserializerUnavailable) || !strings.Contains(err.Error(), "schema registry http://127.0.0.1:1") {
		t.Fatalf("registry not listening: %v; want ErrUnavailable naming it", err)
	}
	_, err = NewAvroSerializer[OrderV1](context.Background(), down, "orders", orderV1Text)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `subject "orders-value"`) {
		t.Fatalf("serializer against a registry not listening: %v; want ErrUnavailable naming the subject", err)
	}
}

// Rule: credentials reach the registry and nothing else: not the
// client's String, %#v, %+v or log value, not its errors, and a URL that
// carries a password is refused without repeating it.
func TestCredentialsStayOutOfMessages(t *testing.T) {
	const secret = "s3cr3t-t0k3n"
	reg := srfake.New(srfake.WithAuth("Bearer " + secret))
	t.Cleanup(reg.Close)
	good, err := NewClient(WithURLs(reg.URL()), WithBearerToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAvroSerializer[OrderV1](context.Background(), good, "orders", orderV1Text, WithAutoRegister()); err != nil {
		t.Fatalf("with the right token: %v", err)
	}
	bad, err := NewClient(WithURLs(reg.URL()), WithBasicAuth("user", secret))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAvroSerializer[OrderV1](context.Background(), bad, "orders", orderV1Text)
	if err == nil {
		t.Fatal("the wrong credentials were accepted")
	}
	for _, s := range []string{err.Error(), good.String(), fmt.Sprintf("%#v", good), fmt.Sprintf("%+v", bad), good.LogValue().String()} {
		if strings.Contains(s, secret) {
			t.Fatalf("a message carries the secret: %s", s)
		}
	}
	_, err = NewClient(WithURLs("https://user:" + secret + "@registry.example:8081"))
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "WithBasicAuth") {
		t.Fatalf("URL with a password: %v; want a refusal without the password", err)
	}
	_, err = NewClient(WithURLs(reg.URL()), WithBasicAuth("u", "p"), WithBearerToken("t"))
	if err == nil {
		t.Fatal("basic auth and a bearer token together were accepted")
	}
}

// Rule: the subject name strategies name subjects as Confluent's do.
func TestSubjectNameStrategies(t *testing.T) {
	for _, tc := range []struct {
		s    SubjectNameStrategy
		key  bool
		want string
	}{
		{TopicName, false, "orders-value"},
		{TopicName, true, "orders-key"},
		{RecordName, false, "splitflow.test.Order"},
		{TopicRecordName, true, "orders-splitflow.test.Order"},
	} {
		if got := tc.s("orders", tc.key, "splitflow.test.Order"); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	_, c := fakeRegistry(t)
	w, err := NewAvroSerializer[OrderV1](context.Background(), c, "orders", orderV1Text,
		WithAutoRegister(), ForKeys(), WithSubjectNameStrategy(TopicRecordName))
	if err != nil || w.Subject() != "orders-splitflow.test.Order" {
		t.Fatalf("subject %q, %v", w.Subject(), err)
	}
}

// Rule: WithTLS's configuration is the one https requests use: a client
// that trusts the registry's CA reaches it, one without it does not.
func TestTLSConfigurationReachesTheRegistry(t *testing.T) {
	fake := srfake.New()
	t.Cleanup(fake.Close)
	srv := httptest.NewUnstartedServer(fake.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	trusting, err := NewClient(WithURLs(srv.URL), WithTLS(&tls.Config{RootCAs: pool}), WithRetries(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAvroSerializer[OrderV1](context.Background(), trusting, "orders", orderV1Text, WithAutoRegister()); err != nil {
		t.Fatalf("with the registry's CA: %v", err)
	}
	system, err := NewClient(WithURLs(srv.URL), WithRetries(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAvroSerializer[OrderV1](context.Background(), system, "orders", orderV1Text)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the registry's CA: %v; want a certificate error", err)
	}
}

// Rule: Records writes each element to the values' topic with its key
// and its value, each in the wire format of its own schema.
func TestRecordsWriteKeyAndValue(t *testing.T) {
	_, c := fakeRegistry(t)
	ctx := context.Background()
	const keyText = `{"type":"long"}`
	keys, err := NewAvroSerializer[int64](ctx, c, "orders", keyText, ForKeys(), WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	values, err := NewAvroSerializer[OrderV1](ctx, c, "orders", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if keys.Subject() != "orders-key" || keys.ID() == values.ID() {
		t.Fatalf("key subject %q id %d, value id %d", keys.Subject(), keys.ID(), values.ID())
	}
	ser := Records(keys, func(o OrderV1) int64 { return o.ID }, values)
	r, err := ser.Serialize(OrderV1{ID: 7, Amount: 3}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "orders" || r.Timestamp.UnixMilli() != 1000 {
		t.Fatalf("record to %q at %v", r.Topic, r.Timestamp)
	}
	k, err := NewAvroDeserializer[int64](c, avro.MustParse(keyText)).Keys().Deserialize(r)
	if err != nil || k != 7 {
		t.Fatalf("key %d, %v; want 7", k, err)
	}
	v, err := NewAvroDeserializer[OrderV1](c, parse(t, orderV1Text)).Values().Deserialize(r)
	if err != nil || v.ID != 7 || v.Amount != 3 {
		t.Fatalf("value %+v, %v", v, err)
	}
}

// Rule: a job whose deserializer cannot reach the registry fails, naming
// the registry, even under WithSkipBadRecords: its records are not
// dropped as bad ones.
func TestUnreachableRegistryFailsTheJobUnderSkipPolicy(t *testing.T) {
	_, c := fakeRegistry(t)
	w, err := NewAvroSerializer[OrderV1](context.Background(), c, "in", orderV1Text, WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	seeds, cl := kafkaCluster(t, "in")
	for i := range 10 {
		b, _ := w.Encode(OrderV1{ID: int64(i)})
		produce(t, cl, "in", int32(i%2), b)
	}
	down, err := NewClient(WithURLs("http://127.0.0.1:1"), WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	src, err := kafka.NewSource(NewAvroDeserializer[OrderV1](down, nil).Values(), kafka.WithBrokers(seeds...), kafka.WithTopics("in"),
		kafka.WithBounded(kafka.LatestOffsets()), kafka.WithSkipBadRecords(), kafka.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithLogger(quiet()), runtime.WithRestartStrategy(restart.None()))
	count := &countSink[OrderV1]{}
	runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[OrderV1](count))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = env.Execute(ctx, "registry down")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "schema registry http://127.0.0.1:1") {
		t.Fatalf("Execute = %v; want the job failed with ErrUnavailable naming the registry", err)
	}
	if n := count.n.Load(); n != 0 {
		t.Fatalf("%d records passed without their schema", n)
	}
}
