package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/threadcheck"
)

// Every test of the package ends with no goroutine of the engine left: every
// goroutine has an owner that stops and waits for it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The source and sink below are tiny in-memory implementations of the
// connector contracts, written against the interfaces only.

// memSplit is n records of one split; record i of the split is produced by
// the source's gen.
type memSplit struct {
	id  string
	idx int
	n   int
	pos int // next record to emit; the split's state
}

func (s *memSplit) SplitID() string { return s.id }

// memSource is a bounded or unbounded in-memory source of T.
type memSource[T any] struct {
	numSplits int
	perSplit  int // records per split; < 0 is unbounded
	gen       func(split, i int) (T, int64)
	perPoll   int  // records per PollNext, default 64
	pull      bool // enumerator assigns on request instead of eagerly

	// hooks (may be nil)
	onPoll       func(subtask int) error // called at every PollNext
	onEnumerator func(e *memEnumerator[T])
	enumErr      error // returned by the enumerator's Start

	mu      sync.Mutex
	emitted int
	readers []*memReader[T]
}

func (s *memSource[T]) Boundedness() connector.Boundedness {
	if s.perSplit < 0 {
		return connector.ContinuousUnbounded
	}
	return connector.Bounded
}

func (s *memSource[T]) CreateEnumerator(ctx connector.SplitEnumeratorContext[*memSplit]) (connector.SplitEnumerator[*memSplit, int], error) {
	e := &memEnumerator[T]{src: s, ctx: ctx}
	for i := 0; i < s.numSplits; i++ {
		e.unassigned = append(e.unassigned, &memSplit{id: "split-" + strconv.Itoa(i), idx: i, n: s.perSplit})
	}
	if s.onEnumerator != nil {
		s.onEnumerator(e)
	}
	return e, nil
}

func (s *memSource[T]) RestoreEnumerator(connector.SplitEnumeratorContext[*memSplit], int) (connector.SplitEnumerator[*memSplit, int], error) {
	return nil, errors.New("not supported")
}

func (s *memSource[T]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, *memSplit], error) {
	r := &memReader[T]{src: s, ctx: ctx, avail: make(chan struct{})}
	s.mu.Lock()
	s.readers = append(s.readers, r)
	s.mu.Unlock()
	return r, nil
}

func (s *memSource[T]) SplitSerializer() connector.VersionedSerializer[*memSplit] { return nil }
func (s *memSource[T]) EnumeratorStateSerializer() connector.VersionedSerializer[int] {
	return intSerializer{}
}

// intSerializer encodes an int in decimal.
type intSerializer struct{}

