package datagen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readerCtx is a reader's SourceReaderContext outside a job.
type readerCtx struct{ index, parallelism int }

func (c readerCtx) SubtaskIndex() int                     { return c.index }
func (c readerCtx) Parallelism() int                      { return c.parallelism }
func (c readerCtx) SendSplitRequest()                     {}
func (c readerCtx) SendSourceEvent(connector.SourceEvent) {}
func (c readerCtx) Context() context.Context              { return context.Background() }

// collect is a ReaderOutput keeping what is emitted.
type collect[T any] struct{ got []T }

func (c *collect[T]) Collect(v T)                                           { c.got = append(c.got, v) }
func (c *collect[T]) CollectWithTimestamp(v T, _ int64)                     { c.got = append(c.got, v) }
func (c *collect[T]) EmitWatermark(connector.Watermark)                     {}
func (c *collect[T]) MarkIdle()                                             {}
func (c *collect[T]) MarkActive()                                           {}
func (c *collect[T]) CreateOutputForSplit(string) connector.SourceOutput[T] { return c }
func (c *collect[T]) ReleaseOutputForSplit(string)                          {}

// openReader creates subtask's reader of src with splits, told there are
// no more.
func openReader[T any](t *testing.T, src *Source[T], sub, parallelism int, splits []Split) connector.SourceReader[T, Split] {
	t.Helper()
	r, err := src.CreateReader(readerCtx{sub, parallelism})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.AddSplits(splits); err != nil {
		t.Fatal(err)
	}
	r.NotifyNoMoreSplits()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// poll emits from r until it has emitted n records (n < 0: until the end
// of input), waiting on Available as the engine does.
func poll[T any](t *testing.T, r connector.SourceReader[T, Split], out *collect[T], n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for n < 0 || len(out.got) < n {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatal(err)
		}
		switch st {
		case connector.EndOfInput:
			if n >= 0 {
				t.Fatalf("end of input after %d records, want %d", len(out.got), n)
			}
			return
		case connector.NothingAvailable:
			select {
			case <-r.Available():
			case <-deadline:
				t.Fatalf("no record for 30s after %d", len(out.got))
			}
		}
	}
}

// readAll reads src as a job of parallelism readers would, each reader
// given its splits round robin, and returns the records by index.
func readAll[T any](t *testing.T, src *Source[T], parallelism int, index func(T) int64) map[int64]T {
	t.Helper()
	splits := src.plan(parallelism)
	got := map[int64]T{}
	for sub := range parallelism {
		var mine []Split
		for i, s := range splits {
			if i%parallelism == sub {
				mine = append(mine, s)
			}
		}
		out := &collect[T]{}
		poll(t, openReader(t, src, sub, parallelism, mine), out, -1)
		for _, v := range out.got {
			i := index(v)
			if _, dup := got[i]; dup {
				t.Fatalf("index %d emitted twice", i)
			}
			got[i] = v
		}
	}
	return got
}

type sample struct {
	I int64
	V uint64
}

func sampleGen(i int64, r *rand.Rand) sample { return sample{i, r.Uint64()} }
func sampleIndex(s sample) int64             { return s.I }

// The record of an index depends on the seed and the index only: the same
// seed gives the same records at another parallelism and number of
// splits, another seed other records.
func TestRecordsAreDeterministicBySeed(t *testing.T) {
	newSrc := func(seed uint64, splits int) *Source[sample] {
		src, err := NewSource(sampleGen, WithCount(500), WithSeed(seed), WithSplits(splits), WithBatchSize(7))
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	a := readAll(t, newSrc(42, 1), 1, sampleIndex)
	b := readAll(t, newSrc(42, 5), 3, sampleIndex)
	c := readAll(t, newSrc(43, 1), 1, sampleIndex)
	if len(a) != 500 || len(b) != 500 || len(c) != 500 {
		t.Fatalf("read %d, %d, %d records, want 500 each", len(a), len(b), len(c))
	}
	same := 0
	for i := range int64(500) {
		if a[i] != b[i] {
			t.Fatalf("index %d: %v with one split, %v with five at parallelism 3", i, a[i], b[i])
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("%d of 500 records are the same under seeds 42 and 43", same)
	}
	// Neighbouring indexes do not get related numbers either.
	if a[0].V == a[1].V || a[1].V-a[0].V == a[2].V-a[1].V {
		t.Fatalf("records 0-2 look related: %v %v %v", a[0], a[1], a[2])
	}
}

// A reader's snapshot resumes at the first index not emitted: restored
// into a new reader at any point, the run emits every index once, with no
// gap.
func TestRestoreResumesAtNextIndex(t *testing.T) {
	const count = 1000
	src, err := NewSource(sampleGen, WithCount(count), WithSplits(3), WithBatchSize(16))
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{0, 1, 15, 16, 17, 333, 999, 1000} {
		out := &collect[sample]{}
		first := openReader(t, src, 0, 1, src.plan(1))
		poll(t, first, out, cut)
		snap, err := first.SnapshotState(1)
		if err != nil {
			t.Fatal(err)
		}
		// Fetched but not emitted records are not in the snapshot, and
		// are generated again after the restore.
		_ = first.Close()
		restored := make([]Split, len(snap))
		for i, s := range snap {
			b, err := SplitSerializer{}.Serialize(s)
			if err != nil {
				t.Fatal(err)
			}
			if restored[i], err = (SplitSerializer{}).Deserialize(splitVersion, b); err != nil {
				t.Fatal(err)
			}
		}
		poll(t, openReader(t, src, 0, 1, restored), out, -1)
		seen := map[int64]int{}
		for _, s := range out.got {
			seen[s.I]++
		}
		for i := range int64(count) {
			if seen[i] != 1 {
				t.Fatalf("cut after %d records: index %d emitted %d times", cut, i, seen[i])
			}
		}
		if len(out.got) != count {
			t.Fatalf("cut after %d records: %d records, want %d", cut, len(out.got), count)
		}
	}
}

// An unbounded source's reader with several splits generates from each in
// turn; none waits for another that never ends.
func TestUnboundedReaderTakesSplitsInTurn(t *testing.T) {
	src, err := NewSource(sampleGen, WithSplits(3), WithBatchSize(10))
	if err != nil {
		t.Fatal(err)
	}
	if b := src.Boundedness(); b != connector.ContinuousUnbounded {
		t.Fatalf("Boundedness = %v, want continuous-unbounded", b)
	}
	splits := src.plan(1)
	out := &collect[sample]{}
	poll(t, openReader(t, src, 0, 1, splits), out, 300)
	per := map[int]int{}
	for _, s := range out.got {
		for _, sp := range splits {
			if s.I >= sp.Next && s.I < sp.End {
				per[sp.Number]++
			}
		}
	}
	for k := range 3 {
		if per[k] < 50 {
			t.Fatalf("split %d emitted %d of 300 records (by split: %v), want its turn", k, per[k], per)
		}
	}
}

// A rate-limited source is not faster than its rate allows with one burst
// of a tenth of a second's worth, nor slower than its rate: 100 records
// at 200 a second (burst 20) take between 0.4s and 0.5s. Measured on a
// synctest bubble's clock, which moves only while every goroutine of the
// reader waits, so the bounds hold on any machine.
func TestRateLimitIsNotExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, err := NewSource(sampleGen, WithCount(100), WithRecordsPerSecond(200), WithSplits(2))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := readAll(t, src, 1, sampleIndex)
		if el := time.Since(start); el < 400*time.Millisecond || el > 500*time.Millisecond {
			t.Fatalf("100 records at 200/s took %v, want 0.4s to 0.5s", el)
		}
		if len(got) != 100 {
			t.Fatalf("read %d records, want 100", len(got))
		}
	})
}

