package runtime

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/state"
)

// countSource emits total integers from one split per subtask, many per
// PollNext, the way a connector that hands over fetched batches does.
type countSource struct {
	total int
}

type countSplit struct{ id string }

func (s countSplit) SplitID() string { return s.id }

func (c *countSource) Boundedness() connector.Boundedness { return connector.Bounded }
func (c *countSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[countSplit]) (connector.SplitEnumerator[countSplit, int], error) {
	return &countEnumerator{ctx: ctx}, nil
}
func (c *countSource) RestoreEnumerator(ctx connector.SplitEnumeratorContext[countSplit], _ int) (connector.SplitEnumerator[countSplit, int], error) {
	return &countEnumerator{ctx: ctx}, nil
}
func (c *countSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[int, countSplit], error) {
	n := c.total / ctx.Parallelism()
	if ctx.SubtaskIndex() == 0 {
		n += c.total % ctx.Parallelism()
	}
	return &countReader{n: n, avail: make(chan struct{})}, nil
}
func (c *countSource) SplitSerializer() connector.VersionedSerializer[countSplit] {
	return countSplitSerializer{}
}
func (c *countSource) EnumeratorStateSerializer() connector.VersionedSerializer[int] {
	return intSerializer{}
}

type countSplitSerializer struct{}

func (countSplitSerializer) Version() int                           { return 1 }
func (countSplitSerializer) Serialize(s countSplit) ([]byte, error) { return []byte(s.id), nil }
func (countSplitSerializer) Deserialize(_ int, b []byte) (countSplit, error) {
	return countSplit{id: string(b)}, nil
}

type countEnumerator struct {
	ctx connector.SplitEnumeratorContext[countSplit]
}

func (e *countEnumerator) Start() error                          { return nil }
func (e *countEnumerator) HandleSplitRequest(int) error          { return nil }
func (e *countEnumerator) AddSplitsBack([]countSplit, int) error { return nil }
func (e *countEnumerator) AddReader(s int) error {
	if err := e.ctx.AssignSplit(countSplit{id: "s" + strconv.Itoa(s)}, s); err != nil {
		return err
	}
	return e.ctx.SignalNoMoreSplits(s)
}
func (e *countEnumerator) SnapshotState(int64) (int, error)                   { return 0, nil }
func (e *countEnumerator) NotifyCheckpointComplete(int64) error               { return nil }
func (e *countEnumerator) HandleSourceEvent(int, connector.SourceEvent) error { return nil }
func (e *countEnumerator) Close() error                                       { return nil }

type countReader struct {
	n, pos int
	split  string
	out    connector.SourceOutput[int]
	noMore bool
	avail  chan struct{}
}

func (r *countReader) Start() error { return nil }
func (r *countReader) PollNext(out connector.ReaderOutput[int]) (connector.InputStatus, error) {
	if r.split == "" {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		return connector.NothingAvailable, nil
	}
	if r.out == nil {
		r.out = out.CreateOutputForSplit(r.split)
	}
	end := min(r.pos+1024, r.n)
	for ; r.pos < end; r.pos++ {
		r.out.Collect(r.pos)
	}
	if r.pos == r.n {
		out.ReleaseOutputForSplit(r.split)
		r.split = ""
	}
	return connector.MoreAvailable, nil
}
func (r *countReader) Available() <-chan struct{} { return r.avail }
func (r *countReader) SnapshotState(int64) ([]countSplit, error) {
	if r.split == "" {
		return nil, nil
	}
	return []countSplit{{id: r.split}}, nil
}
func (r *countReader) AddSplits(s []countSplit) error {
	r.split = s[0].id
	return nil
}
func (r *countReader) NotifyNoMoreSplits()                           { r.noMore = true }
func (r *countReader) NotifyCheckpointComplete(int64) error          { return nil }
func (r *countReader) HandleSourceEvent(connector.SourceEvent) error { return nil }
func (r *countReader) PauseOrResumeSplits(_, _ []string) error       { return nil }
func (r *countReader) Close() error                                  { return nil }

// countingSink counts what it is given, per writer.
type countingSink[T any] struct{ total *int64 }

func (s countingSink[T]) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[T], error) {
	return &countingWriter[T]{total: s.total}, nil
}

