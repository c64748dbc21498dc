package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
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
		recs, err := readVisible(ctx, seeds, topic)
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

// settleTime is how long readVisible waits for transactions to end: EndTxn
// returns before the coordinator has written the markers.
const settleTime = time.Second

// readVisible returns what a read_committed consumer of topic sees now:
// every partition up to its last stable offset. A transaction still open
// after settleTime is one a stopped or failed job left prepared for its
// next run to commit or abort (integration/committed.Read, which waits for
// it, would wait until the transaction timeout); the records after it are
// not visible yet, and the suite's checks of a stopped job ask only for a
// subset of the input.
func readVisible(ctx context.Context, seeds []string, topic string) ([]*kgo.Record, error) {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ends := map[int32]int64{}
	for deadline := time.Now().Add(settleTime); ; {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hwm, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2, lso.Error(), hwm.Error()); err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		settled := true
		lso.Each(func(l kadm.ListedOffset) {
			if h, _ := hwm.Lookup(topic, l.Partition); h.Offset != l.Offset {
				settled = false
			}
			ends[l.Partition] = l.Offset
		})
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	pos := map[int32]int64{}
	var out []*kgo.Record
	for {
		done := true
		for p, end := range ends {
			if pos[p] < end {
				done = false
			}
		}
		if done {
			return out, nil
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read %s committed: stuck at %v, want %v: %w", topic, pos, ends, ctx.Err())
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("read %s committed: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return // past the last stable offset read: seen later, not now
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
}