// The ranges cover [0, count) once; a count smaller than the splits leaves
// some empty.
func TestPlanCoversTheIndexSpace(t *testing.T) {
	for _, tt := range []struct {
		count  int64
		splits int
	}{{10, 3}, {2, 5}, {0, 2}, {600, 12}} {
		src, err := NewSource(sampleGen, WithCount(tt.count), WithSplits(tt.splits))
		if err != nil {
			t.Fatal(err)
		}
		got := src.plan(1)
		if len(got) != tt.splits {
			t.Fatalf("%+v: %d splits", tt, len(got))
		}
		var next int64
		for _, s := range got {
			if s.Next != next || s.End < s.Next || s.End-s.Next > tt.count/int64(tt.splits)+1 {
				t.Fatalf("%+v: splits %+v do not cut the range evenly", tt, got)
			}
			next = s.End
		}
		if next != tt.count {
			t.Fatalf("%+v: splits end at %d", tt, next)
		}
	}
}

// Bad options fail NewSource with every problem named.
func TestOptionsAreValidated(t *testing.T) {
	_, err := NewSource[sample](nil, WithCount(-2), WithSplits(-1), WithRecordsPerSecond(-1), WithBatchSize(0), WithElementQueueCapacity(0))
	if err == nil {
		t.Fatal("NewSource accepted bad options")
	}
	for _, want := range []string{"generator function is nil", "count -2", "-1 splits", "rate of -1", "batch of 0", "queue capacity 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// Every negative count is refused, -1 too: it used to stand for "no
// count" inside the source, so WithCount(-1) made an unbounded source
// instead of failing.
func TestNegativeCountIsRefused(t *testing.T) {
	for _, n := range []int64{-1, -2, math.MinInt64} {
		src, err := NewSource(sampleGen, WithCount(n))
		if err == nil {
			t.Fatalf("WithCount(%d) accepted; the source is %v", n, src.Boundedness())
		}
		if want := fmt.Sprintf("count %d must be 0 or more", n); !strings.Contains(err.Error(), want) {
			t.Fatalf("WithCount(%d): error %q does not say %q", n, err, want)
		}
	}
}

// Splits survive a round trip; damaged data and other versions are
// rejected.
func TestSplitSerializer(t *testing.T) {
	for _, s := range []Split{newSplit(0, 0, 0), newSplit(3, 17, 1<<62)} {
		b, err := SplitSerializer{}.Serialize(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := SplitSerializer{}.Deserialize(splitVersion, b)
		if err != nil || got != s {
			t.Fatalf("round trip %+v = %+v, %v", s, got, err)
		}
		for n := range len(b) {
			if _, err := (SplitSerializer{}).Deserialize(splitVersion, b[:n]); err == nil {
				t.Fatalf("%d of %d bytes decoded", n, len(b))
			}
		}
		if _, err := (SplitSerializer{}).Deserialize(splitVersion, append(slices.Clone(b), 0)); err == nil {
			t.Fatal("trailing byte decoded")
		}
	}
	if _, err := (SplitSerializer{}).Deserialize(2, nil); !errors.Is(err, connector.ErrUnsupportedVersion) {
		t.Fatalf("version 2 = %v, want ErrUnsupportedVersion", err)
	}
}

// A reader waiting for its rate limit closes promptly: Close wakes the
// wait, and no goroutine is left (goleak in TestMain).
func TestRateLimitedReaderCloses(t *testing.T) {
	src, err := NewSource(sampleGen, WithRecordsPerSecond(0.5))
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.CreateReader(readerCtx{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddSplits(src.plan(1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	out := &collect[sample]{}
	poll(t, r, out, 1) // the first token; the next is two seconds away
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
