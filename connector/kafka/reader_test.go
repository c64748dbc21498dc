package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/metrics"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type readerCtx struct {
	requests int
	ctx      context.Context // the task's; Background when nil
}

func (c *readerCtx) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}
func (c *readerCtx) SubtaskIndex() int                     { return 0 }
func (c *readerCtx) Parallelism() int                      { return 1 }
func (c *readerCtx) SendSplitRequest()                     { c.requests++ }
func (c *readerCtx) SendSourceEvent(connector.SourceEvent) {}

// collect is a ReaderOutput that keeps what it is given.
type collect[T any] struct {
	recs []T
	ts   []int64
}

func (o *collect[T]) Collect(v T) { o.recs = append(o.recs, v) }
func (o *collect[T]) CollectWithTimestamp(v T, ts int64) {
	o.recs, o.ts = append(o.recs, v), append(o.ts, ts)
}
func (o *collect[T]) EmitWatermark(connector.Watermark)                     {}
func (o *collect[T]) MarkIdle()                                             {}
func (o *collect[T]) MarkActive()                                           {}
func (o *collect[T]) CreateOutputForSplit(string) connector.SourceOutput[T] { return o }
func (o *collect[T]) ReleaseOutputForSplit(string)                          {}

// pollUntil drives a reader as a task would until stop says so, the input
// ends, or an error.
func pollUntil[T any](t *testing.T, r connector.SourceReader[T, Split], out *collect[T], stop func() bool) (connector.InputStatus, error) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !stop() {
		st, err := r.PollNext(out)
		if err != nil || st == connector.EndOfInput {
			return st, err
		}
		if st == connector.NothingAvailable {
			select {
			case <-r.Available():
			case <-deadline:
				t.Fatalf("reader stuck after %d records", len(out.recs))
			}
		}
	}
	return connector.MoreAvailable, nil
}

