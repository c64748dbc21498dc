package base

import (
	"slices"
	"testing"
)

type splitBatch struct {
	id      string
	records []int
}

func drainBatch(b RecordsWithSplitIDs[int]) []splitBatch {
	var out []splitBatch
	for {
		id, ok := b.NextSplit()
		if !ok {
			return out
		}
		sb := splitBatch{id: id}
		for {
			r, ok := b.NextRecordFromSplit()
			if !ok {
				break
			}
			sb.records = append(sb.records, r)
		}
		out = append(out, sb)
	}
}

// TestRecordsBySplits checks that a batch groups records by split, keeps
// each split's order, visits every split once, and survives reuse.
func TestRecordsBySplits(t *testing.T) {
	tests := []struct {
		name     string
		fill     func(b *RecordsBySplits[int])
		want     []splitBatch
		finished []string
	}{
		{"empty", func(*RecordsBySplits[int]) {}, nil, nil},
		{
			"interleaved adds are grouped",
			func(b *RecordsBySplits[int]) {
				b.Add("a", 1)
				b.Add("b", 10)
				b.Add("a", 2)
				b.AddAll("c", []int{20, 21})
				b.AddAll("b", nil)
				b.Add("b", 11)
			},
			[]splitBatch{{"a", []int{1, 2}}, {"b", []int{10, 11}}, {"c", []int{20, 21}}},
			nil,
		},
		{
			"finished splits without records",
			func(b *RecordsBySplits[int]) {
				b.Add("a", 1)
				b.AddFinishedSplit("a")
				b.AddFinishedSplit("empty")
			},
			[]splitBatch{{"a", []int{1}}},
			[]string{"a", "empty"},
		},
	}
	pool := NewRecordsBySplitsPool[int](1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every case reuses the batch the previous one recycled.
			b := pool.Get()
			tt.fill(b)
			if got := drainBatch(b); !slices.EqualFunc(got, tt.want, func(x, y splitBatch) bool {
				return x.id == y.id && slices.Equal(x.records, y.records)
			}) {
				t.Fatalf("batch = %v, want %v", got, tt.want)
			}
			if got := b.FinishedSplits(); !slices.Equal(got, tt.finished) {
				t.Fatalf("finished = %v, want %v", got, tt.finished)
			}
			b.Recycle()
			if b.Len() != 0 || len(b.FinishedSplits()) != 0 {
				t.Fatal("recycled batch is not empty")
			}
			if again := pool.Get(); again != b {
				t.Fatal("pool did not hand back the recycled batch")
			} else {
				again.Recycle()
			}
		})
	}
}

// TestRecordsBySplitsSteadyStateAllocatesNothing checks the recycling hook:
// once warm, filling, draining and recycling a pooled batch allocates
// nothing.
func TestRecordsBySplitsSteadyStateAllocatesNothing(t *testing.T) {
	pool := NewRecordsBySplitsPool[int64](2)
	cycle := func() {
		b := pool.Get()
		for i := range int64(512) {
			b.Add("split-a", i)
		}
		b.Add("split-b", 1)
		b.AddFinishedSplit("split-b")
		var sum int64
		for id, ok := b.NextSplit(); ok; id, ok = b.NextSplit() {
			_ = id
			for r, ok := b.NextRecordFromSplit(); ok; r, ok = b.NextRecordFromSplit() {
				sum += r
			}
		}
		b.Recycle()
	}
	cycle() // warm up
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Fatalf("steady-state batch cycle allocates %.1f times, want 0", allocs)
	}
}
