package txn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// backend is a Kafka cluster for one test: kfake in process, or the real
// broker of package kafkatest.
type backend struct {
	name  string
	seeds []string
	fake  *kfake.Cluster // nil on the real broker
}

// onBackends runs fn on kfake and on the real broker, each as a subtest.
func onBackends(t *testing.T, fn func(t *testing.T, be backend)) {
	t.Run("kfake", func(t *testing.T) { fn(t, newKfake(t)) })
	t.Run("kafka", func(t *testing.T) {
		b := kafkatest.Get(t)
		fn(t, backend{name: "kafka", seeds: b.Addrs()})
	})
}

// newKfake starts an in-process cluster for one test.
func newKfake(t *testing.T) backend {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return backend{name: "kfake", seeds: c.ListenAddrs(), fake: c}
}

func (be backend) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(be.seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (be backend) topic(t *testing.T, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("txn-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(be.client(t)).CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return name
}

func (be backend) pool(t *testing.T, prefix string, subtask int, opts ...Option) *Pool {
	t.Helper()
	p, err := NewPool(prefix, subtask, append([]Option{WithClientOpts(kgo.SeedBrokers(be.seeds...))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func (be backend) committed(t *testing.T, topic string) []string {
	t.Helper()
	var vs []string
	for _, r := range kafkatest.ReadCommitted(t, be.seeds, topic, 30*time.Second) {
		vs = append(vs, string(r.Value))
	}
	return vs
}

func uniquePrefix(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writeTxn begins a transaction on p, produces values, and prepares it.
func writeTxn(t *testing.T, p *Pool, topic string, checkpoint int64, values ...string) Committable {
	t.Helper()
	ctx := ctxT(t)
	tx, err := p.Begin()
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	for _, v := range values {
		tx.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	c, ok, err := tx.Prepare(ctx, checkpoint)
	if err != nil || !ok {
		t.Fatalf("prepare: ok=%v err=%v", ok, err)
	}
	return c
}

// abandonTxn leaves an open transaction under id, as a crashed process
// would: records flushed, no EndTxn.
func abandonTxn(t *testing.T, be backend, id, topic string, values ...string) Committable {
	t.Helper()
	ctx := ctxT(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(be.seeds...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // does not end the transaction
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch}
}