func newTestSource[T any](t *testing.T, deser Deserializer[T], seeds []string, opts ...SourceOption) *Source[T] {
	t.Helper()
	src, err := NewSource(deser, append([]SourceOption{WithBrokers(seeds...), WithTopics("t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func newTestReader[T any](t *testing.T, src *Source[T], splits []Split) connector.SourceReader[T, Split] {
	t.Helper()
	r, err := src.CreateReader(&readerCtx{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if len(splits) > 0 {
		if err := r.AddSplits(splits); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func produceValues(t *testing.T, cl *kgo.Client, topic string, partition int32, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(strconv.Itoa(i))}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A snapshot taken mid-stream restores exactly at the next record: the
// records read before it and after the restore are every record once
// (the task-goroutine rule at the connector level).
func TestReaderRestoreResumesAtNextRecord(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceValues(t, cl, "t", 0, 0, 60)
	produceValues(t, cl, "t", 1, 100, 140)
	src := newTestSource(t, StringValues(), c.ListenAddrs())
	splits := []Split{NewSplit(TopicPartition{"t", 0}, 0, NoStoppingOffset), NewSplit(TopicPartition{"t", 1}, 0, NoStoppingOffset)}

	r1 := newTestReader(t, src, splits)
	out1 := &collect[string]{}
	if _, err := pollUntil(t, r1, out1, func() bool { return len(out1.recs) >= 37 }); err != nil {
		t.Fatal(err)
	}
	snap, err := r1.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	_ = r1.Close()
	ser := SplitSerializer{}
	var restored []Split
	for _, s := range snap {
		b, _ := ser.Serialize(s)
		s2, err := ser.Deserialize(ser.Version(), b)
		if err != nil {
			t.Fatal(err)
		}
		restored = append(restored, s2)
	}
	r2 := newTestReader(t, src, restored)
	out2 := &collect[string]{}
	if _, err := pollUntil(t, r2, out2, func() bool { return len(out1.recs)+len(out2.recs) >= 100 }); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, v := range append(out1.recs, out2.recs...) {
		seen[v]++
	}
	for i := 0; i < 140; i++ {
		if i >= 60 && i < 100 {
			continue
		}
		if seen[strconv.Itoa(i)] != 1 {
			t.Fatalf("record %d seen %d times across the restore", i, seen[strconv.Itoa(i)])
		}
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct records, want 100", len(seen))
	}
}

// A bounded split on a transactional topic ends at its stopping offset,
// which a transaction marker may occupy; aborted records never come out.
func TestReaderBoundedOnTransactionalTopic(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 1})
	ctx := context.Background()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var want []string
	for txn := 0; txn < 4; txn++ {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			v := fmt.Sprintf("%d-%d", txn, i)
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if txn != 2 {
				want = append(want, v)
			}
		}
		commit := kgo.TryCommit
		if txn == 2 {
			commit = kgo.TryAbort
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(p)
	var stop int64
	for { // wait for the last marker
		lso, err := adm.ListCommittedOffsets(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := lso.Lookup("t", 0)
		if stop = o.Offset; stop == 24 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	src := newTestSource(t, StringValues(), c.ListenAddrs())
	r := newTestReader(t, src, []Split{NewSplit(TopicPartition{"t", 0}, 0, stop)})
	r.NotifyNoMoreSplits()
	out := &collect[string]{}
	st, err := pollUntil(t, r, out, func() bool { return false })
	if err != nil || st != connector.EndOfInput {
		t.Fatalf("bounded read ended with %v, %v", st, err)
	}
	if !slices.Equal(out.recs, want) {
		t.Fatalf("read %q, want the committed records %q", out.recs, want)
	}
}

// Empty bounded splits finish at once; the reader ends.
func TestReaderEmptySplitsFinish(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 2})
	src := newTestSource(t, StringValues(), c.ListenAddrs())
	r := newTestReader(t, src, []Split{NewSplit(TopicPartition{"t", 0}, 0, 0), NewSplit(TopicPartition{"t", 1}, 5, 5)})
	r.NotifyNoMoreSplits()
	out := &collect[string]{}
	st, err := pollUntil(t, r, out, func() bool { return false })
	if err != nil || st != connector.EndOfInput || len(out.recs) != 0 {
		t.Fatalf("empty splits: %v, %v, %d records", st, err, len(out.recs))
	}
}

var errBad = errors.New("not a number")

func intValues() Deserializer[int] {
	return ValueDeserializer(func(v []byte) (int, error) {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return 0, errBad
		}
		return n, nil
	})
}

// A record the deserializer rejects fails the reader naming its topic,
// partition and offset; with WithSkipBadRecords it is counted and dropped.
func TestReaderBadRecord(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 1})
	produceValues(t, cl, "t", 0, 0, 3)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("poison")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produceValues(t, cl, "t", 0, 3, 6)
	split := []Split{NewSplit(TopicPartition{"t", 0}, 0, 7)}

	r := newTestReader(t, newTestSource(t, intValues(), c.ListenAddrs()), split)
	out := &collect[int]{}
	_, err := pollUntil(t, r, out, func() bool { return false })
	var bad *BadRecordError
	if !errors.As(err, &bad) || bad.Topic != "t" || bad.Partition != 0 || bad.Offset != 3 || !errors.Is(err, errBad) {
		t.Fatalf("poison record: got %v, want a BadRecordError at t-0 offset 3", err)
	}

	r2 := newTestReader(t, newTestSource(t, intValues(), c.ListenAddrs(), WithSkipBadRecords()), split)
	r2.NotifyNoMoreSplits()
	out2 := &collect[int]{}
	st, err := pollUntil(t, r2, out2, func() bool { return false })
	if err != nil || st != connector.EndOfInput || !slices.Equal(out2.recs, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("skipping: %v, %v, %v", st, err, out2.recs)
	}
	if got := r2.(*Reader[int]).Skipped(); got != 1 {
		t.Fatalf("skipped %d records, want 1", got)
	}
}

// Each offsets initializer resolves to the offsets Kafka defines for it.
func TestOffsetsInitializers(t *testing.T) {
	_, cl := fakeCluster(t, map[string]int32{"t": 2})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		ts := time.UnixMilli(int64(1000 + i*100))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: 0, Value: []byte("x"), Timestamp: ts}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CommitOffsets(ctx, "g", kadm.OffsetsFromRecords(kgo.Record{Topic: "t", Partition: 0, Offset: 6})); err != nil {
		t.Fatal(err)
	}
	p0, p1 := TopicPartition{"t", 0}, TopicPartition{"t", 1}
	tps := []TopicPartition{p0, p1}
	for _, tc := range []struct {
		name   string
		o      Offsets
		want   map[TopicPartition]int64
		errSub string
	}{
		{"earliest", EarliestOffsets(), map[TopicPartition]int64{p0: 0, p1: 0}, ""},
		{"latest", LatestOffsets(), map[TopicPartition]int64{p0: 10, p1: 0}, ""},
		{"committed, reset latest", CommittedOffsets(ResetLatest), map[TopicPartition]int64{p0: 7, p1: 0}, ""},
		{"committed, reset none", CommittedOffsets(ResetNone), nil, "reset strategy is none"},
		{"timestamp", TimestampOffsets(1450), map[TopicPartition]int64{p0: 5, p1: 0}, ""},
		{"timestamp after all", TimestampOffsets(99999), map[TopicPartition]int64{p0: 10, p1: 0}, ""},
		{"specific, reset earliest", SpecificOffsets(map[TopicPartition]int64{p0: 3}, ResetEarliest), map[TopicPartition]int64{p0: 3, p1: 0}, ""},
		{"committed, group that never committed, reset earliest", CommittedOffsets(ResetEarliest), map[TopicPartition]int64{p0: 0, p1: 0}, ""},
	} {
		group := "g"
		if strings.Contains(tc.name, "never committed") {
			group = "new"
		}
		got, err := tc.o.resolve(ctx, adm, group, true, tps)
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for tp, w := range tc.want {
			if got[tp] != w {
				t.Errorf("%s: %s resolved to %d, want %d", tc.name, tp, got[tp], w)
			}
		}
	}
}

// Rule: a bounded split ends when nothing is left before its stopping
// offset, even when the offsets just before it are never delivered. Here
// they hold a transaction's records that another transaction, begun
// before the first was aborted, left below the last stable offset: the
// abort marker is past the stop, and a read_committed consumer drops the
// aborted records, so no record the reader sees reaches the stop. On a
// compacted topic the cleaner removing a partition's last records does
// the same (integration: TestBoundedReadOfCompactedTailEnds).
func TestReaderBoundedEndsWhenTheOffsetsBeforeItsStopAreNeverDelivered(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 1})
	ctx := context.Background()
	produceValues(t, cl, "t", 0, 0, 3)
	txn := func(id string) *kgo.Client {
		p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(id), kgo.DefaultProduceTopic("t"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aborted, open := txn("aborted"), txn("open")
	if err := aborted.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil { // offset 3
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil { // offset 4
		t.Fatal(err)
	}
	if err := aborted.EndTransaction(ctx, kgo.TryAbort); err != nil { // its marker at 5
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	for { // the last stable offset moves to the open transaction
		lso, err := adm.ListCommittedOffsets(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lso.Lookup("t", 0); o.Offset == 4 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	r := newTestReader(t, newTestSource(t, StringValues(), c.ListenAddrs()), []Split{NewSplit(TopicPartition{"t", 0}, 0, 4)})
	r.NotifyNoMoreSplits()
	out := &collect[string]{}
	st, err := pollUntil(t, r, out, func() bool { return false })
	if err != nil || st != connector.EndOfInput || !slices.Equal(out.recs, []string{"0", "1", "2"}) {
		t.Fatalf("bounded read ended with %v, %v after %q, want the end after 0, 1, 2", st, err, out.recs)
	}
}

// Rule: a quiet bounded split whose partition ends before its stopping
// offset goes on waiting: records may still come (a stop given past the
// end, an open transaction). The probe that ends a split with nothing left
// before its stop must not end this one.
func TestReaderBoundedSplitWaitsForRecordsBeforeItsStop(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 1})
	produceValues(t, cl, "t", 0, 0, 3)
	r := newTestReader(t, newTestSource(t, StringValues(), c.ListenAddrs()), []Split{NewSplit(TopicPartition{"t", 0}, 0, 6)})
	r.NotifyNoMoreSplits()
	out := &collect[string]{}
	if _, err := pollUntil(t, r, out, func() bool { return len(out.recs) == 3 }); err != nil {
		t.Fatal(err)
	}
	// Quiet for more than two probe intervals: the fetcher probes the
	// split, which must go on.
	time.Sleep(2*boundedQuietProbe + 500*time.Millisecond)
	produceValues(t, cl, "t", 0, 3, 6)
	st, err := pollUntil(t, r, out, func() bool { return false })
	if err != nil || st != connector.EndOfInput || !slices.Equal(out.recs, []string{"0", "1", "2", "3", "4", "5"}) {
		t.Fatalf("bounded read ended with %v, %v after %q, want every record up to the stop", st, err, out.recs)
	}
}

// A fetch hands the task at most WithMaxPollRecords records; the rest of
// the client's buffered fetch comes with the next fetches, so every record
// arrives once and in its partition's order. The bound is what keeps a
// reader's memory at about one fetch whatever the records' size.
func TestReaderHandsOverAtMostMaxPollRecordsAndLosesNone(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceValues(t, cl, "t", 0, 0, 150)
	produceValues(t, cl, "t", 1, 1000, 1090)
	src := newTestSource(t, StringValues(), c.ListenAddrs(), WithMaxPollRecords(7))
	sr, err := newSplitReader(&src.cfg, &lagTable{}, metrics.GroupOf(&readerCtx{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sr.Close() })
	splits := []Split{NewSplit(TopicPartition{"t", 0}, 0, NoStoppingOffset), NewSplit(TopicPartition{"t", 1}, 0, NoStoppingOffset)}
	if err := sr.HandleSplitsChanges(base.SplitsChange[Split]{Added: splits}); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	n, fetches := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for n < 240 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := sr.Fetch(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rb := b.(*base.RecordsBySplits[*kgo.Record])
		if rb.Len() > 7 {
			t.Fatalf("a fetch handed over %d records; WithMaxPollRecords(7)", rb.Len())
		}
		fetches++
		for id, ok := rb.NextSplit(); ok; id, ok = rb.NextSplit() {
			for rec, ok := rb.NextRecordFromSplit(); ok; rec, ok = rb.NextRecordFromSplit() {
				got[id] = append(got[id], string(rec.Value))
				n++
			}
		}
		rb.Recycle()
	}
	for i, want := range [][2]int{{0, 150}, {1000, 1090}} {
		id := splits[i].SplitID()
		var exp []string
		for v := want[0]; v < want[1]; v++ {
			exp = append(exp, strconv.Itoa(v))
		}
		if !slices.Equal(got[id], exp) {
			t.Fatalf("split %s: got %d records %v..., want %d in order", id, len(got[id]), got[id][:min(len(got[id]), 10)], len(exp))
		}
	}
	if fetches < 240/7 {
		t.Fatalf("%d fetches for 240 records at most 7 each", fetches)
	}
}

func TestWithMaxPollRecordsRefusesLessThanOne(t *testing.T) {
	_, err := NewSource(StringValues(), WithBrokers("localhost:9092"), WithTopics("t"), WithMaxPollRecords(0))
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "WithMaxPollRecords") {
		t.Fatalf("WithMaxPollRecords(0): %v, want an invalid configuration naming the option", err)
	}
}
