package datagen

import (
	"math/rand/v2"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// discard is a ReaderOutput that drops records.
type discard struct{ n int }

func (d *discard) Collect(int64)                                             { d.n++ }
func (d *discard) CollectWithTimestamp(int64, int64)                         { d.n++ }
func (d *discard) EmitWatermark(connector.Watermark)                         {}
func (d *discard) MarkIdle()                                                 {}
func (d *discard) MarkActive()                                               {}
func (d *discard) CreateOutputForSplit(string) connector.SourceOutput[int64] { return d }
func (d *discard) ReleaseOutputForSplit(string)                              {}

// BenchmarkReader measures a reader generating records through base's
// fetcher, queue and emitter: ns/op is per record. The generator draws one
// random number, so the cost of reseeding per index is in it.
func BenchmarkReader(b *testing.B) {
	src, err := NewSource(func(i int64, r *rand.Rand) int64 { return i ^ int64(r.Uint32()) }, WithCount(int64(b.N)), WithSplits(2))
	if err != nil {
		b.Fatal(err)
	}
	r, err := src.CreateReader(readerCtx{0, 1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if err := r.AddSplits(src.plan(1)); err != nil {
		b.Fatal(err)
	}
	r.NotifyNoMoreSplits()
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	out := &discard{}
	b.ReportAllocs()
	b.ResetTimer()
	for {
		st, err := r.PollNext(out)
		if err != nil {
			b.Fatal(err)
		}
		if st == connector.EndOfInput {
			break
		}
		if st == connector.NothingAvailable {
			<-r.Available()
		}
	}
	if out.n != b.N {
		b.Fatalf("%d records, want %d", out.n, b.N)
	}
}
