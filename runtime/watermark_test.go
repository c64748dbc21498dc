package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// recorder is an engine.Output[T] that logs what reaches it.
type recorder[T any] struct {
	log []string
	wms []int64
}

func (r *recorder[T]) Collect(v T, ts int64) error {
	r.log = append(r.log, fmt.Sprintf("rec %v@%d", v, ts))
	return nil
}

func (r *recorder[T]) EmitWatermark(wm int64) error {
	r.log = append(r.log, fmt.Sprintf("wm %d", wm))
	r.wms = append(r.wms, wm)
	return nil
}

func (r *recorder[T]) EmitStatus(idle bool) error {
	if idle {
		r.log = append(r.log, "idle")
	} else {
		r.log = append(r.log, "active")
	}
	return nil
}

func (r *recorder[T]) take() []string {
	l := r.log
	r.log = nil
	return l
}

func expectLog(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: emitted %q, want %q", step, got, want)
	}
}

// Rule (Flink's StatusWatermarkValve): a multi-channel input's watermark is
// the minimum over active channels and never decreases; idle channels do
// not hold it back; when all go idle, the maximum is emitted and the input
// is idle; a channel returning from idleness behind the combined watermark
// is ignored until it catches up; ended channels no longer count.
func TestValveTakesMinimumOverActiveChannels(t *testing.T) {
	r := &recorder[int]{}
	v := engine.NewWatermarkValve(3, r)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.InputWatermark(0, 10))
	must(v.InputWatermark(1, 20))
	expectLog(t, "two of three channels", r.take())
	must(v.InputWatermark(2, 5))
	expectLog(t, "all three", r.take(), "wm 5")
	must(v.InputWatermark(2, 30))
	expectLog(t, "channel 2 advances", r.take(), "wm 10")
	must(v.InputWatermark(0, 8))
	expectLog(t, "a watermark going back is ignored", r.take())

	must(v.InputStatus(0, true))
	expectLog(t, "channel 0 idle: min over 1 and 2", r.take(), "wm 20")
	must(v.InputWatermark(0, 100))
	expectLog(t, "watermarks of an idle channel are ignored", r.take())
	must(v.InputStatus(1, true))
	expectLog(t, "only channel 2 active", r.take(), "wm 30")
	must(v.InputStatus(2, true))
	expectLog(t, "all idle", r.take(), "idle")

	must(v.InputStatus(0, false))
	expectLog(t, "channel 0 back, behind (10 < 30)", r.take(), "active")
	must(v.InputWatermark(0, 25))
	expectLog(t, "still behind: not aligned", r.take())
	must(v.InputWatermark(0, 40))
	expectLog(t, "caught up", r.take(), "wm 40")

	end, err := v.EndOfPartition(0, false)
	must(err)
	if end {
		t.Fatal("one of three channels ended, input reported ended")
	}
	if _, err := v.EndOfPartition(1, false); err != nil {
		t.Fatal(err)
	}
	end, err = v.EndOfPartition(2, false)
	must(err)
	if !end {
		t.Fatal("all channels ended, input not reported ended")
	}
}

// Rule: the last active channel going idle releases the maximum watermark
// over all channels before the idle status, so time advances as far as
// every channel allowed.
func TestValveEmitsMaxWhenAllIdle(t *testing.T) {
	r := &recorder[int]{}
	v := engine.NewWatermarkValve(2, r)
	_ = v.InputWatermark(0, 10)
	_ = v.InputWatermark(1, 50)
	r.take()
	_ = v.InputStatus(1, true)
	_ = v.InputStatus(0, true)
	expectLog(t, "both idle", r.take(), "wm 50", "idle")
}

// Rule: a channel that ended after the end of event time lets the others
// go on when the last open one goes idle: the maximum released then
// counts the ended channels' watermarks. A bounded stream joined with a
// quiet table (TableJoin with idleness) ends while the table's channel
// still holds the minimum; when the table goes idle, the stream's final
// watermark must pass, or every record waiting for it waits forever.
func TestValveIdleAfterOthersEndedReleasesTheirWatermark(t *testing.T) {
	r := &recorder[int]{}
	v := engine.NewWatermarkValve(3, r)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.InputWatermark(0, 1))
	must(v.InputWatermark(1, 30))
	must(v.InputWatermark(2, 40))
	expectLog(t, "three channels", r.take(), "wm 1")
	must(v.InputWatermark(1, engine.MaxWatermark))
	must(v.InputWatermark(2, engine.MaxWatermark))
	for ch := 1; ch <= 2; ch++ {
		if _, err := v.EndOfPartition(ch, false); err != nil {
			t.Fatal(err)
		}
	}
	expectLog(t, "channels 1 and 2 end behind channel 0", r.take())
	must(v.InputStatus(0, true))
	expectLog(t, "channel 0 idle", r.take(), fmt.Sprintf("wm %d", engine.MaxWatermark), "idle")
}

