package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tableRow is one record written to the table's compacted topic: key set
// to value at time at (milliseconds after the test's base time), or
// deleted (a tombstone).
type tableRow struct {
	key     string
	value   int
	deleted bool
	at      int64
}

// The table's segments roll by record time: the broker rolls a segment
// when a record's timestamp is more than segment.ms past the first one's,
// so the timestamps below decide which records the cleaner may compact.
const tableSegmentMs = 1000

// Partition 0 rolls at every record (2 s apart), so every record is in a
// segment of its own that the cleaner compacts once a later one exists:
// a's versions collapse to a=3 (offset 5), c's and e's tombstones, once
// past delete.retention.ms, go with every version of c and e. The last
// of them, e's tombstone at offset 6, was the partition's last record
// before the stopping offset.
var tablePartition0 = []tableRow{
	{"a", 1, false, 0},
	{"c", 1, false, 2000},
	{"a", 2, false, 4000},
	{"e", 1, false, 6000},
	{"c", 0, true, 8000},
	{"a", 3, false, 10000},
	{"e", 0, true, 12000},
}

// Partition 1's records lie within one segment.ms of each other, so its
// only segment stays active and is never compacted: every version and
// tombstone of b, d and f is read.
var tablePartition1 = []tableRow{
	{"b", 1, false, 100},
	{"d", 1, false, 200},
	{"b", 2, false, 400},
	{"d", 0, true, 500},
	{"f", 1, false, 600},
	{"b", 0, true, 700},
	{"b", 3, false, 800},
	{"f", 2, false, 900},
}

// tablePartition0Compacted is what a read_committed consumer of
// partition 0 reads once the broker has compacted it: a=3 at offset 5.
var tablePartition0Compacted = []int64{5}

// compactedTable is a compacted topic of two partitions written with
// tablePartition0 and tablePartition1, whose partition 0 the broker has
// compacted, its tail included, and on which a transaction stays open
// until the test ends. Its last stable offset, where a bounded
// read_committed source stops, is the open transaction's first offset,
// 8; the records a consumer gets end at offset 5.
//
// Kafka never compacts a partition's active segment, so a tail that is
// removed needs a later segment, and a stopping offset that is not past
// the records of that later segment needs an open transaction: the table
// a running exactly-once job writes, which always has one open, as soon
// as its last committed records were deletions. Removing a tombstone
// takes two passes of the cleaner (the first sets its delete horizon),
// and the second only runs when the partition has something new to
// clean before the open transaction: here a transaction that is aborted
// after the open one began, so its aborted record lies before the
// stopping offset and its abort marker after it. That record, a=98 at
// offset 7, is never read: the consumer drops aborted records, and the
// cleaner removes them.
type compactedTable struct {
	topic string
	base  int64 // the time the rows' at count from, Unix milliseconds
	// stops are the partitions' last stable offsets: where a bounded
	// source stops.
	stops map[int32]int64
	// rows are what a read_committed consumer reads up to stops, by
	// partition, in offset order.
	rows map[int32][]*kgo.Record
}