func (intSerializer) Version() int                    { return 1 }
func (intSerializer) Serialize(v int) ([]byte, error) { return []byte(strconv.Itoa(v)), nil }
func (intSerializer) Deserialize(version int, data []byte) (int, error) {
	if version != 1 {
		return 0, fmt.Errorf("version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	return strconv.Atoi(string(data))
}

func (s *memSource[T]) emittedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emitted
}

// memEnumerator assigns split i to subtask i mod parallelism when the reader
// registers (push), or hands the next split to whoever asks (pull).
type memEnumerator[T any] struct {
	src        *memSource[T]
	ctx        connector.SplitEnumeratorContext[*memSplit]
	unassigned []*memSplit
	check      *threadcheck.Check
	events     []connector.SourceEvent
}

func (e *memEnumerator[T]) enter() func() {
	if e.check == nil {
		return func() {}
	}
	return e.check.Enter()
}

func (e *memEnumerator[T]) Start() error {
	defer e.enter()()
	return e.src.enumErr
}

func (e *memEnumerator[T]) HandleSplitRequest(subtask int) error {
	defer e.enter()()
	if len(e.unassigned) == 0 {
		if e.src.perSplit < 0 {
			return nil
		}
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	sp := e.unassigned[0]
	e.unassigned = e.unassigned[1:]
	return e.ctx.AssignSplit(sp, subtask)
}

func (e *memEnumerator[T]) AddSplitsBack(splits []*memSplit, _ int) error {
	defer e.enter()()
	e.unassigned = append(e.unassigned, splits...)
	return nil
}

func (e *memEnumerator[T]) AddReader(subtask int) error {
	defer e.enter()()
	if e.src.pull {
		return nil
	}
	var mine, rest []*memSplit
	for _, sp := range e.unassigned {
		if sp.idx%e.ctx.CurrentParallelism() == subtask {
			mine = append(mine, sp)
		} else {
			rest = append(rest, sp)
		}
	}
	e.unassigned = rest
	if len(mine) > 0 {
		if err := e.ctx.AssignSplits(connector.SplitsAssignment[*memSplit]{Assignment: map[int][]*memSplit{subtask: mine}}); err != nil {
			return err
		}
	}
	if e.src.perSplit < 0 {
		return nil
	}
	return e.ctx.SignalNoMoreSplits(subtask)
}

func (e *memEnumerator[T]) SnapshotState(int64) (int, error) { return len(e.unassigned), nil }
func (e *memEnumerator[T]) NotifyCheckpointComplete(int64) error {
	return nil
}

func (e *memEnumerator[T]) HandleSourceEvent(subtask int, ev connector.SourceEvent) error {
	defer e.enter()()
	e.events = append(e.events, ev)
	return e.ctx.SendEventToSourceReader(subtask, fmt.Sprintf("reply to %v", ev))
}

func (e *memEnumerator[T]) Close() error { return nil }

// memReader reads its splits one after the other, through one output per
// split. New splits arrive through AddSplits, which runs as a mail and
// wakes the task, so Available never needs to fire for them.
type memReader[T any] struct {
	src     *memSource[T]
	ctx     connector.SourceReaderContext
	splits  []*memSplit
	outs    map[string]connector.SourceOutput[T]
	noMore  bool
	asked   bool
	avail   chan struct{}
	events  []connector.SourceEvent
	started bool
	closed  int
}

func (r *memReader[T]) Start() error {
	r.started = true
	if r.src.pull {
		r.ctx.SendSplitRequest()
		r.asked = true
	}
	return nil
}

func (r *memReader[T]) PollNext(out connector.ReaderOutput[T]) (connector.InputStatus, error) {
	if r.src.onPoll != nil {
		if err := r.src.onPoll(r.ctx.SubtaskIndex()); err != nil {
			return connector.NothingAvailable, err
		}
	}
	if r.outs == nil {
		r.outs = map[string]connector.SourceOutput[T]{}
	}
	for _, sp := range r.splits {
		if _, ok := r.outs[sp.id]; !ok {
			r.outs[sp.id] = out.CreateOutputForSplit(sp.id)
		}
	}
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		if r.src.pull && !r.asked {
			r.ctx.SendSplitRequest()
			r.asked = true
		}
		return connector.NothingAvailable, nil
	}
	sp := r.splits[0]
	so := r.outs[sp.id]
	per := r.src.perPoll
	if per <= 0 {
		per = 64
	}
	emitted := 0
	for ; emitted < per && (sp.n < 0 || sp.pos < sp.n); emitted++ {
		v, ts := r.src.gen(sp.idx, sp.pos)
		sp.pos++
		so.CollectWithTimestamp(v, ts)
	}
	r.src.mu.Lock()
	r.src.emitted += emitted
	r.src.mu.Unlock()
	if sp.n >= 0 && sp.pos >= sp.n {
		out.ReleaseOutputForSplit(sp.id)
		delete(r.outs, sp.id)
		r.splits = r.splits[1:]
		if len(r.splits) == 0 && r.src.pull {
			r.asked = false
		}
	}
	return connector.MoreAvailable, nil
}

func (r *memReader[T]) Available() <-chan struct{} { return r.avail }

func (r *memReader[T]) SnapshotState(int64) ([]*memSplit, error) { return r.splits, nil }

func (r *memReader[T]) AddSplits(splits []*memSplit) error {
	r.splits = append(r.splits, splits...)
	r.asked = false
	return nil
}

func (r *memReader[T]) NotifyNoMoreSplits()                  { r.noMore = true }
func (r *memReader[T]) NotifyCheckpointComplete(int64) error { return nil }
func (r *memReader[T]) HandleSourceEvent(ev connector.SourceEvent) error {
	r.events = append(r.events, ev)
	return nil
}
func (r *memReader[T]) PauseOrResumeSplits(_, _ []string) error { return nil }
func (r *memReader[T]) Close() error {
	r.closed++
	return nil
}

// collectSink keeps everything written to it, by subtask.
type collectSink[T any] struct {
	mu       sync.Mutex
	got      []T
	bySub    map[int][]T
	wms      []int64
	flushes  map[int]int
	closes   map[int]int
	writeFn  func(subtask int, v T, ctx connector.WriteContext) error // may block or fail
	onWrite  chan T                                                   // if set, every element is also sent here
	creating func(subtask int) error
	// flushFn runs at every Flush before a checkpoint, with the writer's
	// context; it may block.
	flushFn func(subtask int, ctx context.Context) error
}

func newCollectSink[T any]() *collectSink[T] {
	return &collectSink[T]{bySub: map[int][]T{}, flushes: map[int]int{}, closes: map[int]int{}}
}

func (s *collectSink[T]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	if s.creating != nil {
		if err := s.creating(ctx.SubtaskIndex()); err != nil {
			return nil, err
		}
	}
	return &collectWriter[T]{s: s, sub: ctx.SubtaskIndex(), ctx: ctx.Context()}, nil
}

func (s *collectSink[T]) all() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.got...)
}