type countingWriter[T any] struct {
	n     int64
	total *int64
}

func (w *countingWriter[T]) Write(T, connector.WriteContext) error { w.n++; return nil }
func (w *countingWriter[T]) Flush(bool) error                      { return nil }
func (w *countingWriter[T]) Close() error {
	atomicAdd(w.total, w.n)
	return nil
}

func reportPerRecord(b *testing.B, start time.Time) {
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/record")
}

// BenchmarkChainedPipeline: source -> map -> filter -> sink, all chained in
// one task at parallelism 1. One op is one record.
func BenchmarkChainedPipeline(b *testing.B) {
	b.ReportAllocs()
	var total int64
	env := NewEnvironment(WithLogger(discardLogger()))
	ds := FromSource(env, &countSource{total: b.N}, "count")
	ds = Map(ds, func(v int) (int, error) { return v + 1, nil })
	ds = Filter(ds, func(v int) (bool, error) { return v >= 0, nil })
	SinkTo(ds, countingSink[int]{total: &total})
	b.ResetTimer()
	start := time.Now()
	if err := env.Execute(context.Background(), "chained"); err != nil {
		b.Fatal(err)
	}
	reportPerRecord(b, start)
	if total != int64(b.N) {
		b.Fatalf("sink counted %d, want %d", total, b.N)
	}
}

// BenchmarkChainedPipelineCheckpointed is BenchmarkChainedPipeline with a
// checkpoint every 100ms (in-memory storage): the cost of barriers,
// snapshots and the checkpoint driver on the hot path.
func BenchmarkChainedPipelineCheckpointed(b *testing.B) {
	b.ReportAllocs()
	var total int64
	env := NewEnvironment(WithCheckpointInterval(100*time.Millisecond), WithLogger(discardLogger()))
	ds := FromSource(env, &countSource{total: b.N}, "count")
	ds = Map(ds, func(v int) (int, error) { return v + 1, nil })
	ds = Filter(ds, func(v int) (bool, error) { return v >= 0, nil })
	SinkTo(ds, countingSink[int]{total: &total})
	var checkpoints atomic.Int64
	env.hooks = &testHooks{checkpointCompleted: func(int64, checkpoint.Storage) { checkpoints.Add(1) }}
	b.ResetTimer()
	start := time.Now()
	if err := env.Execute(context.Background(), "chained"); err != nil {
		b.Fatal(err)
	}
	reportPerRecord(b, start)
	b.ReportMetric(float64(checkpoints.Load()), "checkpoints")
	if total != int64(b.N) {
		b.Fatalf("sink counted %d, want %d", total, b.N)
	}
}

// keyedCount keeps a running count per key in ValueState.
type keyedCount struct{ count state.ValueState[int] }

func (k *keyedCount) Open(ctx *KeyedContext[int, int]) error {
	var err error
	k.count, err = state.NewValueState[int]("count").Handle(ctx)
	return err
}

func (k *keyedCount) ProcessElement(ctx *KeyedContext[int, int], v int) error {
	n, _ := k.count.Value()
	n++
	k.count.Update(n)
	ctx.Collect(n)
	return nil
}

func (k *keyedCount) OnTimer(*KeyedContext[int, int], Timer) error { return nil }

// BenchmarkKeyByShuffle: source -> keyBy -> keyed count -> sink at
// parallelism 2: every record crosses a hash shuffle between tasks.
func BenchmarkKeyByShuffle(b *testing.B) {
	b.ReportAllocs()
	var total int64
	env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()))
	ds := FromSource(env, &countSource{total: b.N}, "count")
	counted := KeyedProcessPerSubtask(KeyBy(ds, func(v int) int { return v % 1000 }),
		func() KeyedProcessFunction[int, int, int] { return &keyedCount{} })
	SinkTo(counted, countingSink[int]{total: &total})
	b.ResetTimer()
	start := time.Now()
	if err := env.Execute(context.Background(), "keyBy"); err != nil {
		b.Fatal(err)
	}
	reportPerRecord(b, start)
	if total != int64(b.N) {
		b.Fatalf("sink counted %d, want %d", total, b.N)
	}
}

func atomicAdd(p *int64, n int64) { atomic.AddInt64(p, n) }
