package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deleteRecordsBefore moves the log start of t-0 to offset, as retention
// or DeleteRecords does.
func deleteRecordsBefore(t *testing.T, cl *kgo.Client, offset int64) {
	t.Helper()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: offset, LeaderEpoch: -1})
	resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records of t-0 below %d: %v", offset, err)
	}
}

// checkOutOfRange checks that err reports t-0's split at offset, below a
// log that starts at logStart, as an error no restart can fix.
func checkOutOfRange(t *testing.T, err error, offset, logStart int64) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want the split at offset %d of t-0 below the log start %d reported", offset, logStart)
	}
	if !errors.Is(err, kerr.OffsetOutOfRange) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("error %v: want one matching kerr.OffsetOutOfRange and connector.ErrInvalidConfiguration", err)
	}
	for _, s := range []string{"t-0", "offset " + strconv.FormatInt(offset, 10), "starts at " + strconv.FormatInt(logStart, 10), "WithOutOfRangeReset"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
}

// A split restored at an offset that retention has since deleted fails
// the reader with the partition and the gap. Before, franz-go's default
// reset moved the split to the log start without a word: the restored
// reader went on at offset 100, and records 37 to 99 never reached the
// output.
func TestRestoredOffsetBelowLogStartFailsTheReader(t *testing.T) {
	_, cl := fakeCluster(t, map[string]int32{"t": 1})
	produceValues(t, cl, "t", 0, 0, 200)
	src := newTestSource(t, StringValues(), seedsOf(cl))
	r1 := newTestReader(t, src, []Split{NewSplit(TopicPartition{"t", 0}, 0, NoStoppingOffset)})
	out1 := &collect[string]{}
	if _, err := pollUntil(t, r1, out1, func() bool { return len(out1.recs) >= 37 }); err != nil {
		t.Fatal(err)
	}
	snap, err := r1.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	_ = r1.Close()
	next := snap[0].StartingOffset

	deleteRecordsBefore(t, cl, 100)
	r2 := newTestReader(t, src, snap)
	out2 := &collect[string]{}
	_, err = pollUntil(t, r2, out2, func() bool { return len(out2.recs) > 0 })
	if len(out2.recs) > 0 {
		t.Fatalf("the restored reader read %q first, after records 0..%d: records %d..99 were skipped", out2.recs[0], next-1, next)
	}
	checkOutOfRange(t, err, next, 100)
}

// A reader that retention overtakes while it runs fails the same way;
// before, the client reset to the log start and the reader went on past
// the gap.
func TestReaderOvertakenByRetentionFails(t *testing.T) {
	_, cl := fakeCluster(t, map[string]int32{"t": 1})
	produceValues(t, cl, "t", 0, 0, 200)
	// One record a fetch, so the client has fetched little beyond what
	// was read when the records are deleted.
	src := newTestSource(t, StringValues(), seedsOf(cl), WithClientOpts(kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1)))
	r := newTestReader(t, src, []Split{NewSplit(TopicPartition{"t", 0}, 0, NoStoppingOffset)})
	out := &collect[string]{}
	if _, err := pollUntil(t, r, out, func() bool { return len(out.recs) >= 10 }); err != nil {
		t.Fatal(err)
	}
	deleteRecordsBefore(t, cl, 150)
	_, err := pollUntil(t, r, out, func() bool { return len(out.recs) > 0 && out.recs[len(out.recs)-1] == "199" })
	for i, v := range out.recs {
		if v != strconv.Itoa(i) {
			t.Fatalf("record %d is %s: the reader jumped over the deleted records", i, v)
		}
	}
	if err == nil {
		t.Fatalf("the reader read %d records and no error; want the deleted ones reported", len(out.recs))
	}
	var oor *OffsetOutOfRangeError
	if !errors.As(err, &oor) || oor.Offset < int64(len(out.recs)) || oor.Offset >= 150 {
		t.Fatalf("error %v: want an *OffsetOutOfRangeError at the reader's position, after the %d records read", err, len(out.recs))
	}
	checkOutOfRange(t, err, oor.Offset, 150)
}

// seedsOf returns the seed brokers cl was made with.
func seedsOf(cl *kgo.Client) []string { return cl.OptValue(kgo.SeedBrokers).([]string) }

// rangeJob runs a bounded job on t-0 from offset 0 after the records
// below 50 of its 200 were deleted, with checkpoints and the default
// restart strategy, and returns what it wrote and Execute's error.
func rangeJob(t *testing.T, opts ...SourceOption) (*collectSink, error) {
	t.Helper()
	_, cl := fakeCluster(t, map[string]int32{"t": 1})
	produceValues(t, cl, "t", 0, 0, 200)
	deleteRecordsBefore(t, cl, 50)
	src := newTestSource(t, StringValues(), seedsOf(cl), append([]SourceOption{
		WithStartingOffsets(SpecificOffsets(map[TopicPartition]int64{{"t", 0}: 0}, ResetNone)),
		WithBounded(LatestOffsets()), WithLogger(quietLogger())}, opts...)...)
	sink := &collectSink{got: map[string]int{}}
	env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithCheckpointInterval(50*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()), runtime.WithLogger(quietLogger()))
	runtime.SinkTo(runtime.FromSource(env, src, "kafka"), sink)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := env.Execute(ctx, "out of range")
	if ctx.Err() != nil {
		t.Fatalf("the job did not end in 60s (restarting onto the same offset?): %v", err)
	}
	return sink, err
}

// A job whose split starts at an offset no longer in the log (the path a
// restored split takes) fails at once, without restarts, naming the
// partition and the gap. Before, Execute returned nil after writing 150
// of the 200 records.
func TestOffsetBelowLogStartFailsTheJob(t *testing.T) {
	sink, err := rangeJob(t)
	if err == nil {
		t.Fatalf("Execute returned nil after writing %d records; want records 0..49 reported lost", len(sink.got))
	}
	checkOutOfRange(t, err, 0, 50)
	if len(sink.got) != 0 {
		t.Fatalf("the job wrote %d records before failing", len(sink.got))
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// textLogger logs text to w.
func textLogger(w *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WithOutOfRangeReset(ResetEarliest) accepts the loss: the job reads
// what is left from the log start, and the gap is logged.
func TestOutOfRangeResetAcceptsTheLossAndLogsIt(t *testing.T) {
	var logs syncBuffer
	sink, err := rangeJob(t, WithOutOfRangeReset(ResetEarliest), WithLogger(textLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 50; i < 200; i++ {
		if n := sink.got[strconv.Itoa(i)]; n != 1 {
			t.Fatalf("record %d written %d times", i, n)
		}
	}
	if len(sink.got) != 150 {
		t.Fatalf("wrote %d distinct records, want the 150 still in the log", len(sink.got))
	}
	l := logs.String()
	if !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "log_start=50") || !strings.Contains(l, "resumed_at=50") || !strings.Contains(l, "partition=t-0") {
		t.Fatalf("the skipped records were not logged at error level with the partition and the gap:\n%s", l)
	}
}

func TestOutOfRangeResetIsChecked(t *testing.T) {
	_, err := NewSource(StringValues(), WithBrokers("b:9092"), WithTopics("t"), WithOutOfRangeReset(OffsetResetStrategy(7)))
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "WithOutOfRangeReset") {
		t.Fatalf("err %v: want an invalid configuration naming WithOutOfRangeReset", err)
	}
}
