package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/metrics/metricstest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/txn"
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
		WithBrokers(seeds...), WithExactlyOnce("metrics"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithMetricsRegistry(reg),
		runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithRestartStrategy(restart.None()), runtime.WithLogger(quietLogger()))
	runtime.SinkTo(runtime.FromSource(env, src, "kafka in").UID("in"), sink).UID("out")
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
	runtime.SinkTo(runtime.FromSource(env, src, "kafka in").UID("in"), connector.Sink[string](sink)).UID("out")
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

	// The fetcher is parked on the full queue and fetches nothing, yet the
	// lag must follow the end of the partition as records keep coming.
	before, _ := metricstest.Sum(t, reg, "splitflow_kafka_source_lag_records", map[string]string{"uid": "in", "topic": topic, "partition": "0"})
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const more = 100
	produceValues(t, cl, topic, 0, 0, more)
	for {
		lag, _ := metricstest.Sum(t, reg, "splitflow_kafka_source_lag_records", map[string]string{"uid": "in", "topic": topic, "partition": "0"})
		if lag >= before+more {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag %v after %d more records, want at least %v: it froze under backpressure", lag, more, before+more)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(sink.release)
}

// groupCtx is the SinkInitContext of subtask 0 of 1 with a metric group.
type groupCtx struct {
	initCtx
	g        *metrics.Group
	restored int64 // -1: not restored
}

func (c groupCtx) MetricGroup() *metrics.Group { return c.g }
func (c groupCtx) RestoredCheckpointID() (int64, bool) {
	return c.restored, c.restored >= 0
}

// transactions returns the sink's transaction counts by outcome.
func transactions(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, o := range []string{"committed", "restored", "aborted"} {
		m[o], _ = metricstest.Sum(t, reg, "splitflow_kafka_sink_transactions_total", map[string]string{"outcome": o})
	}
	return m
}

// A committable of the checkpoint an attempt restored from (or an older
// one) may have been committed by the previous attempt already, and
// committing it again succeeds (package txn, rule 1): its commit counts as
// restored, so that committed counts each transaction of the attempt once.
func TestSinkCountsRestoredCommitsApart(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs(), fake: f}
	topic := c.topic(t)
	reg := prometheus.NewRegistry()
	ctx := groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: -1}
	s := stringSink(t, c, topic, "counted")
	cw, err := s.CreateWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := cw.(*sinkWriter[string])
	// Checkpoint 1's transaction is restored (the attempt that prepared it
	// failed before committing it); checkpoint 2's belongs to this attempt.
	write(t, w, "a")
	restored := prepare(t, w, 1)
	write(t, w, "b")
	fresh := prepare(t, w, 2)
	commitWith := func(ctx groupCtx, c txn.Committable) {
		t.Helper()
		cm, err := s.CreateCommitter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer cm.Close()
		r := &request{c: c}
		if err := cm.Commit(context.Background(), []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
			t.Fatalf("commit: %v %s %v", err, r.outcome, r.err)
		}
	}
	restoredFrom1 := groupCtx{g: ctx.g, restored: 1}
	commitWith(restoredFrom1, restored[0])
	commitWith(restoredFrom1, fresh[0])
	_ = w.Close()
	want := map[string]float64{"committed": 1, "restored": 1, "aborted": 0}
	if got := transactions(t, reg); !maps.Equal(got, want) {
		t.Fatalf("transactions %v, want %v", got, want)
	}
}

