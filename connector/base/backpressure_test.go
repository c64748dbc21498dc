package base

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// TestBackpressureStopsFetching checks the backpressure rule (backpressure
// reaches the external system): with nobody polling, fetchers stop calling
// Fetch once the queue holds capacity batches, each fetcher keeping one more
// batch waiting in Put, and every batch the consumer takes buys exactly one
// more Fetch. With a fetcher per split, the fetchers are capped
// (WithMaxSplitFetchers), so more splits than the cap do not mean more
// batches held.
func TestBackpressureStopsFetching(t *testing.T) {
	tests := []struct {
		name        string
		perSplit    bool
		capacity    int
		splits      int
		maxFetchers int // 0: the default
	}{
		{"single fetcher/capacity 1", false, 1, 1, 0},
		{"single fetcher/default capacity", false, DefaultElementQueueCapacity, 3, 0},
		{"single fetcher/capacity 5", false, 5, 2, 0},
		{"fetcher per split/capacity 2", true, 2, 3, 0},
		{"fetcher per split/capacity 4", true, 4, 2, 0},
		{"fetcher per split/more splits than fetchers", true, 2, 7, 3},
		{"fetcher per split/more splits than the default cap", true, 2, DefaultMaxSplitFetchers + 4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, fac, _ := newTestReader(t, readerSetup{perSplit: tt.perSplit, batch: 8, capacity: tt.capacity,
					maxFetchers: tt.maxFetchers, setup: func(mr *memReader) { mr.maxFetches = 1000 }})
				defer closeReader(t, r)
				var splits []testSplit
				for i := range tt.splits {
					// Unbounded: only backpressure stops the fetchers.
					splits = append(splits, testSplit{ID: fmt.Sprintf("s%d", i), Next: int64(i) << 40, End: math.MaxInt64})
				}
				if err := r.AddSplits(splits); err != nil {
					t.Fatal(err)
				}
				if err := r.Start(); err != nil {
					t.Fatal(err)
				}

				fetchers := 1
				if tt.perSplit {
					fetchers = min(tt.splits, cmp.Or(tt.maxFetchers, DefaultMaxSplitFetchers))
				}
				want := int64(tt.capacity + fetchers)

				synctest.Wait() // every fetcher is parked
				if got := fac.totalFetches(); got != want {
					t.Fatalf("Fetch calls with a stalled consumer = %d, want capacity %d + %d fetcher(s) = %d",
						got, tt.capacity, fetchers, want)
				}
				if got := r.queue.Len(); got != tt.capacity {
					t.Fatalf("queue holds %d batches, want capacity %d", got, tt.capacity)
				}
				// An hour of (bubble) time later, still nothing: the fetchers
				// are blocked in Put, not polling in a loop.
				time.Sleep(time.Hour)
				if got := fac.totalFetches(); got != want {
					t.Fatalf("Fetch calls after an hour = %d, want still %d", got, want)
				}

				// One poll takes one batch out of the queue: exactly one
				// fetcher gets its batch in and fetches once more.
				out := newRecordingOutput()
				if st, err := r.PollNext(out); err != nil || st != connector.MoreAvailable {
					t.Fatalf("PollNext = %v, %v", st, err)
				}
				synctest.Wait()
				if got := fac.totalFetches(); got != want+1 {
					t.Fatalf("Fetch calls after taking one batch = %d, want %d", got, want+1)
				}
				if got := r.queue.Len(); got != tt.capacity {
					t.Fatalf("queue holds %d batches after refill, want %d", got, tt.capacity)
				}
			})
		})
	}
}

// countingOutput checks that records arrive in order without keeping them,
// so that it adds nothing to the heap it is used to measure.
type countingOutput struct {
	n, next int64
	gaps    int
}

func (o *countingOutput) Collect(r int64) {
	if r != o.next {
		o.gaps++
	}
	o.next = r + 1
	o.n++
}
func (o *countingOutput) CollectWithTimestamp(r int64, _ int64) { o.Collect(r) }
func (o *countingOutput) EmitWatermark(connector.Watermark)     {}
func (o *countingOutput) MarkIdle()                             {}
func (o *countingOutput) MarkActive()                           {}
func (o *countingOutput) CreateOutputForSplit(string) connector.SourceOutput[int64] {
	return o
}
func (o *countingOutput) ReleaseOutputForSplit(string) {}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestBackpressureBoundsMemory checks the backpressure rule on memory: a
// reader over ten million lazily generated records, behind a consumer that
// has stalled, holds a few batches and no more, before and after the consumer
// catches up for a while. Without the bound the fetcher would buffer all 80
// MB of records.
func TestBackpressureBoundsMemory(t *testing.T) {
	const (
		total    = 10_000_000
		batch    = 4096
		capacity = DefaultElementQueueCapacity
		consumed = 200 * batch
		bound    = 8 << 20 // bytes; the records alone would take 80 MB
	)
	synctest.Test(t, func(t *testing.T) {
		before := heapInUse()
		r, fac, _ := newTestReader(t, readerSetup{batch: batch, capacity: capacity})
		defer closeReader(t, r)
		if err := r.AddSplits([]testSplit{{ID: "big", Next: 0, End: total}}); err != nil {
			t.Fatal(err)
		}
		r.NotifyNoMoreSplits()
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}

		synctest.Wait() // consumer stalled: the fetcher parks in Put
		if grown := int64(heapInUse()) - int64(before); grown > bound {
			t.Fatalf("heap grew by %d bytes behind a stalled consumer, bound %d", grown, bound)
		}
		if got, max := fac.totalFetches(), int64(capacity+1); got > max {
			t.Fatalf("Fetch called %d times behind a stalled consumer, want at most %d", got, max)
		}

		// The consumer catches up for a while, then stalls again.
		out := &countingOutput{}
		if _, err := drive(r, out, func() int { return int(out.n) }, consumed); err != nil {
			t.Fatal(err)
		}
		if out.n != consumed || out.gaps != 0 {
			t.Fatalf("consumed %d records with %d gaps, want %d in order", out.n, out.gaps, consumed)
		}
		synctest.Wait()
		if grown := int64(heapInUse()) - int64(before); grown > bound {
			t.Fatalf("heap grew by %d bytes after consuming %d records, bound %d", grown, consumed, bound)
		}
		if got, max := fac.totalFetches(), int64(consumed/batch+capacity+2); got > max {
			t.Fatalf("Fetch called %d times for %d consumed records, want at most %d", got, consumed, max)
		}
	})
}
