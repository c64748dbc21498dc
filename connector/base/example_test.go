package base_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/runtime"
)

// Range is a split: the numbers [Start, End), those before Next emitted
// already. It is its own checkpoint state: a restored Range resumes at
// Next. Its ID must not change as it is read, so Next is not in it.
type Range struct {
	Start, Next, End int64
}

func (r Range) SplitID() string { return fmt.Sprintf("[%d,%d)", r.Start, r.End) }

// rangeReader is the SplitReader: each Fetch returns up to four numbers
// of its first range, and the range's end once it is read. It reads from
// memory, so it never blocks and WakeUp has nothing to cut short.
type rangeReader struct{ ranges []Range }

func (r *rangeReader) Fetch(context.Context) (base.RecordsWithSplitIDs[int64], error) {
	s := &r.ranges[0] // called only while the reader holds a range
	batch := &base.RecordsBySplits[int64]{}
	for ; s.Next < s.End && batch.Len() < 4; s.Next++ {
		batch.Add(s.SplitID(), s.Next)
	}
	if s.Next == s.End {
		batch.AddFinishedSplit(s.SplitID())
		r.ranges = r.ranges[1:]
	}
	return batch, nil
}

func (r *rangeReader) HandleSplitsChanges(c base.SplitsChange[Range]) error {
	r.ranges = append(r.ranges, c.Added...)
	return nil
}

func (r *rangeReader) WakeUp()      {}
func (r *rangeReader) Close() error { return nil }

// rangeSource is a bounded source of the numbers [0, n), in ranges of
// size each, with opts for the StaticEnumerator and readers.
func rangeSource(n, size int64, opts ...base.SourceOption) (*base.Source[int64, int64, Range], error) {
	return base.NewSource(
		func(parallelism int) ([]Range, error) { // the splits of a fresh start
			var rs []Range
			for start := int64(0); start < n; start += size {
				rs = append(rs, Range{Start: start, Next: start, End: min(start+size, n)})
			}
			return rs, nil
		},
		func() (base.SplitReader[int64, Range], error) { return &rangeReader{}, nil },
		func(v int64, out connector.SourceOutput[int64], r *Range) error {
			out.Collect(v)
			r.Next = v + 1 // a checkpoint taken now resumes after v
			return nil
		},
		base.JSONSerializer[Range](), opts...)
}

// The short form of a custom source: a split type, a SplitReader and an
// emit function. NewSource adds the StaticEnumerator, which hands the
// ranges out to the readers as they ask (pull mode), and the recovery of
// both: the splits, with their positions, are in every checkpoint.
func ExampleNewSource() {
	src, err := rangeSource(30, 8)
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	numbers := runtime.FromSource(env, src, "numbers").UID("numbers")
	out := &bySubtask{}
	runtime.SinkTo(numbers, connector.Sink[int64](out)).UID("out")
	if err := env.Execute(context.Background(), "numbers"); err != nil {
		fmt.Println(err)
		return
	}
	all := slices.Sorted(slices.Values(slices.Concat(out.got[0], out.got[1])))
	fmt.Println(len(all), "numbers:", all[0], "to", all[len(all)-1], "- all distinct:", len(slices.Compact(all)) == 30)
	// Output: 30 numbers: 0 to 29 - all distinct: true
}

// Push assignment with WithSplitOwner: the StaticEnumerator gives every
// range to the subtask the function names, when its reader registers (a
// restore at another parallelism places the ranges again). Here the
// first half goes to subtask 0, the second to subtask 1; the sink's
// subtasks, chained to the readers, show who read what.
func ExampleWithSplitOwner() {
	src, err := rangeSource(8, 2, base.WithSplitOwner(func(r Range, parallelism int) int {
		return int(r.Start * int64(parallelism) / 8)
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet))
	numbers := runtime.FromSource(env, src, "numbers").UID("numbers")
	out := &bySubtask{}
	runtime.SinkTo(numbers, connector.Sink[int64](out)).UID("out")
	if err := env.Execute(context.Background(), "numbers"); err != nil {
		fmt.Println(err)
		return
	}
	for subtask, got := range out.got {
		fmt.Println("subtask", subtask, "read", slices.Sorted(slices.Values(got)))
	}
	// Output:
	// subtask 0 read [0 1 2 3]
	// subtask 1 read [4 5 6 7]
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bySubtask is a sink of two subtasks that keeps what each is given.
type bySubtask struct {
	mu  sync.Mutex
	got [2][]int64
}

func (s *bySubtask) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return &subtaskWriter{s, ctx.SubtaskIndex()}, nil
}

type subtaskWriter struct {
	sink    *bySubtask
	subtask int
}

func (w *subtaskWriter) Write(v int64, _ connector.WriteContext) error {
	w.sink.mu.Lock()
	defer w.sink.mu.Unlock()
	w.sink.got[w.subtask] = append(w.sink.got[w.subtask], v)
	return nil
}

func (w *subtaskWriter) Flush(bool) error { return nil }
func (w *subtaskWriter) Close() error     { return nil }
