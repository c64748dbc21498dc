package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// mainSource wraps memSource with a reader that emits every split's records
// through the reader-wide output, then ends once told there are no more
// splits.
type mainSource struct{ *memSource[ev] }

func (m *mainSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[ev, *memSplit], error) {
	r := &mainReader{memReader: &memReader[ev]{src: m.memSource, ctx: ctx, avail: make(chan struct{})}}
	m.mu.Lock()
	m.readers = append(m.readers, r.memReader)
	m.mu.Unlock()
	return r, nil
}

type mainReader struct{ *memReader[ev] }

func (r *mainReader) PollNext(out connector.ReaderOutput[ev]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		return connector.NothingAvailable, nil
	}
	sp := r.splits[0]
	for ; sp.pos < sp.n; sp.pos++ {
		v, ts := r.src.gen(sp.idx, sp.pos)
		out.CollectWithTimestamp(v, ts)
	}
	r.splits = r.splits[1:]
	return connector.MoreAvailable, nil
}

// Rule (A): once a source's input ended (or it was stopped), nothing runs
// on it any more: a periodic-watermark mail queued before the end emits no
// watermark behind maxWatermark, split events do nothing (an assignment is
// refused), and the periodic-watermark timer is stopped.
func TestEndedSourceEmitsNothingAfterMaxWatermark(t *testing.T) {
	rec := &recorder[ev]{}
	src := &mainSource{memSource: &memSource[ev]{numSplits: 1, perSplit: 300, gen: genEv(3)}}
	coord := newSourceCoordinator[ev, *memSplit, int](opInfo{name: "src", subtask: -1}, src, 1, func(error) {}, gateOptions{})
	tk := &task{name: "src", head: &opInfo{name: "src"}, cfg: &config{autoWatermarkInterval: time.Hour}, mb: newMailbox()}
	defer func() { _ = tk.shutdown() }()
	s := &sourceOperator[ev, *memSplit, int]{info: opInfo{name: "src"}, src: src, coord: coord, par: 1,
		strategy: watermark.ForBoundedOutOfOrderness[ev](0), out: output[ev](rec)}
	if err := s.open(tk); err != nil {
		t.Fatal(err)
	}
	if err := s.addSplits([]*memSplit{{id: "a", n: 300}}); err != nil {
		t.Fatal(err)
	}
	if err := s.noMoreSplits(); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := s.step()
		if err != nil {
			t.Fatal(err)
		}
		if st == inputEnd {
			break
		}
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != maxWatermark {
		t.Fatalf("watermarks at the end of input %v, want maxWatermark last", rec.wms)
	}
	// Mails queued before the end run after it.
	if err := s.periodicEmit(); err != nil {
		t.Fatal(err)
	}
	// A split assigned to a reader that ended after no-more-splits would be
	// read by nobody and kept in no state: it fails the task (the one-place
	// rule).
	if err := s.addSplits([]*memSplit{{id: "b", n: 5}}); err == nil || !strings.Contains(err.Error(), "after signalling no more splits") {
		t.Fatalf("a split assigned after the end: %v, want a failure", err)
	}
	if err := s.noMoreSplits(); err != nil {
		t.Fatal(err)
	}
	if len(rec.wms) == 0 || rec.wms[len(rec.wms)-1] != maxWatermark {
		t.Fatalf("watermarks %v: something was emitted after maxWatermark", rec.wms)
	}
	if r := src.readers[0]; len(r.splits) != 0 {
		t.Fatalf("an ended reader was given %d splits", len(r.splits))
	}
	if s.wmTimer.Stop() {
		t.Fatal("the periodic-watermark timer is still armed after the end of input")
	}
}