// A writer of an older attempt may close after the newer one started (a
// Close that outlived the failover). The newer writer already aborted the
// older one's open transaction as lingering; the older one's own abort,
// fenced, may still report success. The transaction is counted once.
func TestSinkCountsZombieAbortOnce(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs(), fake: f}
	topic := c.topic(t)
	reg := prometheus.NewRegistry()
	ctx := groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: -1}
	prefix := "zombie"
	s := stringSink(t, c, topic, prefix) // a failover keeps the job's sink
	old, err := s.CreateWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(t, old.(*sinkWriter[string]), "open")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := txn.TransactionalID(prefix, 0, 0)
	deadline := time.Now().Add(20 * time.Second)
	for { // until the broker holds the transaction open
		d, err := kadm.NewClient(cl).DescribeTransactions(context.Background(), id)
		if err == nil && d[id].State == "Ongoing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction %s never became ongoing: %v %v", id, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w, err := s.CreateWriter(ctx) // aborts the open transaction
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The zombie's abort must succeed, or it would count nothing whether
	// or not it is the latest writer.
	if err := old.Close(); err != nil {
		t.Fatalf("zombie close: %v", err)
	}
	want := map[string]float64{"committed": 0, "restored": 0, "aborted": 1}
	if got := transactions(t, reg); !maps.Equal(got, want) {
		t.Fatalf("transactions %v, want %v", got, want)
	}
}

