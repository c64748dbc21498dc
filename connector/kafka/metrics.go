package kafka

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/splitflow/splitflow/metrics"
)

// Metrics of the Kafka connectors. They reach the job's registry through
// the metric group of the engine's contexts (metrics.GroupOf); with a
// context that has none (tests, hand-driven readers and writers) they are
// counted and exported nowhere.
const (
	metricLag        = "kafka_source_lag_records"
	metricSkipped    = "kafka_source_records_skipped_total"
	metricCommitFail = "kafka_source_offset_commit_failures_total"
	metricDiscovered = "kafka_source_partitions_discovered_total"
	metricTxns       = "kafka_sink_transactions_total"
	metricCommitTime = "kafka_sink_commit_seconds"

	// kpromNamespace prefixes franz-go's client metrics (kprom):
	// splitflow_kafka_connects_total, ..._read_bytes_total, and so on.
	kpromNamespace = metrics.Namespace + "_kafka"
)

// recordBytes is the size of a record as the connectors count it: key,
// value and headers, without Kafka's framing.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// transactionsCounter counts the sink's transactions by outcome
// (committed, aborted).
func transactionsCounter(g *metrics.Group) *prometheus.CounterVec {
	return g.CounterVec(metricTxns, "Kafka sink transactions by outcome: committed by the committer, or aborted (a failed prepare, an open transaction at close, lingering ones at start).", "outcome")
}

// clientOpts returns the kgo options that export a client's metrics with
// kprom on g's registry, labelled with g's labels and role; none for a nil
// group. Every client created with the same options shares one set of
// metrics (see sharedKprom).
func clientMetricOpts(g *metrics.Group, role string) []kgo.Opt {
	if g == nil || g.Registry() == nil {
		return nil
	}
	labels := g.Labels()
	labels["role"] = role
	m := kprom.NewMetrics(kpromNamespace,
		kprom.Registerer(replacingRegisterer{g.Registry().Registerer()}),
		kprom.WithStaticLabel(labels))
	return []kgo.Opt{kgo.WithHooks(&sharedKprom{m: m})}
}

// replacingRegisterer lets kprom register its collectors while a client of
// an earlier attempt of the same subtask and role may not have closed yet:
// the newer collectors replace the older ones instead of panicking in
// kprom's MustRegister.
type replacingRegisterer struct{ prometheus.Registerer }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
		r.Registerer.Unregister(are.ExistingCollector)
		return r.Registerer.Register(c)
	}
	return err
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		// A collector that still cannot be registered is left out: client
		// metrics are not worth failing the operator for.
		_ = r.Register(c)
	}
}

// sharedKprom lets several franz-go clients share one kprom.Metrics. kprom
// registers its collectors when a client is created and unregisters them
// when it closes, which suits one client; the sink's transactional pool
// creates a client per transactional id with the same options. So the
// first client of the set registers, later ones add to the same counters,
// and the last one to close unregisters. The buffered-records gauges
// follow the first client.
type sharedKprom struct {
	m *kprom.Metrics

	mu      sync.Mutex
	clients int
}

var (
	_ kgo.HookNewClient           = (*sharedKprom)(nil)
	_ kgo.HookClientClosed        = (*sharedKprom)(nil)
	_ kgo.HookBrokerConnect       = (*sharedKprom)(nil)
	_ kgo.HookBrokerDisconnect    = (*sharedKprom)(nil)
	_ kgo.HookBrokerThrottle      = (*sharedKprom)(nil)
	_ kgo.HookBrokerRead          = (*sharedKprom)(nil)
	_ kgo.HookBrokerWrite         = (*sharedKprom)(nil)
	_ kgo.HookBrokerE2E           = (*sharedKprom)(nil)
	_ kgo.HookProduceBatchWritten = (*sharedKprom)(nil)
	_ kgo.HookFetchBatchRead      = (*sharedKprom)(nil)
)

func (s *sharedKprom) OnNewClient(cl *kgo.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients++
	if s.clients == 1 {
		s.m.OnNewClient(cl)
	}
}

func (s *sharedKprom) OnClientClosed(cl *kgo.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients--
	if s.clients == 0 {
		s.m.OnClientClosed(cl)
	}
}

func (s *sharedKprom) OnBrokerConnect(meta kgo.BrokerMetadata, dial time.Duration, conn net.Conn, err error) {
	s.m.OnBrokerConnect(meta, dial, conn, err)
}

func (s *sharedKprom) OnBrokerDisconnect(meta kgo.BrokerMetadata, conn net.Conn) {
	s.m.OnBrokerDisconnect(meta, conn)
}

func (s *sharedKprom) OnBrokerThrottle(meta kgo.BrokerMetadata, interval time.Duration, after bool) {
	s.m.OnBrokerThrottle(meta, interval, after)
}

func (s *sharedKprom) OnBrokerRead(meta kgo.BrokerMetadata, key int16, n int, wait, read time.Duration, err error) {
	s.m.OnBrokerRead(meta, key, n, wait, read, err)
}

func (s *sharedKprom) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, n int, wait, write time.Duration, err error) {
	s.m.OnBrokerWrite(meta, key, n, wait, write, err)
}

func (s *sharedKprom) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	s.m.OnBrokerE2E(meta, key, e2e)
}

func (s *sharedKprom) OnProduceBatchWritten(meta kgo.BrokerMetadata, topic string, p int32, m kgo.ProduceBatchMetrics) {
	s.m.OnProduceBatchWritten(meta, topic, p, m)
}

func (s *sharedKprom) OnFetchBatchRead(meta kgo.BrokerMetadata, topic string, p int32, m kgo.FetchBatchMetrics) {
	s.m.OnFetchBatchRead(meta, topic, p, m)
}

// registerReaderMetrics exports a reader's lag per partition, its skipped
// records and failed group offset commits, read at scrape time.
func registerReaderMetrics(g *metrics.Group, lag *lagTable, skipped, failed func() int64) func() {
	rmLag := g.Func(metrics.GaugeKind, metricLag,
		"Records between a Kafka source reader's position and the end of the partition it can read (the high watermark, or the last stable offset under read_committed).",
		[]string{"topic", "partition"}, func(emit func(float64, ...string)) {
			for tp, v := range lag.snapshot() {
				emit(float64(v), tp.Topic, strconv.Itoa(int(tp.Partition)))
			}
		})
	rmSkipped := g.Func(metrics.CounterKind, metricSkipped,
		"Records a Kafka source reader skipped because they failed to deserialize (WithSkipBadRecords).",
		nil, func(emit func(float64, ...string)) { emit(float64(skipped())) })
	rmFailed := g.Func(metrics.CounterKind, metricCommitFail,
		"Group offset commits of a Kafka source reader that failed (monitoring only; progress is in the checkpoint).",
		nil, func(emit func(float64, ...string)) { emit(float64(failed())) })
	return func() { rmLag(); rmSkipped(); rmFailed() }
}
