package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/watermark"
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
// offset 7, goes in the same pass (a cleaner drops aborted records), and
// the setup checks that the log holds nothing at offsets 6 and 7, even
// for a consumer that reads aborted records. (A read_committed consumer
// would skip it anyway; the kfake test
// TestReaderBoundedEndsWhenTheOffsetsBeforeItsStopAreNeverDelivered shows
// that case alone.)
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
	// The log itself holds nothing more before the stop: a consumer that
	// reads aborted records too finds none there.
	var inLog []int64
	for _, r := range readTableRows(t, b, topic, map[int32]int64{0: 8}, kgo.ReadUncommitted())[0] {
		inLog = append(inLog, r.Offset)
	}
	if !slices.Equal(inLog, tablePartition0Compacted) {
		t.Fatalf("partition 0 of %s holds offsets %v before 8 read uncommitted, want %v: the cleaner left them", topic, inLog, tablePartition0Compacted)
	}
	all := readTableRows(t, b, topic, lso, kgo.ReadCommitted())
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
		recs := readTableRows(t, b, topic, map[int32]int64{0: stop, 1: 0}, kgo.ReadCommitted())[p]
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

// readTableRows reads topic as a consumer of isolation iso up to stops and
// returns its records by partition. It cannot know where a compacted
// partition's readable records end, so it reads until the fetches have
// been empty for a second.
func readTableRows(t *testing.T, b *kafkatest.Broker, topic string, stops map[int32]int64, iso kgo.IsolationLevel) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(iso), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
			if !errors.Is(err, context.DeadlineExceeded) {
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
	}), kafka.WithBrokers(b.Addrs()...), kafka.WithLogger(testLogger(t)), kafka.WithAtLeastOnce())
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

// streamRecord is a record of the stream joined with the table: an id
// and the table's key it looks up.
type streamRecord struct {
	ID  int64
	Key string
}

// tableValueAt is the table's value of key at time at, from the rows
// read: the latest update at or before at (of two at one time, the later
// in the partition), and whether there is one (none yet, or deleted).
func tableValueAt(rows map[int32][]*kgo.Record, key string, at int64) (int, bool) {
	var latest *kgo.Record
	for _, recs := range rows {
		for _, r := range recs {
			if string(r.Key) == key && r.Timestamp.UnixMilli() <= at &&
				(latest == nil || r.Timestamp.UnixMilli() >= latest.Timestamp.UnixMilli()) {
				latest = r
			}
		}
	}
	if latest == nil || latest.Value == nil {
		return 0, false
	}
	v, _ := strconv.Atoi(string(latest.Value))
	return v, true
}

