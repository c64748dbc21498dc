package base

import (
	"context"
	"runtime"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// benchReader is an in-memory SplitReader producing endless batches of 512
// records from one split, drawn from a pool so that it allocates nothing
// once warm.
type benchReader struct {
	pool *RecordsBySplitsPool[int64]
	id   string
	next int64
}

const benchBatch = 512

func (r *benchReader) Fetch(context.Context) (RecordsWithSplitIDs[int64], error) {
	b := r.pool.Get()
	for range benchBatch {
		b.Add(r.id, r.next)
		r.next++
	}
	return b, nil
}

func (r *benchReader) HandleSplitsChanges(c SplitsChange[testSplit]) error {
	if len(c.Added) > 0 {
		r.id, r.next = c.Added[0].ID, c.Added[0].Next
	}
	return nil
}
func (r *benchReader) WakeUp()      {}
func (r *benchReader) Close() error { return nil }

// sumOutput is the cheapest output that still uses every record.
type sumOutput struct {
	n, sum int64
}

func (o *sumOutput) Collect(r int64)                       { o.n++; o.sum += r }
func (o *sumOutput) CollectWithTimestamp(r int64, _ int64) { o.Collect(r) }
func (o *sumOutput) EmitWatermark(connector.Watermark)     {}
func (o *sumOutput) MarkIdle()                             {}
func (o *sumOutput) MarkActive()                           {}
func (o *sumOutput) CreateOutputForSplit(string) connector.SourceOutput[int64] {
	return o
}
func (o *sumOutput) ReleaseOutputForSplit(string) {}

// BenchmarkSourceReaderBase measures the whole path of a record: SplitReader
// (in memory) -> fetcher goroutine -> elementsQueue -> PollNext ->
// RecordEmitter -> output, driven the way the engine drives a source. One
// op is one record; ns/record and allocs/record repeat that explicitly, the
// latter counted with runtime.MemStats over every goroutine, fetcher
// included.
func BenchmarkSourceReaderBase(b *testing.B) {
	pool := NewRecordsBySplitsPool[int64](DefaultElementQueueCapacity + 3)
	mgr, err := NewSingleFetcherManager(func() (SplitReader[int64, testSplit], error) {
		return &benchReader{pool: pool}, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	hooks := SplitStateFuncs[testSplit, testSplit]{
		Initialize: func(s testSplit) testSplit { return s },
		Convert:    func(_ string, s testSplit) testSplit { return s },
	}
	reader, err := NewSourceReaderBase(&fakeReaderContext{}, mgr, positionEmitter, hooks)
	if err != nil {
		b.Fatal(err)
	}
	var r connector.SourceReader[int64, testSplit] = reader
	defer r.Close()
	if err := r.AddSplits([]testSplit{{ID: "bench", End: 1 << 62}}); err != nil {
		b.Fatal(err)
	}
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	out := &sumOutput{}
	poll := func(n int64) {
		for out.n < n {
			st, err := r.PollNext(out)
			if err != nil {
				b.Fatal(err)
			}
			if st == connector.NothingAvailable {
				<-r.Available()
			}
		}
	}
	poll(16 * benchBatch) // warm up: fill the pool, reach steady state

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	start := out.n
	poll(start + int64(b.N))
	b.StopTimer()
	runtime.ReadMemStats(&after)

	records := float64(out.n - start)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/records, "allocs/record")
	// Records are 0, 1, 2, ...: their sum tells whether any was lost or
	// emitted twice.
	if want := out.n * (out.n - 1) / 2; out.sum != want {
		b.Fatalf("sum of %d records = %d, want %d", out.n, out.sum, want)
	}
}