// Clients of one role overlap: the fetcher manager may start a new split
// reader while the old one's client closes, and a failover creates the
// clients of an attempt while the previous attempt's Close is under way.
// The role's client metrics stay exported while any of its clients is
// open, and go with the last (prometheus.Registry.Unregister matches by
// descriptor, so a newer set that replaced the first client's would be
// removed by the first client's close).
func TestClientMetricsOfOverlappingClients(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reg := prometheus.NewRegistry()
	g := metrics.NewRegistry(reg).Group("in", "in", 0)
	open := func() *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(append(clientMetricOpts(g, "source-reader"), kgo.SeedBrokers(f.ListenAddrs()...))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	role := map[string]string{"uid": "in", "role": "source-reader"}
	a := open()
	b := open()
	a.Close()
	if _, n := metricstest.Sum(t, reg, "splitflow_kafka_connects_total", role); n == 0 {
		t.Fatal("closing the first client removed the metrics of the second, still open")
	}
	if _, n := metricstest.Sum(t, reg, "splitflow_kafka_buffered_fetch_records", role); n != 1 {
		t.Errorf("%d series of buffered fetch records, want 1", n)
	}
	for _, name := range []string{"splitflow_kafka_buffered_fetch_records_total", "splitflow_kafka_buffered_produce_records_total"} {
		if _, n := metricstest.Sum(t, reg, name, nil); n != 0 {
			t.Errorf("%s is exported: a gauge must not be named _total", name)
		}
	}
	b.Close()
	for _, name := range []string{"splitflow_kafka_connects_total", "splitflow_kafka_buffered_fetch_records"} {
		if _, n := metricstest.Sum(t, reg, name, role); n != 0 {
			t.Errorf("%s outlives the role's last client", name)
		}
	}
	// A client of the role opened afterwards exports them again.
	c := open()
	defer c.Close()
	if _, n := metricstest.Sum(t, reg, "splitflow_kafka_connects_total", role); n == 0 {
		t.Error("a new client of the role exports no metrics")
	}
}

// The lag of a bounded split is measured against its stopping offset, and
// the split takes its lag along when it finishes; an unbounded split that
// has emitted everything has no lag.
func TestLagOfFinishedBoundedSplitIsGone(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceValues(t, cl, "t", 0, 0, 10)
	produceValues(t, cl, "t", 1, 0, 10)
	src := newTestSource(t, StringValues(), c.ListenAddrs())
	bounded, unbounded := TopicPartition{Topic: "t", Partition: 0}, TopicPartition{Topic: "t", Partition: 1}
	r := newTestReader(t, src, []Split{NewSplit(bounded, 0, 5), NewSplit(unbounded, 0, NoStoppingOffset)})
	rd := r.(*Reader[string])
	out := &collect[string]{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lag := rd.Lag()
		_, boundedLeft := lag[bounded]
		v, ok := lag[unbounded]
		if len(out.recs) == 15 && !boundedLeft && ok && v == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d records, lag %v: want no entry for the finished %s and 0 for %s", len(out.recs), lag, bounded, unbounded)
		}
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatal(err)
		}
		if st == connector.NothingAvailable {
			select {
			case <-r.Available():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A scrape's end offset list in flight against a broker that never answers
// does not hold Close: the task closes its reader on cancellation and
// failover, which a hung broker must not delay by a request's timeout.
func TestReaderCloseCancelsLagRefresh(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	src := newTestSource(t, StringValues(), []string{ln.Addr().String()})
	rd, err := src.CreateReader(&readerCtx{})
	if err != nil {
		t.Fatal(err)
	}
	r := rd.(*Reader[string])
	// A partition whose end no fetch has reported: the next scrape lists it.
	r.lag.track(TopicPartition{Topic: "t", Partition: 0}, 0, NoStoppingOffset)
	r.lagForMetrics()
	select {
	case c := <-accepted:
		accepted <- c
	case <-time.After(10 * time.Second):
		t.Fatal("the lag refresh never reached the broker")
	}
	began := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 500*time.Millisecond {
		t.Fatalf("Close took %v behind a lag refresh the broker never answers", took)
	}
}

// The end of a partition only moves forward: a fetch response sent before
// a ListOffsets answer may arrive after it with an older end.
func TestLagEndNeverMovesBack(t *testing.T) {
	tp := TopicPartition{Topic: "t", Partition: 0}
	var l lagTable
	l.track(tp, 0, NoStoppingOffset)
	l.listedEnd(tp, 10)
	l.fetched(tp, 7, -1, -1)
	if got := l.snapshot()[tp]; got != 10 {
		t.Fatalf("lag %d after an older fetched end, want 10", got)
	}
	l.fetched(tp, 12, -1, -1)
	if got := l.snapshot()[tp]; got != 12 {
		t.Fatalf("lag %d after a newer fetched end, want 12", got)
	}
}

// RemoveSplits drops the lag of the splits the reader held, and of no
// other: not of a split it ignored, nor when the base reader refused.
func TestReaderRemoveSplitsDropsOnlyHeldLag(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceValues(t, cl, "t", 0, 0, 3)
	produceValues(t, cl, "t", 1, 0, 3)
	src := newTestSource(t, StringValues(), c.ListenAddrs())
	held, ignored := TopicPartition{Topic: "t", Partition: 0}, TopicPartition{Topic: "t", Partition: 1}
	r := newTestReader(t, src, []Split{NewSplit(held, 0, NoStoppingOffset)}).(*Reader[string])
	// An entry the base reader does not hold, as a stand-in for one
	// another incarnation of the partition left.
	r.lag.track(ignored, 0, NoStoppingOffset)
	has := func(r *Reader[string], tp TopicPartition) bool {
		r.lag.mu.Lock()
		defer r.lag.mu.Unlock()
		_, ok := r.lag.m[tp]
		return ok
	}
	if err := r.RemoveSplits([]Split{NewSplit(held, 0, NoStoppingOffset), NewSplit(ignored, 0, NoStoppingOffset)}); err != nil {
		t.Fatal(err)
	}
	if has(r, held) || !has(r, ignored) {
		t.Fatalf("after RemoveSplits: entry of held %s %v (want gone), of ignored %s %v (want kept)", held, has(r, held), ignored, has(r, ignored))
	}

	r2 := newTestReader(t, src, []Split{NewSplit(held, 0, NoStoppingOffset)}).(*Reader[string])
	if err := r2.SourceReaderBase.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r2.RemoveSplits([]Split{NewSplit(held, 0, NoStoppingOffset)}); err == nil {
		t.Fatal("RemoveSplits on a closed reader succeeded")
	}
	if !has(r2, held) {
		t.Fatal("a failed RemoveSplits dropped the lag of the split")
	}
}

// The job's lag gauge (splitflow_source_lag_records{job_name}) is the sum
// of its input's per-partition lag and leaves the shuffle of a distributed
// job out: while the input is being read its value is the input topic's
// lag, and once the input is read and records wait in the shuffle behind
// a slow operator, it stays at the input's lag (0), not theirs. Each
// sample is compared within one gather.
func TestJobLagIsTheInputsLagWithoutTheShuffle(t *testing.T) {
	const in, out, job, slots, n = "lag-in", "lag-out", "lagjob", 2, 600
	seeds, cl := distributedCluster(t, in, out)
	// One record per batch: a fetch returns at least one whole batch, so
	// with the 1-byte fetches below the readers take one record per fetch,
	// and the slow map chained to them (10 ms a record) keeps the input's
	// lag up for seconds, long enough to be sampled on a loaded machine.
	// The map behind the shuffle does not: the shuffle topic takes what
	// the readers read, so with it alone the readers were through the
	// input before every partition's gauge was seen, in some runs. It is
	// slower still (20 ms), so that records then wait in the shuffle.
	for i := range n {
		r := &kgo.Record{Topic: in, Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%03d", i)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sh, err := NewShuffle(WithShuffleSinkOptions(WithBrokers(seeds...), WithLogger(quietLogger())),
		WithShuffleSourceOptions(WithBrokers(seeds...), WithLogger(quietLogger())))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	env := runtime.NewEnvironment(
		runtime.WithMetricsRegistry(reg),
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithLogger(quietLogger()),
		runtime.WithDistributed(runtime.Distributed{Job: job, Slots: slots, Shuffle: sh,
			Cluster: Connect(WithBrokers(seeds...)), SessionTimeout: 2 * time.Second}))
	// Small fetches keep the input's lag up for a while.
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(in), WithLogger(quietLogger()),
		WithClientOpts(kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1)))
	if err != nil {
		t.Fatal(err)
	}
	read := runtime.Map(runtime.FromSource(env, src, "values").UID("in"), func(v string) (string, error) {
		time.Sleep(10 * time.Millisecond)
		return v, nil
	}).UID("read")
	slow := runtime.Map(runtime.Rebalance(read), func(v string) (string, error) {
		time.Sleep(20 * time.Millisecond)
		return v, nil
	}).UID("slow")
	sink, err := NewSink(KeyValueSerializer(out, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce(out), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	runtime.SinkTo(slow, connector.Sink[string](sink)).UID(out)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, job) }()

	var sawInput, sawShuffleApart bool
	var last string
	for deadline := time.Now().Add(90 * time.Second); !sawInput || !sawShuffleApart; {
		select {
		case err := <-done:
			t.Fatalf("the job ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 90s: saw the job's lag equal to its input's while it was being read %v, and apart from the shuffle's %v; last sample %s",
				sawInput, sawShuffleApart, last)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var jobLag, inputLag, shuffleLag float64
		jobSeries, inputSeries := 0, 0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				v := m.GetGauge().GetValue()
				switch {
				case mf.GetName() == "splitflow_source_lag_records" && l["job_name"] == job:
					jobLag += v
					jobSeries++
				case mf.GetName() == "splitflow_kafka_source_lag_records" && l["topic"] == in:
					inputLag += v
					inputSeries++
				case mf.GetName() == "splitflow_kafka_source_lag_records" && strings.HasSuffix(l["topic"], ".shuffle"):
					shuffleLag += v
				}
			}
		}
		last = fmt.Sprintf("job %v (%d series), input %v (%d partitions), shuffle %v", jobLag, jobSeries, inputLag, inputSeries, shuffleLag)
		if jobSeries > 1 {
			t.Fatalf("%d series of splitflow_source_lag_records{job_name=%q}, want one per process: %s", jobSeries, job, last)
		}
		if jobSeries == 1 && inputSeries == 3 && jobLag == inputLag {
			sawInput = sawInput || jobLag > 0
			sawShuffleApart = sawShuffleApart || (jobLag == 0 && shuffleLag > 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("execute: %v", err)
	}
}
