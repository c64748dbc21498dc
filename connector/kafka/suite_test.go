package kafka

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// suiteSource writes the check's input round-robin into three partitions
// of a topic on a fresh kfake cluster and reads it back bounded at the
// end offsets.
func suiteSource(t *testing.T, input []string) connector.Source[string, Split, EnumeratorState] {
	const topic = "suite-in"
	// The cluster and its client live as long as the check; the suite's
	// leak check counts only what its jobs leave.
	c, cl := fakeCluster(t, map[string]int32{topic: 3})
	seeds := c.ListenAddrs()
	recs := make([]*kgo.Record, len(input))
	for i, v := range input {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(v)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("write the input: %v", err)
	}
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// suiteSink is an exactly-once KafkaSink into a two-partition topic of a
// fresh kfake cluster, read back as a read_committed consumer sees it.
func suiteSink(t *testing.T) (connector.TwoPhaseCommittingSink[string, txn.Committable], connectortest.ReadBack[string]) {
	const topic = "suite-out"
	c, _ := fakeCluster(t, map[string]int32{topic: 2})
	seeds := c.ListenAddrs()
	ser := KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	sink, err := NewSink[string](ser, WithBrokers(seeds...), WithDeliveryGuarantee(ExactlyOnce),
		WithTransactionalIDPrefix("suite-"+strconv.FormatInt(time.Now().UnixNano(), 36)))
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

// settleTime is how long the read-back waits for transactions to end:
// EndTxn returns before the coordinator has written the markers. A
// transaction still open after it is one a stopped or failed job left
// prepared for its next run; the suite's checks of a stopped job ask only
// for a subset of the input.
const settleTime = time.Second
