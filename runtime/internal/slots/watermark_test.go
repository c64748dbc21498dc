package slots

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// step is one input of a Merge and what the partition's watermark and
// status must be after it.
type step struct {
	// exactly one of: a marker, or a record from slot record (>= 0)
	marker *Marker
	record int

	wm       int64
	advanced bool
	idle     bool
	changed  bool
	ended    bool
}

func wmark(slot int, wm int64) *Marker {
	return &Marker{Kind: WatermarkMarker, Slot: slot, Watermark: wm}
}
func idleMk(slot int) *Marker { return &Marker{Kind: IdleMarker, Slot: slot} }
func end(slot int) *Marker    { return &Marker{Kind: EndMarker, Slot: slot} }

// runMerge feeds steps to a merge of n upstream slots, checking each
// output, and checks that the watermark it reports never goes back.
func runMerge(t *testing.T, n int, steps []step) {
	t.Helper()
	m, err := NewMerge(n)
	if err != nil {
		t.Fatal(err)
	}
	prev := NoWatermark
	for i, s := range steps {
		var out Output
		var what string
		if s.marker != nil {
			out, err = m.Marker(*s.marker)
			what = fmt.Sprintf("marker %+v", *s.marker)
		} else {
			out, err = m.Record(s.record)
			what = fmt.Sprintf("record from slot %d", s.record)
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, what, err)
		}
		if out.Watermark < prev {
			t.Fatalf("step %d (%s): watermark went back from %d to %d", i, what, prev, out.Watermark)
		}
		prev = out.Watermark
		want := Output{Watermark: s.wm, Advanced: s.advanced, Idle: s.idle, StatusChanged: s.changed, Ended: s.ended}
		if out != want {
			t.Fatalf("step %d (%s): %+v; want %+v", i, what, out, want)
		}
	}
}

// A downstream partition's watermark is the minimum over its upstream
// slots, emitted only when it moves forward.
func TestPartitionWatermarkIsMinimumOverUpstreamSlots(t *testing.T) {
	runMerge(t, 3, []step{
		{marker: wmark(0, 100), wm: NoWatermark},
		{marker: wmark(1, 50), wm: NoWatermark},
		{marker: wmark(2, 70), wm: 50, advanced: true},
		{marker: wmark(1, 90), wm: 70, advanced: true},
		{marker: wmark(2, 80), wm: 80, advanced: true},
		{marker: wmark(0, 120), wm: 80},
		{marker: wmark(1, 85), wm: 80}, // slot 1 back from 90 to 85: ignored
		{marker: wmark(2, 200), wm: 90, advanced: true},
	})
}

// An upstream slot never heard from holds the watermark back until it is
// known (its first watermark) or says it is idle.
func TestSlotNeverHeardFromHoldsBackUntilIdleOrKnown(t *testing.T) {
	t.Run("until known", func(t *testing.T) {
		runMerge(t, 2, []step{
			{marker: wmark(0, 100), wm: NoWatermark},
			{marker: wmark(0, 500), wm: NoWatermark},
			{record: 1, wm: NoWatermark}, // a record says nothing of its watermark
			{marker: wmark(1, 300), wm: 300, advanced: true},
		})
	})
	t.Run("until idle", func(t *testing.T) {
		runMerge(t, 2, []step{
			{marker: wmark(0, 100), wm: NoWatermark},
			{marker: idleMk(1), wm: 100, advanced: true},
			{marker: wmark(0, 200), wm: 200, advanced: true},
		})
	})
}

// An idle slot stops holding the watermark back; the last active slot
// going idle makes the partition idle, at the maximum watermark over the
// slots; the next record or watermark of a slot makes it active again,
// and a slot back behind the partition's watermark counts only once it
// has caught up, so the watermark never goes back.
func TestIdleSlotStopsHoldingBackAndReturnsOnItsNextRecordOrMarker(t *testing.T) {
	runMerge(t, 3, []step{
		{marker: wmark(0, 100), wm: NoWatermark},
		{marker: wmark(1, 200), wm: NoWatermark},
		{marker: wmark(2, 300), wm: 100, advanced: true},
		{marker: idleMk(0), wm: 200, advanced: true},
		{marker: wmark(1, 400), wm: 300, advanced: true},
		{marker: idleMk(0), wm: 300}, // idle again: nothing changes
		{record: 0, wm: 300},         // active again at 100, behind: left out
		{marker: wmark(2, 500), wm: 400, advanced: true},
		{marker: wmark(0, 350), wm: 400}, // still behind 400
		{marker: wmark(0, 450), wm: 400}, // caught up, now slot 1 (400) holds it
		{marker: idleMk(0), wm: 400},
		{marker: idleMk(1), wm: 500, advanced: true},
		{marker: idleMk(2), wm: 500, idle: true, changed: true},
		{marker: wmark(1, 420), wm: 500, changed: true}, // active again, behind
		{marker: wmark(1, 600), wm: 600, advanced: true},
	})
}

