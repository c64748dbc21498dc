package runtime

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// Rule: a channel that ends because its upstream was stopped (a cancel, a
// drain) keeps holding event time where it was: the valve moves no
// watermark for it, now or later. Only a real end of input retires a
// channel from the minimum.
func TestValveStoppedChannelHoldsEventTime(t *testing.T) {
	r := &recorder[int]{}
	v := engine.NewWatermarkValve(3, r)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.InputWatermark(0, 100))
	must(v.InputWatermark(1, 500))
	must(v.InputWatermark(2, 700))
	expectLog(t, "three channels", r.take(), "wm 100")
	end, err := v.EndOfPartition(0, true)
	must(err)
	expectLog(t, "channel 0 at 100 stopped", r.take())
	if end {
		t.Fatal("one of three channels stopped, input reported ended")
	}
	must(v.InputWatermark(1, 900))
	must(v.InputStatus(2, true))
	expectLog(t, "the others advance or go idle behind the stopped one", r.take())
	_, err = v.EndOfPartition(1, false)
	must(err)
	expectLog(t, "channel 1 really ended", r.take())
	end, err = v.EndOfPartition(2, true)
	must(err)
	expectLog(t, "all ended", r.take())
	if !end {
		t.Fatal("every channel ended, input not reported ended")
	}
}

// heldStop is a source task's input whose stop request is held back until
// the test lets it through, so that the test decides which source stops
// first.
type heldStop struct {
	engine.Input
	held bool
}

func (h *heldStop) Stop() { h.held = true }

// Rule: a graceful cancel does not advance event time. Two inputs of a
// keyed operator stand at watermarks 100 and 500; the job is cancelled and
// the input at 100 stops first. No timer at 500 fires, and nothing reaches
// the sink past watermark 100, before the other input stops or after.
func TestGracefulStopDoesNotAdvanceEventTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fast *task
		env := NewEnvironment(WithLogger(discardLogger()))
		env.hooks = &testHooks{taskCreated: func(tk *task) {
			if strings.HasPrefix(tk.name, "Source: fast") {
				tk.input = &heldStop{Input: tk.input}
				fast = tk
			}
		}}
		strategy := watermark.ForGenerator(func() watermark.Generator[ev] { return punctuated{} })
		slow := FromSource(env, &gatedSource{memSource: &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(1)}, gate: &silentAfter{limit: 101}}, "slow", WithWatermarks(strategy))
		fastDS := FromSource(env, &gatedSource{memSource: &memSource[ev]{numSplits: 1, perSplit: -1, gen: genEv(1)}, gate: &silentAfter{limit: 501}}, "fast", WithWatermarks(strategy))
		type fired struct{ Timer, Watermark int64 }
		res := KeyedProcess(KeyBy(Union(slow, fastDS), func(e ev) string { return e.Key }), func(ctx *KeyedContext[string, fired], e ev) error {
			ctx.RegisterEventTimeTimer(100)
			ctx.RegisterEventTimeTimer(500)
			return nil
		}, OnTimer(func(ctx *KeyedContext[string, fired], tm Timer) error {
			ctx.Collect(fired{tm.Timestamp, ctx.CurrentWatermark()})
			return nil
		}))
		sink := newCollectSink[fired]()
		SinkTo(res, sink)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "stop") }()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := sink.all(); len(got) != 1 || got[0] != (fired{100, 100}) {
			t.Errorf("before the cancel: fired %v, want the timer at 100 at watermark 100", got)
		}
		cancel()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := sink.all(); len(got) != 1 {
			t.Errorf("the input at 100 stopped: fired %v; a stop must not let the input at 500 take event time there", got)
		}
		fast.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "stop", Run: func() error {
			fast.input.(*heldStop).Input.Stop()
			return nil
		}})
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got := sink.all(); len(got) != 1 {
			t.Fatalf("after the drain: fired %v, want only the timer at 100", got)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, wm := range sink.wms {
			if wm > 100 {
				t.Fatalf("the sink saw watermark %d, past the 100 where event time stood at the cancel", wm)
			}
		}
	})
}