// The table join on a real broker, exactly once: the table is the
// compacted topic of newCompactedTable (versions, deletions, a partition
// compacted down to one row with its tail removed, one not compacted, a
// transaction open), read from its earliest offsets to its end through
// kafka.TableUpdates; the stream is a topic of ids, each looking up one of
// the table's keys at its record's time, spread over the table's changes.
// One job joins the stream with the table twice, inner (TableJoin) and
// left (LeftTableJoin), into two topics through exactly-once sinks, with
// checkpoints every 50 ms and a failure injected in the left join's
// function. A read_committed consumer then finds every id of the stream
// once in the left join's output with the value its key had at the id's
// time, or none, and in the inner join's output exactly the ids that had
// a value, with it. The job ends by itself: the bounded table source
// ends although partition 0's last offsets before its stop are gone.
func TestTableJoinOfCompactedTopicExactlyOnce(t *testing.T) {
	b := kafkatest.Get(t)
	table := newCompactedTable(t, b)
	stream := b.CreateTopic(t, "table-stream", 2, nil)
	innerOut := b.CreateTopic(t, "table-inner", 2, nil)
	leftOut := b.CreateTopic(t, "table-left", 2, nil)

	// Ids every 14 ms from the base time to 16.8 s: b, d and f change
	// within the first second (partition 1), a holds 3 from 10 s on, c
	// and e have no value after compaction.
	const n = 1200
	keys := []string{"a", "b", "c", "d", "e", "f"}
	recs := make([]streamRecord, n)
	at := func(id int64) int64 { return table.base + id*14 }
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(stream))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range recs {
		id := int64(i)
		recs[i] = streamRecord{ID: id, Key: keys[i%len(keys)]}
		cl.Produce(ctx, &kgo.Record{Partition: int32(id % 2), Key: []byte(recs[i].Key),
			Value: strconv.AppendInt(nil, id, 10), Timestamp: time.UnixMilli(at(id))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("write the stream: %v", err)
	}
	wantLeft, wantInner := map[int64]string{}, map[int64]string{}
	for _, r := range recs {
		if v, ok := tableValueAt(table.rows, r.Key, at(r.ID)); ok {
			wantLeft[r.ID] = strconv.Itoa(v)
			wantInner[r.ID] = strconv.Itoa(v)
		} else {
			wantLeft[r.ID] = "none"
		}
	}
	// The ids meet every version and deletion the table holds: none
	// before a key's first version, each of b's, d's and f's versions,
	// b deleted and set again, a only from its surviving version on.
	met := map[string]bool{}
	for _, r := range recs {
		met[r.Key+"="+wantLeft[r.ID]] = true
	}
	for _, kv := range []string{"a=none", "a=3", "b=none", "b=1", "b=2", "b=3", "c=none", "d=1", "d=none", "e=none", "f=1", "f=2"} {
		if !met[kv] {
			t.Fatalf("no id meets %s: the stream misses the table's changes", kv)
		}
	}

	logger := testLogger(t)
	tableSrc, err := kafka.NewSource(kafka.TableUpdates(
		func(k []byte) (string, error) { return string(k), nil },
		func(v []byte) (int, error) { return strconv.Atoi(string(v)) }),
		kafka.WithBrokers(b.Addrs()...), kafka.WithTopics(table.topic), kafka.WithLogger(logger),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithBounded(kafka.LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	streamSrc, err := kafka.NewSource(kafka.DeserializerFunc[streamRecord](func(r *kgo.Record) (streamRecord, error) {
		id, err := strconv.ParseInt(string(r.Value), 10, 64)
		return streamRecord{ID: id, Key: string(r.Key)}, err
	}), kafka.WithBrokers(b.Addrs()...), kafka.WithTopics(stream), kafka.WithLogger(logger),
		kafka.WithBounded(kafka.LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	sink := func(topic string) *kafka.Sink[string] {
		s, err := kafka.NewSink(kafka.KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
			kafka.WithBrokers(b.Addrs()...), kafka.WithLogger(logger),
			kafka.WithExactlyOnce(topic+"-txn"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	var joined, failed, restarts, checkpoints atomic.Int64
	failAt := int64(n / 2)
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(logger),
		runtime.WithCheckpointInterval(50*time.Millisecond),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 50*time.Millisecond)),
		runtime.WithJobListener(runtime.JobListener{
			CheckpointCompleted: func(int64) { checkpoints.Add(1) },
			Restarting:          func(int, error) { restarts.Add(1) },
		}))
	rows := runtime.FromSource(env, tableSrc, "table", runtime.WithWatermarks(watermark.ForMonotonousTimestamps[runtime.TableUpdate[string, int]]())).UID("table")
	ids := runtime.KeyBy(runtime.FromSource(env, streamSrc, "stream", runtime.WithWatermarks(watermark.ForMonotonousTimestamps[streamRecord]())).UID("stream"),
		func(r streamRecord) string { return r.Key })
	left := runtime.LeftTableJoin(ids, rows, func(r streamRecord, v int, ok bool) (string, error) {
		if joined.Add(1) == failAt {
			failed.Add(1)
			return "", fmt.Errorf("injected failure at the %dth join (id %d)", failAt, r.ID)
		}
		if !ok {
			return fmt.Sprintf("%d:none", r.ID), nil
		}
		return fmt.Sprintf("%d:%d", r.ID, v), nil
	}).UID("left")
	inner := runtime.TableJoin(ids, rows, func(r streamRecord, v int) (string, error) {
		return fmt.Sprintf("%d:%d", r.ID, v), nil
	}).UID("inner")
	runtime.SinkTo(left, sink(leftOut)).UID("left-out")
	runtime.SinkTo(inner, sink(innerOut)).UID("inner-out")

	jobCtx, jobCancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer jobCancel()
	began := time.Now()
	if err := env.Execute(jobCtx, "table join"); err != nil || jobCtx.Err() != nil {
		t.Fatalf("the job did not end by itself within 90s: %v (context: %v)", err, jobCtx.Err())
	}
	if failed.Load() != 1 || restarts.Load() != 1 {
		t.Fatalf("%d injected failures and %d restarts, want 1 each", failed.Load(), restarts.Load())
	}
	for _, out := range []struct {
		name  string
		topic string
		want  map[int64]string
	}{{"left", leftOut, wantLeft}, {"inner", innerOut, wantInner}} {
		got := map[int64]string{}
		var dup, wrong int
		recs := kafkatest.ReadCommitted(t, b.Addrs(), out.topic, 60*time.Second)
		for _, r := range recs {
			idStr, v, _ := strings.Cut(string(r.Value), ":")
			id, err := strconv.ParseInt(idStr, 10, 64)
			switch want, ok := out.want[id]; {
			case err != nil || !ok:
				wrong++
				t.Errorf("%s join: unexpected output %q", out.name, r.Value)
			case got[id] != "":
				dup++
			case v != want:
				wrong++
				t.Errorf("%s join: id %d joined with %s, want %s", out.name, id, v, want)
			}
			got[id] = v
		}
		lost := 0
		for id := range out.want {
			if _, ok := got[id]; !ok {
				lost++
			}
		}
		t.Logf("SUMMARY scenario=%q in=%d out=%d distinct=%d lost=%d duplicated=%d wrong=%d checkpoints=%d restarts=%d took=%s",
			"table join of a compacted topic, "+out.name, n, len(recs), len(got), lost, dup, wrong, checkpoints.Load(), restarts.Load(),
			time.Since(began).Round(time.Millisecond))
		if lost != 0 || dup != 0 || wrong != 0 {
			t.Errorf("%s join: not exactly once with the values as of each record's time: %d records, want %d; %d lost, %d duplicated, %d wrong",
				out.name, len(recs), len(out.want), lost, dup, wrong)
		}
	}
}
