package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sinkBenchRecords is how many records each sink benchmark iteration writes.
const sinkBenchRecords = 100_000

func sinkBenchSeeds(b *testing.B) []string {
	b.Helper()
	if v := os.Getenv("SPLITFLOW_BENCH_KAFKA"); v != "" {
		return strings.Split(v, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()
}

func sinkBenchTopic(b *testing.B, seeds []string) string {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	topic := fmt.Sprintf("sinkbench-%d", time.Now().UnixNano())
	if resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 6, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatalf("create topic: %v %v", err, resp.Err)
	}
	return topic
}

// BenchmarkKafkaSink writes records through the sink's writer the way the
// engine drives it (Flush and PrepareCommit at each checkpoint, the commit
// when it completes, all on one goroutine), against a raw franz-go producer
// on the same cluster: records/s per guarantee, checkpoint interval and
// record size. kfake by default; SPLITFLOW_BENCH_KAFKA=host:port for a
// real broker.
func BenchmarkKafkaSink(b *testing.B) {
	seeds := sinkBenchSeeds(b)
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("raw-franz-go/%dB", size), func(b *testing.B) {
			topic := sinkBenchTopic(b, seeds)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			v := make([]byte, size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < sinkBenchRecords; j++ {
					cl.Produce(context.Background(), &kgo.Record{Value: v}, nil)
				}
				if err := cl.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(sinkBenchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
		})
		for _, g := range []DeliveryGuarantee{AtLeastOnce, ExactlyOnce} {
			for _, interval := range []time.Duration{100 * time.Millisecond, time.Second} {
				b.Run(fmt.Sprintf("%s/checkpoint-%s/%dB", g, interval, size), func(b *testing.B) {
					benchSink(b, seeds, g, interval, size)
				})
			}
		}
	}
}

func benchSink(b *testing.B, seeds []string, g DeliveryGuarantee, interval time.Duration, size int) {
	topic := sinkBenchTopic(b, seeds)
	v := make([]byte, size)
	opts := []SinkOption{WithBrokers(seeds...), withGuarantee(g, topic), WithLogger(slog.New(slog.DiscardHandler))}
	s, err := NewSink(KeyValueSerializer(topic, func(v []byte) ([]byte, []byte, error) { return nil, v, nil }), opts...)
	if err != nil {
		b.Fatal(err)
	}
	w, err := s.CreateWriter(initCtx{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	cw := w.(connector.CommittingSinkWriter[[]byte, txn.Committable])
	cm, err := s.CreateCommitter(initCtx{})
	if err != nil {
		b.Fatal(err)
	}
	defer cm.Close()
	id := int64(0)
	checkpoint := func() {
		id++
		if err := cw.Flush(false); err != nil {
			b.Fatal(err)
		}
		cs, err := cw.PrepareCommit(id)
		if err != nil {
			b.Fatal(err)
		}
		var reqs []connector.CommitRequest[txn.Committable]
		for _, c := range cs {
			reqs = append(reqs, &request{c: c})
		}
		if err := cm.Commit(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
		for _, r := range reqs {
			if o := r.(*request).outcome; o != "" {
				b.Fatalf("commit: %s %v", o, r.(*request).err)
			}
		}
		_ = w.(connector.CheckpointListener).NotifyCheckpointComplete(id)
	}
	b.ResetTimer()
	last := time.Now()
	for i := 0; i < b.N; i++ {
		for j := 0; j < sinkBenchRecords; j++ {
			if err := w.Write(v, connector.WriteContext{Timestamp: connector.NoTimestamp}); err != nil {
				b.Fatal(err)
			}
			if j%1024 == 0 && time.Since(last) >= interval {
				checkpoint()
				last = time.Now()
			}
		}
		checkpoint() // the end of input's final checkpoint
		last = time.Now()
	}
	b.ReportMetric(float64(sinkBenchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(id)/float64(b.N), "checkpoints/op")
}
