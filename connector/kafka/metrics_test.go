package kafka

import (
	"context"
	"fmt"
	"github.com/splitflow/splitflow/metrics/metricstest"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
)

// fakeTopic starts a kfake cluster with topic of partitions partitions
// holding n records "v0000".."v<n-1>", one produce batch each, and an
// empty topic "out".
func fakeTopic(t *testing.T, partitions, n int) (seeds []string, topic string) {
	t.Helper()
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	seeds = f.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	topic = "in"
	for _, tp := range []string{topic, "out"} {
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), 1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", tp, err, resp.Err)
		}
	}
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: fmt.Appendf(nil, "v%04d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return seeds, topic
}

// An exactly-once Kafka job on kfake counts what it did: partitions
// discovered by the enumerator, bytes read and written, transactions
// committed and their commit latency.
func TestMetricsOfExactlyOnceJob(t *testing.T) {
	const n = 300 // 5 bytes each
	seeds, topic := fakeTopic(t, 3, n)
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithDeliveryGuarantee(ExactlyOnce), WithTransactionalIDPrefix("metrics"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithMetricsRegistry(reg),
		runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithRestartStrategy(runtime.NoRestart()), runtime.WithLogger(quietLogger()))
	runtime.SinkToTwoPhase(runtime.FromSource(env, src, "kafka in", runtime.NoWatermarks[string]()).UID("in"), sink).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := env.Execute(ctx, "metrics"); err != nil {
		t.Fatal(err)
	}

	if v, _ := metricstest.Sum(t, reg, "splitflow_kafka_source_partitions_discovered_total", map[string]string{"uid": "in", "subtask": "coordinator"}); v != 3 {
		t.Errorf("partitions discovered %v, want 3", v)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_operator_bytes_in_total", map[string]string{"uid": "in"}); v != 5*n {
		t.Errorf("source bytes in %v, want %d", v, 5*n)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_operator_bytes_out_total", map[string]string{"uid": "out"}); v != 5*n {
		t.Errorf("sink bytes out %v, want %d", v, 5*n)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_operator_records_in_total", map[string]string{"uid": "out"}); v != n {
		t.Errorf("sink records in %v, want %d", v, n)
	}
	committed, _ := metricstest.Sum(t, reg, "splitflow_kafka_sink_transactions_total", map[string]string{"uid": "out", "outcome": "committed"})
	if committed == 0 {
		t.Error("no committed transaction counted")
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_kafka_sink_commit_seconds", map[string]string{"uid": "out"}); v != committed {
		t.Errorf("commit latency has %v observations, want one per committed transaction (%v)", v, committed)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_kafka_sink_transactions_total", map[string]string{"uid": "out", "outcome": "aborted"}); v != 0 {
		t.Errorf("%v transactions aborted in a job without failures", v)
	}
	// Each client unregisters its kprom metrics when it closes.
	if _, found := metricstest.Sum(t, reg, "splitflow_kafka_connects_total", nil); found > 0 {
		t.Error("franz-go client metrics outlive the job's clients")
	}
}

// blockingSink holds every Write until release is closed.
type blockingSink struct {
	release chan struct{}
	once    sync.Once
	started chan struct{}
}

func (s *blockingSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return s, nil
}

func (s *blockingSink) Write(string, connector.WriteContext) error {
	s.once.Do(func() { close(s.started) })
	<-s.release
	return nil
}
func (s *blockingSink) Flush(bool) error { return nil }
func (s *blockingSink) Close() error     { return nil }

// A reader behind a stalled sink shows its lag per partition, a full
// elements queue and its fetcher blocked on it, and its client's franz-go
// metrics, while the job runs.
func TestMetricsOfBackpressuredReader(t *testing.T) {
	seeds, topic := fakeTopic(t, 1, 200)
	// Small fetches (about one 5-byte record each) leave most of the
	// partition behind the position, where lag counts it.
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithStartingOffsets(EarliestOffsets()),
		WithClientOpts(kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1)))
	if err != nil {
		t.Fatal(err)
	}
	sink := &blockingSink{release: make(chan struct{}), started: make(chan struct{})}
	reg := prometheus.NewRegistry()
	env := runtime.NewEnvironment(runtime.WithMetricsRegistry(reg), runtime.WithLogger(quietLogger()))
	runtime.SinkTo(runtime.FromSource(env, src, "kafka in", runtime.NoWatermarks[string]()).UID("in"), connector.Sink[string](sink)).UID("out")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "stalled") }()
	defer func() {
		cancel()
		select {
		case <-sink.release:
		default:
			close(sink.release)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	in := map[string]string{"uid": "in", "subtask": "0"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lag, lagFound := metricstest.Sum(t, reg, "splitflow_kafka_source_lag_records", map[string]string{"uid": "in", "topic": topic, "partition": "0"})
		fill, _ := metricstest.Sum(t, reg, "splitflow_source_elements_queue_batches", in)
		capacity, _ := metricstest.Sum(t, reg, "splitflow_source_elements_queue_capacity", in)
		blocked, _ := metricstest.Sum(t, reg, "splitflow_source_fetcher_blocked_seconds_total", in)
		read, _ := metricstest.Sum(t, reg, "splitflow_kafka_read_bytes_total", map[string]string{"uid": "in", "role": "source-reader"})
		if lagFound > 0 && lag > 0 && capacity > 0 && fill == capacity && blocked > 0 && read > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag %v (series %v), queue %v/%v, blocked %vs, client read %v bytes: want lag, a full queue, a blocked fetcher and client metrics",
				lag, lagFound, fill, capacity, blocked, read)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(sink.release)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
