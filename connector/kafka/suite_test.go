package kafka

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// suiteSource writes the check's input round-robin into three partitions
// of a topic on a fresh kfake cluster and reads it back bounded at the
// end offsets.
func suiteSource(t *testing.T, input []string) connector.Source[string, Split, EnumeratorState] {
	const topic = "suite-in"
	recs := make([]*kgo.Record, len(input))
	for i, v := range input {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(v)}
	}
	seeds := suiteCluster(t, topic, 3, recs)
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// suiteCluster starts a kfake cluster that lives as long as the check,
// creates topic on it and writes recs, and returns its seed addresses.
//
// The client that sets the cluster up is closed before the jobs run. A
// client left open goes on talking to the cluster by itself (a metadata
// refresh MetadataMinAge after its first produce, telemetry pushes), and
// kfake reads each request of a connection on a new goroutine: one that
// came during a job is a goroutine the suite's leak check did not see
// before the job, and it stays until the client is closed, so the check
// would blame the job for it.
func suiteCluster(t *testing.T, topic string, partitions int32, recs []*kgo.Record) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if len(recs) > 0 {
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatalf("write the input: %v", err)
		}
	}
	return seeds
}

// suiteSink is an exactly-once KafkaSink into a two-partition topic of a
// fresh kfake cluster, read back as a read_committed consumer sees it.
func suiteSink(t *testing.T) (connector.TwoPhaseCommittingSink[string, txn.Committable], connectortest.ReadBack[string]) {
	const topic = "suite-out"
	seeds := suiteCluster(t, topic, 2, nil)
	ser := KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	sink, err := NewSink[string](ser, WithBrokers(seeds...), WithExactlyOnce("suite-"+strconv.FormatInt(time.Now().UnixNano(), 36)))
	if err != nil {
		t.Fatal(err)
	}
	read := func() ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		recs, err := committed.Visible(ctx, seeds, topic, settleTime)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(recs))
		for i, r := range recs {
			out[i] = string(r.Value)
		}
		return out, nil
	}
	return sink, read
}

// KafkaSource into the exactly-once KafkaSink, both on kfake: an
// exactly-once pair under the connector suite's failures, cancels,
// crashes and rescales.
func TestSuiteKafkaSourceKafkaSink(t *testing.T) {
	connectortest.Run(t, connectortest.Pair[string]{
		Source:    connectortest.NewSource(suiteSource),
		Sink:      connectortest.NewTwoPhaseSink(suiteSink),
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}

// The suite's fixtures close the clients they set their clusters up
// with before they return, so no client of theirs is open while the jobs
// run: what such a client sends by itself during a job is served by a
// kfake goroutine the leak check blames on the job.
func TestSuiteFixturesKeepNoClientOpen(t *testing.T) {
	before := openClients()
	suiteSource(t, []string{"a", "b", "c"})
	suiteSink(t)
	// Close returns once a client's metadata loop ended; the goroutine
	// may still be on its way out.
	deadline := time.Now().Add(5 * time.Second)
	n := openClients()
	for n > before && time.Now().Before(deadline) {
		runtime.Gosched()
		n = openClients()
	}
	if n > before {
		t.Fatalf("%d kgo clients the fixtures opened are still open after they returned", n-before)
	}
}

// openClients counts the process's kgo clients by their metadata loops,
// which run from NewClient until Close.
func openClients() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "kgo.(*Client).updateMetadataLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// settleTime is how long the read-back waits for transactions to end:
// EndTxn returns before the coordinator has written the markers. A
// transaction still open after it is one a stopped or failed job left
// prepared for its next run; the suite's checks of a stopped job ask only
// for a subset of the input.
const settleTime = time.Second
