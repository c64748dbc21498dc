package runtime

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// flushJob: a source that emits a few records and then nothing, feeding a
// sink in another task through buffers far larger than what is emitted.
func flushJob(t *testing.T, flushTimeout time.Duration, strategy watermark.Strategy[ev]) (*Environment, *collectSink[ev]) {
	t.Helper()
	env := NewEnvironment(WithBufferSize(1000), WithFlushTimeout(flushTimeout))
	src := &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(3)}
	ds := FromSource(env, &gatedSource{memSource: src, gate: &silentAfter{limit: 5}}, "mem", WithWatermarks(strategy))
	sink := newCollectSink[ev]()
	sink.onWrite = make(chan ev, 16)
	SinkTo(ds, sink).DisableChaining()
	return env, sink
}

// Rule: a partly filled buffer is sent when the flush timeout expires
// (Flink's execution.buffer-timeout), not before; with timeout 0 it is
// sent after every step.
func TestBufferIsFlushedOnTimeout(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		want    time.Duration
	}{{300 * time.Millisecond, 300 * time.Millisecond}, {0, 0}} {
		synctest.Test(t, func(t *testing.T) {
			env, sink := flushJob(t, c.timeout, watermark.None[ev]())
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			start := time.Now()
			go func() { errc <- env.Execute(ctx, "flush") }()
			<-sink.onWrite
			if waited := time.Since(start); waited != c.want {
				t.Fatalf("flush timeout %v: first record arrived after %v, want %v", c.timeout, waited, c.want)
			}
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Rule: buffers are flushed before an event is broadcast: with the flush
// timeout disabled, records reach the sink only when a watermark (here
// punctuated) or the end of the partition pushes them out.
func TestBufferIsFlushedBeforeEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env, sink := flushJob(t, -1, watermark.None[ev]())
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "no events") }()
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := sink.Count(); n != 0 {
			t.Fatalf("%d records arrived with no flush timeout and no event", n)
		}
		cancel() // the end of partition flushes
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if n := sink.Count(); n != 5 {
			t.Fatalf("%d records arrived after the end of partition, want 5", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		env, sink := flushJob(t, -1, watermark.ForGenerator(func() watermark.Generator[ev] { return punctuated{} }))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "watermarks") }()
		synctest.Wait()
		if n := sink.Count(); n != 5 {
			t.Fatalf("%d records arrived, want all 5 flushed ahead of their watermarks", n)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// Rule: checkpoint barriers travel in-band: a barrier follows the records
// sent before it on its channel, and a task forwards it downstream once it
// arrived on every open input channel, after flushing what it emitted
// before.
func TestBarrierIsForwardedAfterAllChannels(t *testing.T) {
	down := engine.NewInputGate[int](1, 4)
	out := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{down}, 0, 100, nil, 128, 0)
	tk := &task{name: "t", head: &engine.OpInfo{Name: "t"}, cfg: &config{}, mb: engine.NewMailbox(), outputs: []engine.NetworkOutput{out}}
	up := engine.NewInputGate[int](2, 4)
	in := &gateInput[int]{t: tk, gate: up, head: engine.Output[int](out), valve: engine.NewWatermarkValve(2, out)}
	tk.gate = up
	a := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 0, 100, nil, 128, 0)
	b := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{up}, 1, 100, nil, 128, 0)
	barrier := engine.Event{Kind: engine.EventBarrier, Barrier: engine.CheckpointBarrier{CheckpointID: 7, Timestamp: 1}}

	_ = a.Collect(1, 0)
	_ = a.Collect(2, 0)
	a.BroadcastEvent(barrier)
	for {
		st, err := in.Step()
		if err != nil {
			t.Fatal(err)
		}
		if st == engine.InputNothing {
			break
		}
	}
	if _, got, ok := down.Poll(nil, 0); ok {
		t.Fatalf("forwarded %+v after the barrier arrived on one of two channels", got)
	}
	_ = b.Collect(3, 0)
	b.BroadcastEvent(barrier)
	for {
		st, _ := in.Step()
		if st == engine.InputNothing {
			break
		}
	}
	_, got, ok := down.Poll(nil, 0)
	if !ok {
		t.Fatal("nothing forwarded after the barrier arrived on every channel")
	}
	var vals []int
	for _, r := range got.Records {
		vals = append(vals, r.Value)
	}
	if len(vals) != 3 || got.Ev.Kind != engine.EventBarrier || got.Ev.Barrier.CheckpointID != 7 {
		t.Fatalf("forwarded records %v then %v (checkpoint %d), want the 3 records then barrier 7", vals, got.Ev.Kind, got.Ev.Barrier.CheckpointID)
	}
}

