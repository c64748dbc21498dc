package kafka

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// transactionsCounter counts the sink's transactions by outcome:
// committed (a transaction this attempt prepared), restored (a committable
// restored from a checkpoint, committed again or for the first time) and
// aborted (a failed prepare, an open transaction at close, lingering ones
// at start).
func transactionsCounter(g *metrics.Group) *prometheus.CounterVec {
	return g.CounterVec(metricTxns, "Kafka sink transactions by outcome: committed (prepared by this attempt), restored (committed from a restored checkpoint; the previous attempt may have committed it already), or aborted (a failed prepare, an open transaction at close, lingering ones at start).", "outcome")
}

// clientMetricOpts returns the kgo options that export a client's metrics
// with kprom on g's registry, labelled with g's labels and role; none for a
// nil group. Every client of the same registry, group and role shares one
// set of metrics (see kpromSets).
func clientMetricOpts(g *metrics.Group, role string) []kgo.Opt {
	if g == nil || g.Registry() == nil {
		return nil
	}
	labels := g.Labels()
	labels["role"] = role
	return []kgo.Opt{kgo.WithHooks(&clientMetrics{reg: g.Registry(), labels: labels, key: kpromKey{g.Registry(), labelsKey(labels)}})}
}

func labelsKey(l prometheus.Labels) string {
	names := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(l[n])
		b.WriteByte(0xff)
	}
	return b.String()
}

// kpromSets holds the client-metric sets that have a live client, one per
// registry, group and role.
//
// kprom registers its collectors when a client is created and unregisters
// them when it closes, which suits one client per set of labels. Ours come
// in overlapping generations: the transactional pool creates a client per
// id with the same labels, the fetcher manager may start a new split reader
// while the old one's client is still closing, and a failover creates the
// clients of a new attempt while a slow Close of the old one is under way.
// Two kprom.Metrics with the same labels cannot both be registered, and
// prometheus.Registry.Unregister matches by descriptor, not by object: had
// the newer set replaced the older, the older client's close would remove
// the newer client's metrics. So a set is created and registered by the
// first client of its labels, shared by every client that opens while it is
// live, and unregistered by the last one to close.
//
// The sets register on the prometheus.Registerer directly, not through
// metrics.Registry.Register: a set leaves when its last client closes, and
// metrics.Registry cannot forget a collector it recorded. Had it recorded
// a set, the next job's Open would unregister it, the job would register
// its own, and the old client closing late would then unregister the new
// set (by descriptor). The cost: metrics.Registry.Err does not report a set
// that fails to register, and a client that outlives its job keeps its set
// until it closes; the next job's set of the same labels then fails to
// register, and that job has none of those client metrics.
var kpromSets = struct {
	mu sync.Mutex
	m  map[kpromKey]*kpromSet
}{m: map[kpromKey]*kpromSet{}}

type kpromKey struct {
	reg    *metrics.Registry
	labels string
}

type kpromSet struct {
	m        *kprom.Metrics
	clients  []*kgo.Client          // live clients; kpromSets.mu
	buffered []prometheus.Collector // our buffered-records gauges
}

// clientMetrics is the kgo hook of every client created with one
// clientMetricOpts; it joins the live set of its labels as each client
// opens, and forwards the client's events to it.
type clientMetrics struct {
	reg    *metrics.Registry
	labels prometheus.Labels
	key    kpromKey
	set    atomic.Pointer[kpromSet] // the set its clients joined last
}

var (
	_ kgo.HookNewClient           = (*clientMetrics)(nil)
	_ kgo.HookClientClosed        = (*clientMetrics)(nil)
	_ kgo.HookBrokerConnect       = (*clientMetrics)(nil)
	_ kgo.HookBrokerDisconnect    = (*clientMetrics)(nil)
	_ kgo.HookBrokerThrottle      = (*clientMetrics)(nil)
	_ kgo.HookBrokerRead          = (*clientMetrics)(nil)
	_ kgo.HookBrokerWrite         = (*clientMetrics)(nil)
	_ kgo.HookBrokerE2E           = (*clientMetrics)(nil)
	_ kgo.HookProduceBatchWritten = (*clientMetrics)(nil)
	_ kgo.HookFetchBatchRead      = (*clientMetrics)(nil)
)

func (h *clientMetrics) OnNewClient(cl *kgo.Client) {
	kpromSets.mu.Lock()
	defer kpromSets.mu.Unlock()
	s := kpromSets.m[h.key]
	if s == nil {
		reg := h.reg.Registerer()
		s = &kpromSet{m: kprom.NewMetrics(kpromNamespace,
			kprom.Registerer(kpromRegisterer{reg}), kprom.WithStaticLabel(h.labels))}
		s.m.OnNewClient(cl)
		s.buffered = s.registerBuffered(reg, h.labels)
		kpromSets.m[h.key] = s
	}
	s.clients = append(s.clients, cl)
	h.set.Store(s)
}

func (h *clientMetrics) OnClientClosed(cl *kgo.Client) {
	kpromSets.mu.Lock()
	defer kpromSets.mu.Unlock()
	// A client closes while the set it joined is still the live one: the
	// set outlives its clients.
	s := kpromSets.m[h.key]
	if s == nil || !slices.Contains(s.clients, cl) {
		return
	}
	s.clients = slices.DeleteFunc(s.clients, func(c *kgo.Client) bool { return c == cl })
	if len(s.clients) > 0 {
		return
	}
	s.m.OnClientClosed(cl)
	for _, c := range s.buffered {
		h.reg.Registerer().Unregister(c)
	}
	delete(kpromSets.m, h.key)
}