func newCompactedTable(t *testing.T, b *kafkatest.Broker) compactedTable {
	t.Helper()
	fastCleaner(t, b)
	str := func(s string) *string { return &s }
	topic := b.CreateTopic(t, "table", 2, map[string]*string{
		"cleanup.policy":            str("compact"),
		"segment.ms":                str(strconv.Itoa(tableSegmentMs)),
		"min.cleanable.dirty.ratio": str("0.01"),
		"min.compaction.lag.ms":     str("0"),
		"delete.retention.ms":       str("100"),
	})
	// Record times well in the past but within what the broker accepts
	// (log.message.timestamp.before.max.ms is unlimited by default).
	base := time.Now().Add(-30 * time.Minute).UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	record := func(p int32, key, value string, at int64) *kgo.Record {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Timestamp: time.UnixMilli(base + at)}
		if value != "" {
			r.Value = []byte(value)
		}
		return r
	}

	// Not idempotent: the cleaner keeps a producer's last batch for its
	// sequence numbers, and the test wants the tail gone, not kept empty.
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	for p, rows := range [][]tableRow{tablePartition0, tablePartition1} {
		for _, r := range rows {
			v := ""
			if !r.deleted {
				v = strconv.Itoa(r.value)
			}
			// One at a time: a batch rolls no segment between its
			// records.
			if err := cl.ProduceSync(ctx, record(int32(p), r.key, v, r.at)).FirstErr(); err != nil {
				t.Fatalf("write table row %+v: %v", r, err)
			}
		}
	}
	txnClient := func(id string) *kgo.Client {
		c := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(topic+id),
			kgo.TransactionTimeout(5*time.Minute))
		if err := c.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = c.EndTransaction(ctx, kgo.TryAbort)
		})
		return c
	}

	// The aborted transaction's record rolls partition 0's segment, so
	// the first pass of the cleaner compacts the rows.
	aborted := txnClient("-aborted")
	if err := aborted.ProduceSync(ctx, record(0, "a", "98", 14000)).FirstErr(); err != nil {
		t.Fatalf("write the aborted transaction's record: %v", err)
	}
	began := time.Now()
	// With the cleaner looking every 100 ms, c's tombstone may be gone
	// already: it got its horizon in a pass while later rows came.
	waitReadable(t, b, topic, 0, 7, "a first pass (the older versions of a, c and e gone)", []int64{4, 5, 6}, []int64{5, 6})

	// The open transaction's record rolls the segment again, and the
	// abort makes the aborted record cleanable: the second pass removes
	// it and the tombstones, whose horizon has passed.
	open := txnClient("-open")
	if err := open.ProduceSync(ctx, record(0, "a", "99", 16000)).FirstErr(); err != nil {
		t.Fatalf("write the open transaction's record: %v", err)
	}
	if err := aborted.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("abort: %v", err)
	}
	// EndTxn returns before the abort marker is written; the last stable
	// offset moves to the open transaction once it is.
	adm := b.Admin(t)
	lso, _ := offsets(t, adm, topic)
	for wait := time.Now(); lso[0] != 8 || lso[1] != int64(len(tablePartition1)); lso, _ = offsets(t, adm, topic) {
		if time.Since(wait) > 30*time.Second {
			t.Fatalf("last stable offsets %v, want 0:8 1:%d", lso, len(tablePartition1))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows := waitReadable(t, b, topic, 0, 8, "the second pass (the tombstones gone)", tablePartition0Compacted)
	all := readTableRows(t, b, topic, lso)
	if n := len(all[1]); n != len(tablePartition1) {
		t.Fatalf("partition 1 of %s holds %d records, want all %d (it must not be compacted)", topic, n, len(tablePartition1))
	}
	all[0] = rows
	t.Logf("partition 0 of %s compacted in %s: offsets %v of 0..6 remain, stopping offset 8", topic,
		time.Since(began).Round(time.Millisecond), tablePartition0Compacted)
	return compactedTable{topic: topic, base: base, stops: lso, rows: all}
}

// waitReadable waits until partition p of topic, read as a read_committed
// consumer up to stop, holds the records at one of the offset lists
// want, and returns them.
func waitReadable(t *testing.T, b *kafkatest.Broker, topic string, p int32, stop int64, what string, want ...[]int64) []*kgo.Record {
	t.Helper()
	began := time.Now()
	for {
		recs := readTableRows(t, b, topic, map[int32]int64{0: stop, 1: 0})[p]
		var got []int64
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		for _, w := range want {
			if slices.Equal(got, w) {
				return recs
			}
		}
		if time.Since(began) > 60*time.Second {
			t.Fatalf("the broker's cleaner did not do %s on %s[%d] within 60s: offsets %v readable, want %v", what, topic, p, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fastCleaner makes the broker's log cleaner look for work every 100 ms
// instead of every 15 s (log.cleaner.backoff.ms, a dynamic cluster-wide
// setting), until the test ends. Where the broker refuses, the test waits
// for the default.
func fastCleaner(t *testing.T, b *kafkatest.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := b.Admin(t)
	v := "100"
	set := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.cleaner.backoff.ms", Value: &v}}
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Logf("log.cleaner.backoff.ms stays at its default: %v", err)
		return
	}
	ids := meta.Brokers.NodeIDs()
	resp, err := adm.AlterBrokerConfigsState(ctx, set, ids...)
	for _, r := range resp {
		err = errors.Join(err, r.Err)
	}
	if err != nil {
		t.Logf("log.cleaner.backoff.ms stays at its default: %v", err)
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.AlterBrokerConfigsState(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "log.cleaner.backoff.ms"}}, ids...); err != nil {
			t.Logf("reset log.cleaner.backoff.ms: %v", err)
		}
	})
}

// readTableRows reads topic as a read_committed consumer up to stops and
// returns its records by partition. It cannot know where a compacted
// partition's readable records end, so it reads until the fetches have
// been empty for a second.
func readTableRows(t *testing.T, b *kafkatest.Broker, topic string, stops map[int32]int64) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rows := map[int32][]*kgo.Record{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachError(func(_ string, p int32, err error) {
			if ctx.Err() == nil {
				t.Fatalf("read %s[%d]: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Offset < stops[r.Partition] {
				rows[r.Partition] = append(rows[r.Partition], r)
			}
		})
		if n == 0 {
			return rows
		}
	}
}

// A bounded read_committed source of a compacted partition whose last
// offsets before the stopping offset were removed ends: the partition's
// remaining records are read and the split finishes, though no record at
// the stopping offset's predecessor ever comes.
func TestBoundedReadOfCompactedTailEnds(t *testing.T) {
	b := kafkatest.Get(t)
	table := newCompactedTable(t, b)
	output := b.CreateTopic(t, "table-copy", 1, nil)

	src, err := kafka.NewSource(kafka.Records(), kafka.WithBrokers(b.Addrs()...), kafka.WithTopics(table.topic),
		kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer(output, func(r *kgo.Record) ([]byte, []byte, error) {
		return r.Key, []byte(fmt.Sprintf("%d/%d", r.Partition, r.Offset)), nil
	}), kafka.WithBrokers(b.Addrs()...), kafka.WithLogger(testLogger(t)), kafka.WithDeliveryGuarantee(kafka.AtLeastOnce))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(testLogger(t)))
	runtime.SinkTo(runtime.FromSource(env, src, "table").UID("table"), sink).UID("copy")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	// A cancelled job returns without an error: the context says whether
	// it ended by itself.
	if err := env.Execute(ctx, "copy table"); err != nil || ctx.Err() != nil {
		t.Fatalf("the bounded job over the compacted table did not end by itself within 60s: %v (context: %v)", err, ctx.Err())
	}
	var got, want []string
	for _, r := range kafkatest.ReadCommitted(t, b.Addrs(), output, 30*time.Second) {
		got = append(got, string(r.Value))
	}
	for p, rows := range table.rows {
		for _, r := range rows {
			want = append(want, fmt.Sprintf("%d/%d", p, r.Offset))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("copied %v, want every readable record once: %v", got, want)
	}
	t.Logf("bounded job over the compacted table ended in %s, %d records", time.Since(began).Round(time.Millisecond), len(got))
}
