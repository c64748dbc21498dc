package kafka

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchRecords is how many 100-byte records the source benchmarks prefill.
const benchRecords = 200_000

// benchTopic prefills a 6-partition topic once per cluster and returns the
// seeds. With SPLITFLOW_BENCH_KAFKA=host:port the real broker there is used;
// otherwise kfake.
func benchTopic(b *testing.B) ([]string, string) {
	b.Helper()
	var seeds []string
	if v := os.Getenv("SPLITFLOW_BENCH_KAFKA"); v != "" {
		seeds = strings.Split(v, ",")
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		seeds = c.ListenAddrs()
	}
	topic := "bench-" + time.Now().Format("150405.000000")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatalf("create topic: %v %v", err, resp.Err)
	}
	v := make([]byte, 100)
	for i := 0; i < benchRecords; i++ {
		cl.Produce(ctx, &kgo.Record{Value: v}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return seeds, topic
}

type discardSink struct{ n *atomic.Int64 }

func (s discardSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[[]byte], error) {
	return discardWriter(s), nil
}

type discardWriter discardSink

func (w discardWriter) Write([]byte, connector.WriteContext) error { w.n.Add(1); return nil }
func (discardWriter) Flush(bool) error                             { return nil }
func (discardWriter) Close() error                                 { return nil }

// BenchmarkKafkaSource reads the prefilled topic to its end with a bounded
// KafkaSource at parallelism 1 into a discarding sink; compare records/s with
// BenchmarkRawFranzGo on the same data.
func BenchmarkKafkaSource(b *testing.B) {
	seeds, topic := benchTopic(b)
	values := ValueDeserializer(func(v []byte) ([]byte, error) { return v, nil })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src, err := NewSource(values, WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		env := runtime.NewEnvironment()
		runtime.SinkTo(runtime.FromSource(env, src, "kafka"), discardSink{&n})
		if err := env.Execute(context.Background(), "bench"); err != nil {
			b.Fatal(err)
		}
		if n.Load() != benchRecords {
			b.Fatalf("read %d records, want %d", n.Load(), benchRecords)
		}
	}
	b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRawFranzGo is the baseline: one franz-go client polling the same
// partitions directly until it has every record.
func BenchmarkRawFranzGo(b *testing.B) {
	seeds, topic := benchTopic(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for n < benchRecords {
			fs := cl.PollFetches(context.Background())
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				_ = r.Value
				n++
			})
		}
		cl.Close()
	}
	b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
}