// registerBuffered registers gauges of the records and bytes buffered in
// the set's clients, summed over every live client. They stand in for
// kprom's own, which read only the client that created the set and name
// two gauges ..._total (kpromRegisterer leaves those out).
func (s *kpromSet) registerBuffered(reg prometheus.Registerer, labels prometheus.Labels) []prometheus.Collector {
	sum := func(f func(*kgo.Client) int64) func() float64 {
		return func() float64 {
			kpromSets.mu.Lock()
			defer kpromSets.mu.Unlock()
			var n int64
			for _, cl := range s.clients {
				n += f(cl)
			}
			return float64(n)
		}
	}
	gauges := []struct {
		name, help string
		read       func(*kgo.Client) int64
	}{
		{"buffered_produce_records", "Records buffered in the clients, waiting to be produced.", (*kgo.Client).BufferedProduceRecords},
		{"buffered_produce_bytes", "Bytes of the records buffered in the clients, waiting to be produced.", (*kgo.Client).BufferedProduceBytes},
		{"buffered_fetch_records", "Records fetched and buffered in the clients, waiting to be polled.", (*kgo.Client).BufferedFetchRecords},
		{"buffered_fetch_bytes", "Bytes of the records fetched and buffered in the clients, waiting to be polled.", (*kgo.Client).BufferedFetchBytes},
	}
	var cs []prometheus.Collector
	for _, g := range gauges {
		c := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: kpromNamespace, Name: g.name, Help: g.help, ConstLabels: labels}, sum(g.read))
		// Failing to register only costs the gauge. It happens when a
		// client of an earlier job on this registry still holds the set of
		// the same labels; nothing reports it (see kpromSets).
		if reg.Register(c) == nil {
			cs = append(cs, c)
		}
	}
	return cs
}

func (h *clientMetrics) OnBrokerConnect(meta kgo.BrokerMetadata, dial time.Duration, conn net.Conn, err error) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerConnect(meta, dial, conn, err)
	}
}

func (h *clientMetrics) OnBrokerDisconnect(meta kgo.BrokerMetadata, conn net.Conn) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerDisconnect(meta, conn)
	}
}

func (h *clientMetrics) OnBrokerThrottle(meta kgo.BrokerMetadata, interval time.Duration, after bool) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerThrottle(meta, interval, after)
	}
}

func (h *clientMetrics) OnBrokerRead(meta kgo.BrokerMetadata, key int16, n int, wait, read time.Duration, err error) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerRead(meta, key, n, wait, read, err)
	}
}

func (h *clientMetrics) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, n int, wait, write time.Duration, err error) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerWrite(meta, key, n, wait, write, err)
	}
}

func (h *clientMetrics) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if s := h.set.Load(); s != nil {
		s.m.OnBrokerE2E(meta, key, e2e)
	}
}

func (h *clientMetrics) OnProduceBatchWritten(meta kgo.BrokerMetadata, topic string, p int32, m kgo.ProduceBatchMetrics) {
	if s := h.set.Load(); s != nil {
		s.m.OnProduceBatchWritten(meta, topic, p, m)
	}
}

func (h *clientMetrics) OnFetchBatchRead(meta kgo.BrokerMetadata, topic string, p int32, m kgo.FetchBatchMetrics) {
	if s := h.set.Load(); s != nil {
		s.m.OnFetchBatchRead(meta, topic, p, m)
	}
}

// kpromRegisterer is the registerer kprom is given. It leaves out kprom's
// buffered-records gauges (the only collectors kprom makes that are single
// metrics), which kpromSet replaces, and never panics: client metrics are
// not worth failing the operator for.
type kpromRegisterer struct{ prometheus.Registerer }

func (r kpromRegisterer) Register(c prometheus.Collector) error {
	if _, gauge := c.(prometheus.Metric); gauge {
		return nil
	}
	return r.Registerer.Register(c)
}

func (r kpromRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

// registerReaderMetrics exports a reader's lag per partition, its skipped
// records and failed group offset commits, read at scrape time.
func registerReaderMetrics(g *metrics.Group, lag func() map[TopicPartition]int64, skipped, failed func() int64) func() {
	rmLag := g.Func(metrics.GaugeKind, metricLag,
		"Records between what a Kafka source reader emitted and the end of the partition it can read (the high watermark, or the last stable offset under read_committed; the stopping offset of a bounded split if lower).",
		[]string{"topic", "partition"}, func(emit func(float64, ...string)) {
			for tp, v := range lag() {
				emit(float64(v), tp.Topic, strconv.Itoa(int(tp.Partition)))
			}
		})
	rmSkipped := g.Func(metrics.CounterKind, metricSkipped,
		"Records a Kafka source reader skipped because they failed to deserialize (WithSkipBadRecords), or sent to its dead-letter output instead (WithDeadLetterOutput).",
		nil, func(emit func(float64, ...string)) { emit(float64(skipped())) })
	rmFailed := g.Func(metrics.CounterKind, metricCommitFail,
		"Group offset commits of a Kafka source reader that failed (monitoring only; progress is in the checkpoint).",
		nil, func(emit func(float64, ...string)) { emit(float64(failed())) })
	return func() { rmLag(); rmSkipped(); rmFailed() }
}
