package watermark

import (
	"testing"
	"testing/synctest"
	"time"
)

// recorder is an Output that keeps what it was told.
type recorder struct {
	wms  []int64
	idle bool
}

func (r *recorder) EmitWatermark(ts int64) { r.wms = append(r.wms, ts) }
func (r *recorder) MarkIdle()              { r.idle = true }
func (r *recorder) MarkActive()            { r.idle = false }

// Rule (Flink's BoundedOutOfOrdernessWatermarks): the periodic watermark is
// the largest timestamp seen minus the allowed lateness minus 1 ms, and
// nothing before the first event.
func TestBoundedOutOfOrdernessGenerator(t *testing.T) {
	g := ForBoundedOutOfOrderness[int](10 * time.Millisecond).Generator(nil)
	r := &recorder{}
	g.OnPeriodicEmit(r)
	if len(r.wms) != 0 {
		t.Fatalf("watermarks before any event: %v, want none", r.wms)
	}
	for _, ts := range []int64{100, 130, 120} {
		g.OnEvent(0, ts, r)
	}
	g.OnPeriodicEmit(r)
	if len(r.wms) != 1 || r.wms[0] != 119 {
		t.Fatalf("watermarks %v, want [130-10-1 = 119]", r.wms)
	}
	m := ForMonotonousTimestamps[int]().Generator(nil)
	r = &recorder{}
	m.OnEvent(0, 7, r)
	m.OnPeriodicEmit(r)
	if len(r.wms) != 1 || r.wms[0] != 6 {
		t.Fatalf("monotonous watermarks %v, want [7-1 = 6]", r.wms)
	}
}

// Rule (Flink's WatermarksWithIdleness): a split that sees no record for
// the idleness timeout is marked idle, and the next record makes it active.
func TestIdlenessMarksQuietSplitIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := ForMonotonousTimestamps[int]().WithIdleness(time.Second).Generator(nil)
		r := &recorder{}
		g.OnEvent(0, 10, r)
		g.OnPeriodicEmit(r)
		if r.idle {
			t.Fatal("idle right after an event")
		}
		time.Sleep(999 * time.Millisecond)
		g.OnPeriodicEmit(r)
		if r.idle {
			t.Fatal("idle before the timeout")
		}
		time.Sleep(time.Millisecond)
		g.OnPeriodicEmit(r)
		if !r.idle {
			t.Fatal("not idle after the timeout without events")
		}
		g.OnEvent(0, 20, r)
		if r.idle {
			t.Fatal("still idle after an event")
		}
	})
}

// Rule: None makes no generator, and every other strategy does.
func TestNoneGeneratesNothing(t *testing.T) {
	if None[int]().Generates() || None[int]().Generator(nil) != nil {
		t.Fatal("None makes a generator")
	}
	var zero Strategy[int]
	if zero.Generates() {
		t.Fatal("the zero Strategy is not None")
	}
	if !ForMonotonousTimestamps[int]().Generates() {
		t.Fatal("ForMonotonousTimestamps makes no generator")
	}
}