func (s *collectSink[T]) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

type collectWriter[T any] struct {
	s   *collectSink[T]
	sub int
	ctx context.Context
}

func (w *collectWriter[T]) Write(v T, ctx connector.WriteContext) error {
	if w.s.writeFn != nil {
		if err := w.s.writeFn(w.sub, v, ctx); err != nil {
			return err
		}
	}
	w.s.mu.Lock()
	w.s.got = append(w.s.got, v)
	w.s.bySub[w.sub] = append(w.s.bySub[w.sub], v)
	w.s.wms = append(w.s.wms, ctx.CurrentWatermark)
	w.s.mu.Unlock()
	if w.s.onWrite != nil {
		w.s.onWrite <- v
	}
	return nil
}

func (w *collectWriter[T]) Flush(endOfInput bool) error {
	if !endOfInput && w.s.flushFn != nil {
		if err := w.s.flushFn(w.sub, w.ctx); err != nil {
			return err
		}
	}
	if endOfInput {
		w.s.mu.Lock()
		w.s.flushes[w.sub]++
		w.s.mu.Unlock()
	}
	return nil
}

func (w *collectWriter[T]) Close() error {
	w.s.mu.Lock()
	w.s.closes[w.sub]++
	w.s.mu.Unlock()
	return nil
}

// ev is the record type of most tests.
type ev struct {
	Split int
	Seq   int
	Key   string
	TS    int64
}

func genEv(numKeys int) func(split, i int) (ev, int64) {
	return func(split, i int) (ev, int64) {
		ts := int64(i)
		return ev{Split: split, Seq: i, Key: "k" + strconv.Itoa((split*7919+i)%numKeys), TS: ts}, ts
	}
}

// openOp opens op on tk as a task built by buildTasks does: an operator of
// runtime's that uses more of its task than engine.Task gives gets tk
// first (taskBound).
func openOp(op engine.Lifecycle, tk *task) error {
	if b, ok := op.(taskBound); ok {
		b.bindTask(tk)
	}
	return op.Open(tk)
}