// End of input: an ended slot no longer holds the watermark back and
// anything it sends after is ignored; when every slot ended the
// partition's input ended, at MaxWatermark; the remaining slots all idle
// make the partition idle.
func TestEndedSlotsLeaveTheMinimumAndAllEndedEndsThePartition(t *testing.T) {
	runMerge(t, 3, []step{
		{marker: wmark(0, 100), wm: NoWatermark},
		{marker: wmark(1, 200), wm: NoWatermark},
		{marker: wmark(2, 300), wm: 100, advanced: true},
		{marker: end(0), wm: 200, advanced: true},
		{marker: wmark(0, 50), wm: 200}, // after its end: ignored
		{record: 0, wm: 200},
		{marker: idleMk(1), wm: 300, advanced: true},
		{marker: idleMk(2), wm: 300, idle: true, changed: true},
		{marker: end(1), wm: 300, idle: true},
		{marker: end(2), wm: MaxWatermark, advanced: true, changed: true, ended: true},
	})
}

// A savepoint of a distributed job drains its shuffles: a partition is
// drained once every upstream slot that has not ended wrote its stop
// marker, which follows everything the slot wrote before the savepoint.
// The marker moves neither the watermark nor the status (a stop is not
// the end of event time), and a slot that writes again after it (the job
// went on) holds the drain back until its next stop marker. A restored
// merge remembers which slots stopped, so a reader restarted during the
// drain does not wait for markers it read before its checkpoint.
func TestStopMarkerDrainsAPartitionOnceEveryOpenSlotStopped(t *testing.T) {
	stop := func(slot int) *Marker { return &Marker{Kind: StopMarker, Slot: slot} }
	m, err := NewMerge(3)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(mk *Marker) Output {
		t.Helper()
		out, err := m.Marker(*mk)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, mk := range []*Marker{wmark(0, 100), wmark(1, 200), wmark(2, 300), end(2)} {
		apply(mk)
	}
	if m.Drained() {
		t.Fatal("drained before any stop marker")
	}
	if out := apply(stop(0)); out.Advanced || out.StatusChanged || out.Watermark != 100 || m.Drained() {
		t.Fatalf("slot 0 stopped: %+v drained %v; want the watermark unmoved at 100, not drained (slot 1 has not stopped)", out, m.Drained())
	}
	if _, err := m.Record(0); err != nil || m.Drained() {
		t.Fatalf("slot 0 wrote again: drained %v (%v); want its stop forgotten", m.Drained(), err)
	}
	apply(stop(1))
	if m.Drained() {
		t.Fatal("drained while slot 0 wrote after its stop marker")
	}
	if out := apply(stop(0)); out.Advanced || out.Ended || !m.Drained() {
		t.Fatalf("every open slot stopped: %+v drained %v; want drained, neither ended nor advanced", out, m.Drained())
	}
	restored, rest, err := RestoreMerge(m.AppendState(nil), 3)
	if err != nil || len(rest) != 0 || !restored.Drained() || restored.Watermark() != 100 {
		t.Fatalf("restored: drained %v at %d (%v, %d bytes left); want drained at 100", restored.Drained(), restored.Watermark(), err, len(rest))
	}
	if out := apply(wmark(1, 400)); out.Watermark != 100 {
		t.Fatalf("slot 1 went on: %+v; want the watermark at slot 0's 100", out)
	}
	if m.Drained() {
		t.Fatal("drained after slot 1 went on with a watermark")
	}
}

// Slots handed over mid-stream: the new owner of an upstream slot,
// restored from an older checkpoint, writes lower watermarks than the old
// owner did; the slot continues from where the partition last saw it, the
// watermark never goes back, and moves on once the new owner passes the
// old one. A slot idle when its owner died is active again with the new
// owner's first marker and holds the watermark from where it stood.
func TestHandedOverSlotContinuesItsWatermark(t *testing.T) {
	runMerge(t, 2, []step{
		{marker: wmark(0, 500), wm: NoWatermark},
		{marker: wmark(1, 400), wm: 400, advanced: true},
		// slot 0 changes owner; the new one restored a checkpoint at 300
		{marker: wmark(0, 300), wm: 400},
		{marker: wmark(1, 700), wm: 500, advanced: true}, // slot 0 still counts at 500
		{marker: wmark(0, 450), wm: 500},
		{marker: wmark(0, 650), wm: 650, advanced: true},
		// slot 1 goes idle, its owner dies, the new owner starts behind
		{marker: idleMk(1), wm: 650},
		{marker: wmark(0, 900), wm: 900, advanced: true},
		{marker: wmark(1, 600), wm: 900}, // active again, behind 900: left out
		{marker: wmark(0, 1000), wm: 1000, advanced: true},
		{marker: wmark(1, 950), wm: 1000},
		{marker: wmark(1, 1100), wm: 1000}, // aligned again, holds at 1000 against slot 0
		{marker: wmark(0, 1200), wm: 1100, advanced: true},
	})
}

func TestMarkerFromUnknownSlotIsRefused(t *testing.T) {
	m, err := NewMerge(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Marker(Marker{Kind: WatermarkMarker, Slot: 2, Watermark: 1}); !errors.Is(err, ErrUnknownSlot) {
		t.Fatalf("marker from slot 2 of 2: %v; want ErrUnknownSlot", err)
	}
	if _, err := m.Record(-1); !errors.Is(err, ErrUnknownSlot) {
		t.Fatalf("record from slot -1: %v; want ErrUnknownSlot", err)
	}
	if _, err := NewMerge(0); err == nil {
		t.Fatal("NewMerge(0) succeeded")
	}
}

func TestMarkersRoundTrip(t *testing.T) {
	for _, mk := range []Marker{
		{Kind: WatermarkMarker, Slot: 0, Watermark: 0},
		{Kind: WatermarkMarker, Slot: 15, Watermark: 1733100000000},
		{Kind: WatermarkMarker, Slot: 3, Watermark: NoWatermark},
		{Kind: IdleMarker, Slot: 127},
		{Kind: EndMarker, Slot: 1, Watermark: MaxWatermark},
		{Kind: StopMarker, Slot: 2},
	} {
		b, err := EncodeMarker(mk)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMarker(b)
		if err != nil || got != mk {
			t.Fatalf("DecodeMarker(EncodeMarker(%+v)) = %+v, %v", mk, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 1, 0, 0}, {1, 9, 0, 0}, {1, 1, 0}, {1, 1, 0, 0, 0}} {
		if m, err := DecodeMarker(bad); err == nil {
			t.Errorf("DecodeMarker(%x) = %+v; want an error", bad, m)
		}
	}
	if _, err := EncodeMarker(Marker{Kind: 0}); err == nil {
		t.Error("EncodeMarker of kind 0 succeeded")
	}
}

// A merge restored from its state, as a reader's checkpoint keeps it,
// goes on exactly as the merge it was taken from: random steps (markers
// of every kind, records) fed to both, the copy replaced by a restore of
// itself every few steps, give the same outputs.
func TestMergeRestoredFromItsStateContinuesAsTheOriginal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 4
	for run := range 200 {
		orig, _ := NewMerge(n)
		cp, _ := NewMerge(n)
		for i := range 60 {
			if rng.IntN(4) == 0 {
				state := cp.AppendState([]byte("x"))
				got, rest, err := RestoreMerge(state[1:], n)
				if err != nil || len(rest) != 0 {
					t.Fatalf("run %d step %d: restore: %v (%d bytes left)", run, i, err, len(rest))
				}
				cp = got
			}
			slot := rng.IntN(n)
			var a, b Output
			var errA, errB error
			switch k := rng.IntN(10); {
			case k < 5:
				mk := Marker{Kind: WatermarkMarker, Slot: slot, Watermark: int64(rng.IntN(100))}
				a, errA = orig.Marker(mk)
				b, errB = cp.Marker(mk)
			case k < 7:
				a, errA = orig.Marker(Marker{Kind: IdleMarker, Slot: slot})
				b, errB = cp.Marker(Marker{Kind: IdleMarker, Slot: slot})
			case k < 8:
				a, errA = orig.Marker(Marker{Kind: EndMarker, Slot: slot})
				b, errB = cp.Marker(Marker{Kind: EndMarker, Slot: slot})
			case k < 9 && rng.IntN(2) == 0:
				a, errA = orig.Marker(Marker{Kind: StopMarker, Slot: slot})
				b, errB = cp.Marker(Marker{Kind: StopMarker, Slot: slot})
			default:
				a, errA = orig.Record(slot)
				b, errB = cp.Record(slot)
			}
			if errA != nil || errB != nil || a != b || orig.Drained() != cp.Drained() {
				t.Fatalf("run %d step %d: original %+v drained %v (%v), restored %+v drained %v (%v)", run, i, a, orig.Drained(), errA, b, cp.Drained(), errB)
			}
		}
	}
	m, _ := NewMerge(3)
	state := m.AppendState(nil)
	if _, _, err := RestoreMerge(state, 4); err == nil || !strings.Contains(err.Error(), "of 3 upstream slots, the job has 4") {
		t.Errorf("a state of 3 slots restored as 4: %v", err)
	}
	for _, bad := range [][]byte{nil, {2}, state[:len(state)-1]} {
		if _, _, err := RestoreMerge(bad, 3); err == nil {
			t.Errorf("RestoreMerge(%x) succeeded", bad)
		}
	}
}