// Rule (A): watermarks never go back: the keyed process operator ignores a
// watermark that does not advance its own.
func TestKeyedOperatorIgnoresWatermarkThatDoesNotAdvance(t *testing.T) {
	rec := &recorder[string]{}
	tk := &task{name: "p", head: &opInfo{name: "p"}, cfg: &config{maxParallelism: 128}, mb: newMailbox()}
	defer func() { _ = tk.shutdown() }()
	p := &keyedProcessOperator[string, string, string]{info: opInfo{name: "p"}, keyFn: func(s string) string { return s },
		hash: keygroup.HashString, par: 1, out: output[string](rec),
		newFn: func() KeyedProcessFunction[string, string, string] {
			return KeyedProcessFuncs[string, string, string]{Element: func(*KeyedContext[string, string], string) error { return nil }}
		}}
	if err := p.open(tk); err != nil {
		t.Fatal(err)
	}
	for _, wm := range []int64{maxWatermark, 299, maxWatermark} {
		if err := p.emitWatermark(wm); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(rec.wms, []int64{maxWatermark}) {
		t.Fatalf("forwarded watermarks %v, want only the first maxWatermark", rec.wms)
	}
}

// Rule (B): a channel that ends counts as aligned: barrier 1 on channel 0,
// then channel 1 ends, and barrier 1 is forwarded without waiting further.
func TestEndedChannelCompletesAlignment(t *testing.T) {
	down := newInputGate[int](1, 4)
	out := newRecordWriter(partitionForward, []*inputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &opInfo{name: "t"}, cfg: &config{}, mb: newMailbox(), outputs: []networkOutput{out}}
	up := newInputGate[int](2, 4)
	in := &gateInput[int]{t: tk, gate: up, head: output[int](out), valve: newWatermarkValve(2, out)}
	tk.gate = up
	a := newRecordWriter(partitionForward, []*inputGate[int]{up}, 0, 100, nil, 128, 0)
	b := newRecordWriter(partitionForward, []*inputGate[int]{up}, 1, 100, nil, 128, 0)
	drain := func() {
		for {
			st, err := in.step()
			if err != nil {
				t.Fatal(err)
			}
			if st != inputMore {
				return
			}
		}
	}
	a.broadcastEvent(event{kind: eventBarrier, barrier: checkpointBarrier{CheckpointID: 1}})
	drain()
	if _, got, ok := down.poll(nil, 0); ok {
		t.Fatalf("forwarded %+v before channel 1 delivered the barrier or ended", got.ev)
	}
	b.broadcastEvent(event{kind: eventEndOfPartition})
	drain()
	_, got, ok := down.poll(nil, 0)
	if !ok || got.ev.kind != eventBarrier || got.ev.barrier.CheckpointID != 1 {
		t.Fatal("barrier 1 was not forwarded after the other channel ended")
	}
	if tk.aligning != 0 || up.nblocked != 0 {
		t.Fatalf("alignment still open (aligning %d, %d channels blocked)", tk.aligning, up.nblocked)
	}
}

// Rule (C): a deleted timer leaves the heap at once: "delete the old timer,
// register now+1h" per record keeps the heap at the number of live timers.
func TestDeletedTimersDoNotGrowTheHeap(t *testing.T) {
	q := newTestTimerQueue[int]()
	n := func() int { return q.sets.(*heapTimerSets[int]).len() }
	for i := range 100_000 {
		key := i % 10
		if i >= 10 {
			q.remove(key, int64(i-10)+3_600_000)
		}
		q.add(key, int64(i)+3_600_000)
		if n() > 20 {
			t.Fatalf("after %d records the heap holds %d entries for 10 live timers", i+1, n())
		}
	}
	// And the queue still pops in timestamp order, deletions included.
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[timerEntry[int]]bool{}
	for range 20_000 {
		k, ts := rng.IntN(50), rng.Int64N(1000)
		if rng.IntN(3) == 0 {
			q.remove(k, ts)
			delete(live, timerEntry[int]{ts: ts, key: k})
		} else {
			q.add(k, ts)
			live[timerEntry[int]{ts: ts, key: k}] = true
		}
	}
	for _, e := range q.all() {
		if !live[e] && e.ts < 3_600_000 {
			t.Fatalf("heap holds deleted timer %+v", e)
		}
	}
	last := int64(-1)
	for {
		e, ok := q.peek()
		if !ok {
			break
		}
		q.pop()
		if e.ts < last {
			t.Fatalf("popped %d after %d", e.ts, last)
		}
		last = e.ts
		delete(live, e)
	}
	if len(live) != 0 {
		t.Fatalf("%d live timers never popped", len(live))
	}
}

// Rule (D, the backpressure rule): timers fired by one watermark do not pile
// up in the record writer: with every key's timer due at the final
// maxWatermark and a slow sink in another task, the records in flight stay
// within the network bound, and the watermark follows the timers' records.
func TestTimerBurstRespectsBackpressure(t *testing.T) {
	const keys = 20_000
	env := NewEnvironment(WithBufferSize(bpBufferSize), WithBuffersPerChannel(bpBuffers), WithFlushTimeout(-1))
	src := &memSource[ev]{numSplits: 1, perSplit: keys, gen: func(_, i int) (ev, int64) {
		return ev{Seq: i, Key: strconv.Itoa(i)}, int64(i)
	}}
	var fired, written atomic.Int64
	res := KeyedProcess(KeyBy(FromSource(env, src, "keys"), func(e ev) string { return e.Key }),
		func(ctx *KeyedContext[string, int64], e ev) error {
			ctx.RegisterEventTimeTimer(1 << 40) // beyond the input: fires at the end
			return nil
		}, OnTimer(func(ctx *KeyedContext[string, int64], tm Timer) error {
			fired.Add(1)
			ctx.Collect(ctx.CurrentWatermark())
			return nil
		}))
	const bound = (bpBuffers+1)*bpBufferSize + bpBufferSize + bpBufferSize + 1
	var maxInFlight atomic.Int64
	sink := newCollectSink[int64]()
	stalled := false
	sink.writeFn = func(_ int, _ int64, wc connector.WriteContext) error {
		if !stalled {
			// Stall on the first timer record: a producer that ignores
			// backpressure fires everything meanwhile.
			stalled = true
			deadline := time.Now().Add(300 * time.Millisecond)
			for fired.Load() < keys && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		if n := fired.Load() - written.Add(1) + 1; n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		if wc.CurrentWatermark == maxWatermark {
			return errors.New("a timer record arrived after the watermark that fired it")
		}
		return nil
	}
	SinkTo(res, sink).DisableChaining()
	if err := env.Execute(context.Background(), "timer burst"); err != nil {
		t.Fatal(err)
	}
	if n := sink.count(); n != keys {
		t.Fatalf("sink got %d records, want %d", n, keys)
	}
	if m := maxInFlight.Load(); m > bound {
		t.Fatalf("%d timer records in flight behind a slow sink, bound %d", m, bound)
	}
}

// Rule (E): a panic in an enumerator's async work, which runs off the
// coordinator goroutine, fails the job like any coordinator failure (the
// operator, subtask -1) with the panic and its stack, instead of crashing
// the process.
func TestPanicInAsyncWorkFailsTheJob(t *testing.T) {
	env := NewEnvironment()
	src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(3)}
	src.onEnumerator = func(e *memEnumerator[ev]) {
		e.ctx.CallAsync(func(context.Context) func() error { panic("async boom") })
	}
	SinkTo(FromSource(env, src, "mem"), newCollectSink[ev]())
	err := env.Execute(context.Background(), "async panic")
	var oe *OperatorError
	if !errors.As(err, &oe) || oe.Operator != "Source: mem" || oe.Subtask != -1 {
		t.Fatalf("Execute = %v, want the coordinator's *OperatorError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "panic: async boom") || !strings.Contains(msg, "goroutine") {
		t.Fatalf("error %q does not carry the panic and its stack", msg)
	}
}

// panickyCloser is an enumerator whose Close panics.
type panickyCloser struct{ *memEnumerator[ev] }

func (panickyCloser) Close() error { panic("close boom") }

type panickyCloseSource struct{ *memSource[ev] }

func (s panickyCloseSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[*memSplit]) (connector.SplitEnumerator[*memSplit, int], error) {
	e, err := s.memSource.CreateEnumerator(ctx)
	if err != nil {
		return nil, err
	}
	return panickyCloser{e.(*memEnumerator[ev])}, nil
}

// Rule (E): a panic while the coordinator shuts down (the enumerator's
// Close) fails the coordinator with the panic and its stack; the process
// survives and the shutdown completes.
func TestPanicInCoordinatorShutdownFailsIt(t *testing.T) {
	src := panickyCloseSource{&memSource[ev]{numSplits: 1, perSplit: 1, gen: genEv(1)}}
	errc := make(chan error, 4)
	c := newSourceCoordinator[ev, *memSplit, int](opInfo{name: "src", uid: "u", subtask: -1}, src, 1, func(err error) { errc <- err }, gateOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("coordinator did not stop")
	}
	select {
	case err := <-errc:
		var oe *OperatorError
		if !errors.As(err, &oe) || oe.Subtask != -1 || !strings.Contains(err.Error(), "close boom") || !strings.Contains(err.Error(), "goroutine") {
			t.Fatalf("coordinator failed with %v, want its *OperatorError with the panic and stack", err)
		}
	default:
		t.Fatal("the panic in shutdown did not fail the coordinator")
	}
}
