package kafkatest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

func produce(t *testing.T, cl *kgo.Client, topic string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
}

func consumeAll(t *testing.T, b *kafkatest.Broker, topic string, want int) []string {
	t.Helper()
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), want)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

func TestBrokerProducesAndConsumes(t *testing.T) {
	b := kafkatest.Get(t)
	topic := b.CreateTopic(t, "kafkatest-basic", 3, nil)
	produce(t, b.Client(t), topic, 0, 30)
	if got := consumeAll(t, b, topic, 30); len(got) != 30 {
		t.Fatalf("consumed %d records, want 30", len(got))
	}
}

// Stop and Start keep the address and the data: what was written before the
// restart is read after it.
func TestStopStartKeepsData(t *testing.T) {
	b := kafkatest.Get(t)
	if b.Kind() == kafkatest.KindExternal {
		if err := b.Stop(context.Background()); !errors.Is(err, kafkatest.ErrNotControllable) {
			t.Fatalf("Stop on an external broker: got %v, want ErrNotControllable", err)
		}
		return
	}
	topic := b.CreateTopic(t, "kafkatest-restart", 1, nil)
	produce(t, b.Client(t), topic, 0, 10)

	ctx := context.Background()
	began := time.Now()
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stopped := time.Since(began)

	// While stopped, a request fails instead of hanging forever.
	cl := b.Client(t, kgo.RetryTimeout(time.Second))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := cl.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
	cancel()
	if err == nil {
		t.Fatalf("produce to a stopped broker succeeded")
	}

	began = time.Now()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("stop took %s, start took %s", stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	produce(t, b.Client(t), topic, 10, 20)
	got := consumeAll(t, b, topic, 20)
	for i := 0; i < 20; i++ {
		if got[i] != fmt.Sprint(i) {
			t.Fatalf("record %d is %q after the restart, want %d", i, got[i], i)
		}
	}
}
