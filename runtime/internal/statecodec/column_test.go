package statecodec

import (
	"errors"
	goruntime "runtime"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// heapAllocated is how many bytes f allocates on the heap.
func heapAllocated(f func()) uint64 {
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	f()
	goruntime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Rule: a checkpoint is untrusted input. A column of a keyed entry holds
// a byte at least for each of its values, so a count beyond its bytes is
// refused as a damaged blob before it sizes anything. Before, a crafted
// entry claiming a million values over a column of a few bytes had the
// decoder allocate room for all of them (16 MiB of strings here) before
// it found the column short.
func TestColumnCountBeyondItsBytesRefusedBeforeAllocating(t *testing.T) {
	for _, c := range []struct {
		name string
		read func(b []byte, n int) error
		col  func() []byte
	}{
		{"string", func(b []byte, n int) error { _, _, err := ReadColumn(b, n, For[string]()); return err }, func() []byte {
			w := Column[string]{Codec: For[string]()}
			w.Add("x")
			b, _ := w.AppendTo(nil)
			return b
		}},
		{"serde", func(b []byte, n int) error {
			_, _, err := ReadColumn(b, n, codecOf(JSON[string]()))
			return err
		}, func() []byte {
			w := Column[string]{Codec: codecOf(JSON[string]())}
			w.Add("x")
			b, _ := w.AppendTo(nil)
			return b
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := c.col()
			const claimed = 1 << 20
			var err error
			n := heapAllocated(func() { err = c.read(col, claimed) })
			if !errors.Is(err, engine.ErrShortState) {
				t.Fatalf("a column of %d bytes read as %d values: %v; want an error matching engine.ErrShortState", len(col), claimed, err)
			}
			if n > 1<<20 {
				t.Fatalf("reading a %d-byte column claimed to hold %d values allocated %d bytes; want the claim refused first", len(col), claimed, n)
			}
		})
	}
}