// Rule: a split's output never moves its watermark back: a generator
// emitting a lower one than before is ignored.
func TestSplitWatermarkNeverGoesBack(t *testing.T) {
	mo := &engine.MuxOutput{Mux: &engine.WatermarkMux{}, WM: engine.NoWatermark}
	mo.EmitWatermark(119)
	mo.EmitWatermark(6)
	if mo.WM != 119 {
		t.Fatalf("watermark = %d after 119 then 6, want 119", mo.WM)
	}
}

// punctuated emits a watermark equal to every event's timestamp.
type punctuated struct{}

func (punctuated) OnEvent(_ ev, ts int64, out watermark.Output) { out.EmitWatermark(ts) }
func (punctuated) OnPeriodicEmit(watermark.Output)              {}

// Rule: event-time timers fire when the watermark passes them, never
// earlier, and the final maxWatermark of a bounded input fires the rest.
// Across a shuffle at parallelism 2 the operator's watermark is the minimum
// of its input channels.
func TestEventTimeTimersFireWhenWatermarkPasses(t *testing.T) {
	type fired struct {
		Key       string
		Timer     int64
		Watermark int64
		Domain    TimeDomain
	}
	env := NewEnvironment(WithParallelism(2), WithBufferSize(8))
	src := &memSource[ev]{numSplits: 2, perSplit: 300, gen: genEv(3), perPoll: 5}
	ds := FromSource(env, src, "mem", WithWatermarks(watermark.ForGenerator(func() watermark.Generator[ev] { return punctuated{} })))
	res := KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, fired], e ev) error {
		ctx.RegisterEventTimeTimer(e.TS + 50)
		if e.Seq == 0 {
			ctx.RegisterEventTimeTimer(1_000_000) // beyond the input's end
			ctx.RegisterEventTimeTimer(777)       // deleted below
			ctx.DeleteEventTimeTimer(777)
		}
		return nil
	}, OnTimer(func(ctx *KeyedContext[string, fired], tm Timer) error {
		ctx.Collect(fired{Key: ctx.Key(), Timer: tm.Timestamp, Watermark: ctx.CurrentWatermark(), Domain: tm.Domain})
		return nil
	}))
	sink := newCollectSink[fired]()
	SinkTo(res, sink)
	if err := env.Execute(context.Background(), "event-time"); err != nil {
		t.Fatal(err)
	}
	got := sink.all()
	if len(got) == 0 {
		t.Fatal("no timer fired")
	}
	seen := map[[2]any]bool{}
	sawEarly := false
	for _, f := range got {
		if f.Domain != EventTime {
			t.Fatalf("timer %+v in domain %v", f, f.Domain)
		}
		if f.Watermark < f.Timer {
			t.Fatalf("timer %d of key %s fired at watermark %d, before it was due", f.Timer, f.Key, f.Watermark)
		}
		if f.Timer == 777 {
			t.Fatal("a deleted timer fired")
		}
		if f.Timer == 1_000_000 && f.Watermark != engine.MaxWatermark {
			t.Fatalf("the far timer fired at watermark %d, want the final maxWatermark", f.Watermark)
		}
		if f.Watermark < engine.MaxWatermark {
			sawEarly = true
		}
		k := [2]any{f.Key, f.Timer}
		if seen[k] {
			t.Fatalf("timer %v fired twice", k)
		}
		seen[k] = true
	}
	if !sawEarly {
		t.Fatal("every timer waited for the end of input: watermarks did not flow while records did")
	}
	// Every (key, ts+50) registered fired: 3 keys; timers registered for
	// ts in [0,300) on keys derived from (split, seq).
	want := map[[2]any]bool{}
	for split := 0; split < 2; split++ {
		for i := 0; i < 300; i++ {
			e, _ := genEv(3)(split, i)
			want[[2]any{e.Key, e.TS + 50}] = true
			if i == 0 {
				want[[2]any{e.Key, int64(1_000_000)}] = true
			}
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("%d distinct timers fired, want %d", len(seen), len(want))
	}
}