// Rule: a channel holds at most its capacity in batches; a full channel
// refuses the batch (the writer keeps it pending and reports itself
// unavailable) and signals space once the consumer takes one.
func TestChannelIsBounded(t *testing.T) {
	g := engine.NewInputGate[int](1, 2)
	w := engine.NewRecordWriter(engine.PartitionForward, []*engine.InputGate[int]{g}, 0, 2, nil, 128, 0)
	for i := 0; i < 6; i++ {
		_ = w.Collect(i, 0)
	}
	if w.Available() {
		t.Fatal("writer available with 3 full batches for a channel of 2")
	}
	if w.RetryPending() {
		t.Fatal("pending batch delivered although the channel is still full")
	}
	space := w.SpaceReady()
	_, b, _ := g.Poll(nil, 0)
	select {
	case <-space:
	default:
		t.Fatal("taking a batch did not signal space")
	}
	if !w.RetryPending() {
		t.Fatal("pending batch not delivered after space was made")
	}
	want := 0
	for _, r := range b.Records {
		if r.Value != want {
			t.Fatalf("got %d, want %d: order broken", r.Value, want)
		}
		want++
	}
	for {
		// Hand the batch just read back while taking the next one; a
		// shadowed b here would recycle the first batch every time.
		var ok bool
		_, b, ok = g.Poll(b, 0)
		if !ok {
			break
		}
		for _, r := range b.Records {
			if r.Value != want {
				t.Fatalf("got %d, want %d: order broken", r.Value, want)
			}
			want++
		}
	}
	if want != 6 {
		t.Fatalf("received %d records, want 6", want)
	}
	// Every batch consumed was handed back once (the last by the poll
	// that found nothing), for the producer to reuse: the free list holds
	// distinct batches.
	free := g.Channels[0].Free
	for i := range free {
		for j := range i {
			if free[i] == free[j] {
				t.Fatalf("batch %p recycled twice: the free list is %v", free[i], free)
			}
		}
	}
	if len(free) != 3 {
		t.Fatalf("%d batches were recycled, want the 3 consumed", len(free))
	}
}

// Rule: a writer waiting for room wakes when any of its pending targets
// has room, not only the first: otherwise a slow first target holds back
// batches (a barrier among them) that the others could take.
func TestBlockedWriterWakesForAnyTarget(t *testing.T) {
	g0, g1 := engine.NewInputGate[int](1, 1), engine.NewInputGate[int](1, 1)
	w := engine.NewRecordWriter(engine.PartitionRebalance, []*engine.InputGate[int]{g0, g1}, 0, 1, nil, 128, 0)
	for i := range 4 {
		_ = w.Collect(i, 0) // one batch per record, alternating targets
	}
	if w.Available() || w.RetryPending() {
		t.Fatal("both targets full, yet the writer is available")
	}
	space := w.SpaceReady()
	if _, _, ok := g1.Poll(nil, 0); !ok {
		t.Fatal("nothing queued for target 1")
	}
	select {
	case <-space:
	default:
		t.Fatal("target 1 took a batch, and the writer waiting for room was not woken")
	}
}