// Rule: an idle split does not hold back event time: with one split silent,
// the idleness timeout lets the watermark follow the busy split, and an
// event-time timer fires before the (unbounded) input ends.
func TestIdleSplitDoesNotHoldBackEventTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := NewEnvironment(WithParallelism(1), WithAutoWatermarkInterval(100*time.Millisecond))
		// Split 0 emits records all along, 100 every 10ms; split 1,
		// read after split 0 ends, never emits. Were split 0 quiet too,
		// the reader would go idle where it was, behind split 0: split 1
		// might come back with earlier records.
		src := &memSource[ev]{numSplits: 2, perSplit: -1, gen: genEv(1), perPoll: 100}
		src.onPoll = func(int) error {
			time.Sleep(10 * time.Millisecond)
			return nil
		}
		ds := FromSource(env, src, "mem", WithWatermarks(watermark.ForMonotonousTimestamps[ev]().WithIdleness(time.Second)))
		res := KeyedProcess(KeyBy(ds, func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, int64], e ev) error {
			if e.Seq == 0 {
				ctx.RegisterEventTimeTimer(50)
			}
			return nil
		}, OnTimer(func(ctx *KeyedContext[string, int64], tm Timer) error {
			ctx.Collect(ctx.CurrentWatermark())
			return nil
		}))
		sink := newCollectSink[int64]()
		sink.onWrite = make(chan int64, 1)
		SinkTo(res, sink)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		start := time.Now()
		go func() { errc <- env.Execute(ctx, "idleness") }()
		wm := <-sink.onWrite
		if wm >= engine.MaxWatermark || wm < 50 {
			t.Fatalf("timer fired at watermark %d, want a real watermark >= 50", wm)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Fatalf("timer fired after %v, before the silent split could be idle", waited)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// gatedSource wraps memSource so that split 0 stops after gate.limit records
// and split 1 never emits, while both stay assigned (unbounded).
type gatedSource struct {
	*memSource[ev]
	gate *silentAfter
}

type silentAfter struct{ limit int }

func (g *gatedSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[ev, *memSplit], error) {
	return &gatedReader{memReader: &memReader[ev]{src: g.memSource, ctx: ctx}, limit: g.gate.limit}, nil
}

type gatedReader struct {
	*memReader[ev]
	limit int
}

func (r *gatedReader) PollNext(out connector.ReaderOutput[ev]) (connector.InputStatus, error) {
	if r.outs == nil {
		r.outs = map[string]connector.SourceOutput[ev]{}
	}
	for _, sp := range r.splits {
		if _, ok := r.outs[sp.id]; !ok {
			r.outs[sp.id] = out.CreateOutputForSplit(sp.id)
		}
	}
	for _, sp := range r.splits {
		if sp.idx != 0 {
			continue
		}
		for ; sp.pos < r.limit; sp.pos++ {
			v, ts := r.src.gen(sp.idx, sp.pos)
			r.outs[sp.id].CollectWithTimestamp(v, ts)
		}
	}
	return connector.NothingAvailable, nil
}

// Rule: a multi-input operator's event time is the minimum over its active
// inputs (StatusWatermarkValve): with two unioned sources, one stuck at
// watermark 99 holds back a timer at 500 although the other is at 1999;
// once the slow input is idle (WithIdleness), it no longer holds time back
// and the timer fires.
func TestMultiInputWatermarkIsMinimumOverActiveInputs(t *testing.T) {
	for _, idleness := range []time.Duration{0, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			env := NewEnvironment()
			slowStrategy := watermark.ForGenerator(func() watermark.Generator[ev] { return punctuated{} })
			if idleness > 0 {
				slowStrategy = slowStrategy.WithIdleness(idleness)
			}
			slow := FromSource(env, &gatedSource{memSource: &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(1)}, gate: &silentAfter{limit: 100}}, "slow", WithWatermarks(slowStrategy))
			fast := FromSource(env, &gatedSource{memSource: &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(1)}, gate: &silentAfter{limit: 2000}}, "fast",
				WithWatermarks(watermark.ForGenerator(func() watermark.Generator[ev] { return punctuated{} })))
			res := KeyedProcess(KeyBy(Union(slow, fast), func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, int64], e ev) error {
				ctx.RegisterEventTimeTimer(500)
				return nil
			}, OnTimer(func(ctx *KeyedContext[string, int64], tm Timer) error {
				ctx.Collect(ctx.CurrentWatermark())
				return nil
			}))
			sink := newCollectSink[int64]()
			SinkTo(res, sink)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- env.Execute(ctx, "union") }()
			time.Sleep(time.Minute)
			synctest.Wait()
			got := sink.all()
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if idleness == 0 && len(got) != 0 {
				t.Fatalf("timer at 500 fired at watermark %v while one input was at 99", got)
			}
			if idleness > 0 && (len(got) != 1 || got[0] != 1999) {
				t.Fatalf("with the slow input idle, timer firings = %v, want one at watermark 1999", got)
			}
		})
	}
}
