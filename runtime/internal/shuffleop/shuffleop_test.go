package shuffleop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/slots"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/state"
)

// collected is what an operator emitted: values with their timestamps,
// and watermarks.
type collected[O any] struct {
	vals []O
	ts   []int64
	wms  []int64
}

func (r *collected[O]) Collect(v O, ts int64) error {
	r.vals, r.ts = append(r.vals, v), append(r.ts, ts)
	return nil
}
func (r *collected[O]) EmitWatermark(wm int64) error { r.wms = append(r.wms, wm); return nil }
func (r *collected[O]) EmitStatus(bool) error        { return nil }

func (r *collected[O]) take() []O {
	v := r.vals
	r.vals, r.ts = nil, nil
	return v
}

// drainTask is the engine.Task of a slot that may drain for a savepoint:
// it records the channels the operators said are drained. The methods a
// shuffle operator does not use are the embedded nil Task's, which panic
// if called.
type drainTask struct {
	engine.Task
	draining bool
	drained  []string
}

func (*drainTask) Restored() *engine.RestoredState { return nil }
func (d *drainTask) DrainingForSavepoint() bool    { return d.draining }
func (d *drainTask) ShuffleDrained(channel string) { d.drained = append(d.drained, channel) }

// Records crossing a shuffle in batches come out as they went in: per
// partition in emission order, each with its own timestamp (none
// included), a batch emitted when full, at a barrier and at the end of
// input, nothing left buffered at a barrier.
func TestShuffleBatchesKeepEveryRecordOrderAndTimestamp(t *testing.T) {
	serde := state.DefaultSerde[string]()
	batches := &collected[connector.ShuffleRecord]{}
	part := func(v string) int32 { return int32(len(v) % 3) }
	enc := NewBatchOperator(engine.OpInfo{}, "c", 3, serde.Append, part, engine.Output[connector.ShuffleRecord](batches))
	var in []string
	var ts []int64
	for i := range 20000 {
		v := strings.Repeat("x", i%7) + fmt.Sprint(i)
		at := int64(i * 10)
		if i%11 == 0 {
			at = connector.NoTimestamp
		}
		in, ts = append(in, v), append(ts, at)
		if err := enc.Collect(v, at); err != nil {
			t.Fatal(err)
		}
		if i == 10000 {
			if err := enc.PrepareSnapshotPreBarrier(1); err != nil {
				t.Fatal(err)
			}
			if len(enc.pending) != 0 {
				t.Fatalf("partitions %v still buffered after a barrier", enc.pending)
			}
		}
	}
	if err := enc.EmitWatermark(77); err != nil || len(batches.wms) != 1 {
		t.Fatalf("watermark not passed on: %v %v", batches.wms, err)
	}
	if err := enc.EndInput(); err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, b := range batches.vals {
		if len(b.Value) >= shuffleBatchBytes {
			full++
		}
		if len(b.Value) > shuffleBatchBytes+64 {
			t.Fatalf("a batch of %d bytes, the bound is %d", len(b.Value), shuffleBatchBytes)
		}
	}
	if full == 0 || len(batches.vals) < 6 {
		t.Fatalf("%d batches, %d full: the input should fill several", len(batches.vals), full)
	}

	got := map[int32]*collected[string]{}
	for _, b := range batches.vals {
		o := got[b.Partition]
		if o == nil {
			o = &collected[string]{}
			got[b.Partition] = o
		}
		dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](o), 1, 3, func(int, int) int { return 0 })
		if err := dec.Collect(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	for p := range int32(3) {
		var wantV []string
		var wantTs []int64
		for i, v := range in {
			if part(v) == p {
				wantV, wantTs = append(wantV, v), append(wantTs, ts[i])
			}
		}
		o := got[p]
		if o == nil || fmt.Sprint(o.vals) != fmt.Sprint(wantV) || fmt.Sprint(o.ts) != fmt.Sprint(wantTs) {
			t.Fatalf("partition %d: records or timestamps differ from what went in", p)
		}
	}

	// Bytes that are not a batch fail the decoding, naming the channel.
	dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](&collected[string]{}), 1, 3, func(int, int) int { return 0 })
	for _, bad := range [][]byte{nil, {9}, {shuffleBatchV2}, {shuffleBatchV2, 0, 5}, {shuffleBatchV2, 0, 5, 0, 'a'}, {shuffleMarkerV1, 1, 9, 0, 0}} {
		if err := dec.Collect(connector.ShuffleRecord{Value: bad}, 0); !errors.Is(err, errShuffleBatch) || !strings.Contains(err.Error(), "shuffle c") {
			t.Errorf("%v decoded: %v", bad, err)
		}
	}
}

// eventLog records what an operator emits, in order, as text.
type eventLog[T any] struct{ events []string }

func (l *eventLog[T]) Collect(v T, ts int64) error {
	l.events = append(l.events, fmt.Sprintf("%v@%d", v, ts))
	return nil
}
func (l *eventLog[T]) EmitWatermark(wm int64) error {
	l.events = append(l.events, fmt.Sprintf("wm %d", wm))
	return nil
}
func (l *eventLog[T]) EmitStatus(idle bool) error {
	l.events = append(l.events, map[bool]string{true: "idle", false: "active"}[idle])
	return nil
}
func (l *eventLog[T]) take() string {
	s := strings.Join(l.events, ", ")
	l.events = nil
	return s
}

// markerRecord is marker m as the writing side puts it in partition p.
func markerRecord(t *testing.T, p int32, m slots.Marker) connector.ShuffleRecord {
	t.Helper()
	b, err := slots.EncodeMarker(m)
	if err != nil {
		t.Fatal(err)
	}
	return connector.ShuffleRecord{Partition: p, Value: append([]byte{shuffleMarkerV1}, b...)}
}

// restoreAndAnnounce opens a reading subtask 0 of 2 (4 partitions) from
// state as a restore does, emitting to log.
func restoreAndAnnounce(t *testing.T, state []byte, log *eventLog[string], owner func(p, par int) int) *UnbatchOperator[string] {
	t.Helper()
	u := NewUnbatchOperator(engine.OpInfo{}, "c", statecodec.Default[string]().Decode, engine.Output[string](log), 2, 4, owner)
	if err := u.restore(state); err != nil {
		t.Fatal(err)
	}
	if err := u.announce(); err != nil {
		t.Fatal(err)
	}
	return u
}

// shuffleEvents describes what a shuffle's writing side emitted: a batch
// as "p<partition>:batch", a marker as "p<partition>:<kind> <slot> <wm>".
func shuffleEvents(t *testing.T, recs []connector.ShuffleRecord) string {
	t.Helper()
	var out []string
	for _, r := range recs {
		switch r.Value[0] {
		case shuffleBatchV2:
			out = append(out, fmt.Sprintf("p%d:batch", r.Partition))
		case shuffleMarkerV1:
			m, err := slots.DecodeMarker(r.Value[1:])
			if err != nil {
				t.Fatal(err)
			}
			kind := map[slots.MarkerKind]string{slots.WatermarkMarker: "wm", slots.IdleMarker: "idle", slots.EndMarker: "end", slots.StopMarker: "stop"}[m.Kind]
			if m.Kind == slots.WatermarkMarker {
				out = append(out, fmt.Sprintf("p%d:%s %d %d", r.Partition, kind, m.Slot, m.Watermark))
			} else {
				out = append(out, fmt.Sprintf("p%d:%s %d", r.Partition, kind, m.Slot))
			}
		default:
			t.Fatalf("a record of format %d", r.Value[0])
		}
	}
	return strings.Join(out, ", ")
}

// Every upstream subtask writes its event time to every partition of the
// channel, after its batches, before a barrier, and only when it changed
// since its last marker: a higher watermark, idleness, activity again;
// nothing while it knows no watermark; an end marker only when its input
// really ended (maxWatermark), never when it was stopped.
func TestShuffleMarkersFollowTheBatchesWhenEventTimeChanged(t *testing.T) {
	serde := state.DefaultSerde[string]()
	recs := &collected[connector.ShuffleRecord]{}
	enc := NewBatchOperator(engine.OpInfo{Subtask: 2}, "c", 2, serde.Append, func(v string) int32 { return int32(len(v) % 2) }, engine.Output[connector.ShuffleRecord](recs))
	step := func(what string, do func() error, want string) {
		t.Helper()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := shuffleEvents(t, recs.take()); got != want {
			t.Fatalf("%s: wrote %q; want %q", what, got, want)
		}
	}
	barrier := func() error { return enc.PrepareSnapshotPreBarrier(1) }
	step("records, no watermark yet", func() error { return enc.Collect("a", 1) }, "")
	step("barrier, no watermark yet", barrier, "p1:batch")
	step("watermark", func() error {
		if err := enc.EmitWatermark(100); err != nil {
			return err
		}
		return enc.Collect("bb", 120)
	}, "")
	if len(recs.wms) != 1 || recs.wms[0] != 100 {
		t.Fatalf("watermarks passed on to the sink: %v", recs.wms)
	}
	step("barrier after a watermark", barrier, "p0:batch, p0:wm 2 100, p1:wm 2 100")
	step("barrier, nothing changed", barrier, "")
	step("same watermark again", func() error {
		if err := enc.EmitWatermark(100); err != nil {
			return err
		}
		return barrier()
	}, "")
	step("higher watermark", func() error {
		if err := enc.EmitWatermark(150); err != nil {
			return err
		}
		return barrier()
	}, "p0:wm 2 150, p1:wm 2 150")
	step("idle", func() error {
		if err := enc.EmitStatus(true); err != nil {
			return err
		}
		return barrier()
	}, "p0:idle 2, p1:idle 2")
	step("still idle", barrier, "")
	step("active again, same watermark", func() error {
		if err := enc.EmitStatus(false); err != nil {
			return err
		}
		return barrier()
	}, "p0:wm 2 150, p1:wm 2 150")
	// A watermark reached, then idleness, within one interval: the
	// watermark is marked first (readers take the highest each idle slot
	// reached, as the in-process valve does).
	step("higher watermark, then idle before the barrier", func() error {
		if err := enc.EmitWatermark(170); err != nil {
			return err
		}
		if err := enc.EmitStatus(true); err != nil {
			return err
		}
		return barrier()
	}, "p0:wm 2 170, p1:wm 2 170, p0:idle 2, p1:idle 2")
	step("stopped: the end of input without maxWatermark", enc.EndInput, "")

	ended := NewBatchOperator(engine.OpInfo{Subtask: 0}, "c", 2, serde.Append, func(string) int32 { return 0 }, engine.Output[connector.ShuffleRecord](recs))
	enc = ended
	step("records then the end of event time", func() error {
		if err := ended.Collect("x", 5); err != nil {
			return err
		}
		if err := ended.EmitWatermark(engine.MaxWatermark); err != nil {
			return err
		}
		return ended.EndInput()
	}, "p0:batch, p0:end 0, p1:end 0")
	step("the final barrier after the end", barrier, "")
}

// The reading side's event time is the minimum over the upstream slots of
// each partition it reads, then over its partitions; idle slots do not
// hold a partition back, idle partitions count at their watermark, a slot's batch makes it active before
// its records, every slot ended is the end of event time; the source's
// own event time is dropped; a partition it does not read, and a slot
// the job does not have, fail it.
func TestShuffleDecodeEventTimeIsMinimumOverSlotsAndPartitions(t *testing.T) {
	serde := state.DefaultSerde[string]()
	log := &eventLog[string]{}
	// Upstream slots 0 and 1; subtask 0 of 2 reads partitions 0 and 2.
	dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, func(p, _ int) int { return p % 2 })
	marker := func(p int32, m slots.Marker) connector.ShuffleRecord { return markerRecord(t, p, m) }
	wm := func(p int32, slot int, w int64) connector.ShuffleRecord {
		return marker(p, slots.Marker{Kind: slots.WatermarkMarker, Slot: slot, Watermark: w})
	}
	idle := func(p int32, slot int) connector.ShuffleRecord {
		return marker(p, slots.Marker{Kind: slots.IdleMarker, Slot: slot})
	}
	end := func(p int32, slot int) connector.ShuffleRecord {
		return marker(p, slots.Marker{Kind: slots.EndMarker, Slot: slot})
	}
	batch := func(p int32, slot int, v string, ts int64) connector.ShuffleRecord {
		enc := NewBatchOperator(engine.OpInfo{Subtask: slot}, "c", 4, serde.Append, func(string) int32 { return p }, engine.Output[connector.ShuffleRecord](&collected[connector.ShuffleRecord]{}))
		out := &collected[connector.ShuffleRecord]{}
		enc.out = out
		if err := enc.Collect(v, ts); err != nil {
			t.Fatal(err)
		}
		if err := enc.flushAll(); err != nil {
			t.Fatal(err)
		}
		return out.vals[0]
	}
	for i, c := range []struct {
		in   connector.ShuffleRecord
		want string
	}{
		{wm(0, 0, 100), ""},
		{wm(0, 1, 80), ""}, // partition 2 not heard from
		{wm(2, 0, 90), ""},
		{wm(2, 1, 120), "wm 80"},
		{wm(0, 1, 200), "wm 90"},
		{idle(2, 0), "wm 100"}, // partition 2 at 120 from slot 1 alone
		{batch(2, 0, "late", 95), "late@95"},
		{idle(2, 1), ""},       // slot 0 is active again, behind: not aligned
		{idle(0, 0), "wm 120"}, // partition 0 at 200 from slot 1 alone
		{idle(0, 1), ""},
		// All idle: each partition at the highest its slots allowed (200
		// and 120), the subtask at their minimum.
		{idle(2, 0), "idle"},
		{batch(0, 1, "back", 300), "active, back@300"},
		{wm(0, 1, 250), ""}, // partition 2, idle, still at 120
		{end(0, 0), ""},
		{end(0, 1), "idle"}, // partition 0 ended, partition 2 idle
		{end(2, 0), ""},
		{end(2, 1), fmt.Sprintf("active, wm %d", engine.MaxWatermark)},
	} {
		if err := dec.Collect(c.in, 0); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := log.take(); got != c.want {
			t.Fatalf("step %d: emitted %q; want %q", i, got, c.want)
		}
	}
	if err := dec.EmitWatermark(999); err != nil || len(log.events) != 0 {
		t.Fatalf("the source's watermark went on: %v %v", log.events, err)
	}
	if err := dec.Collect(wm(1, 0, 5), 0); err == nil || !strings.Contains(err.Error(), "partition 1, which subtask 0 does not read") {
		t.Errorf("a marker of another subtask's partition: %v", err)
	}
	if err := dec.Collect(wm(0, 2, 5), 0); !errors.Is(err, slots.ErrUnknownSlot) {
		t.Errorf("a marker of slot 2 of 2: %v", err)
	}
}

// A reading subtask restored from its checkpoint goes on from the
// markers it had read: an upstream slot whose event time stopped moving
// before the checkpoint does not hold it back, as it would a fresh one.
func TestShuffleDecodeRestoredGoesOnFromItsMarkers(t *testing.T) {
	serde := state.DefaultSerde[string]()
	owner := func(p, _ int) int { return p % 2 }
	mk := func(p int32, slot int, w int64) connector.ShuffleRecord {
		return markerRecord(t, p, slots.Marker{Kind: slots.WatermarkMarker, Slot: slot, Watermark: w})
	}
	log := &eventLog[string]{}
	dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, owner)
	for _, r := range []connector.ShuffleRecord{mk(0, 0, 100), mk(2, 0, 100), mk(0, 1, 50), mk(2, 1, 60)} {
		if err := dec.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := log.take(); got != "wm 50" {
		t.Fatalf("before the checkpoint: %q", got)
	}
	state, err := dec.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	// The operators after it start from nothing: it tells them what it
	// restored.
	restored := restoreAndAnnounce(t, state, log, owner)
	if got := log.take(); got != "wm 50" {
		t.Fatalf("restored, announced %q; want %q", got, "wm 50")
	}
	fresh := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](&eventLog[string]{}), 2, 4, owner)
	for _, r := range []connector.ShuffleRecord{mk(0, 1, 70), mk(2, 1, 80)} {
		if err := restored.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
		if err := fresh.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := log.take(), "wm 60, wm 70"; got != want {
		t.Fatalf("restored: emitted %q; want %q (slot 0 at 100 from before the checkpoint)", got, want)
	}
	if fresh.wm != engine.NoWatermark {
		t.Fatalf("a fresh subtask moved to %d without hearing from slot 0", fresh.wm)
	}
	// An idle subtask restored says so, after its watermark.
	idle := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, owner)
	for _, r := range []connector.ShuffleRecord{mk(0, 0, 100), mk(0, 1, 90), mk(2, 0, 80), mk(2, 1, 95)} {
		if err := idle.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int32{0, 2} {
		for slot := range 2 {
			if err := idle.Collect(markerRecord(t, p, slots.Marker{Kind: slots.IdleMarker, Slot: slot}), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	log.take()
	idleState, err := idle.SnapshotState(2)
	if err != nil {
		t.Fatal(err)
	}
	restoreAndAnnounce(t, idleState, log, owner)
	if got, want := log.take(), "wm 95, idle"; got != want {
		t.Fatalf("restored idle, announced %q; want %q", got, want)
	}
	// A state of another partition count (the slots or max parallelism
	// changed) is refused, not misread.
	other := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 8, owner)
	if err := other.restore(state); err == nil || !strings.Contains(err.Error(), "a state of 2 partitions; this subtask reads 4") {
		t.Fatalf("restored at another partition count: %v", err)
	}
}

// A slot writes each marker to every partition, but the reader reads the
// partitions at its own pace: a slot back from idleness whose marker is
// read in one partition first must not move event time past its records
// still unread in another. (Before, a partition whose slots were all idle
// was left out of the minimum: the marker read first moved event time to
// 500 and the record at 300 read next was late; a window test on kfake
// lost windows so about once in 15 runs.)
func TestShuffleDecodeSlotMarkerInOnePartitionDoesNotPassItsRecordsInAnother(t *testing.T) {
	serde := state.DefaultSerde[string]()
	log := &eventLog[string]{}
	dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, func(p, _ int) int { return p % 2 })
	marker := func(p int32, m slots.Marker) connector.ShuffleRecord { return markerRecord(t, p, m) }
	var enc []byte
	enc = append(enc, shuffleBatchV2, 0) // slot 0
	v, _ := serde.Append(nil, "x")
	enc = binary.AppendUvarint(enc, uint64(len(v)))
	enc = binary.AppendVarint(enc, 300)
	enc = append(enc, v...)
	for i, c := range []struct {
		in   connector.ShuffleRecord
		want string
	}{
		{marker(0, slots.Marker{Kind: slots.WatermarkMarker, Slot: 0, Watermark: 100}), ""},
		{marker(0, slots.Marker{Kind: slots.WatermarkMarker, Slot: 1, Watermark: 100}), ""},
		{marker(2, slots.Marker{Kind: slots.WatermarkMarker, Slot: 0, Watermark: 100}), ""},
		{marker(2, slots.Marker{Kind: slots.WatermarkMarker, Slot: 1, Watermark: 100}), "wm 100"},
		{marker(0, slots.Marker{Kind: slots.IdleMarker, Slot: 0}), ""},
		{marker(0, slots.Marker{Kind: slots.IdleMarker, Slot: 1}), ""},
		{marker(2, slots.Marker{Kind: slots.IdleMarker, Slot: 0}), ""},
		{marker(2, slots.Marker{Kind: slots.IdleMarker, Slot: 1}), "idle"},
		// Slot 0 resumes: its record at 300 went to partition 2, then its
		// marker at 500 to both; partition 0's marker is read first.
		{marker(0, slots.Marker{Kind: slots.WatermarkMarker, Slot: 0, Watermark: 500}), "active"},
		{connector.ShuffleRecord{Partition: 2, Value: enc}, "x@300"},
		{marker(2, slots.Marker{Kind: slots.WatermarkMarker, Slot: 0, Watermark: 500}), "wm 500"},
	} {
		if err := dec.Collect(c.in, 0); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := log.take(); got != c.want {
			t.Fatalf("step %d: emitted %q; want %q", i, got, c.want)
		}
	}
}

// A slot draining for a savepoint of the distributed job (the rule of
// runtime/savepointdrain.go): the encoding's input, stopped, writes a stop marker
// to every partition after its last batch (never one when the job only
// stops, as a handover does, nor instead of the end marker of a real
// end); the decoding tells its task that its channel is drained only
// once every upstream slot's stop marker (or end) was read in every
// partition it owns, and only while its slot drains, so that its source
// stops after everything written to it and not before.
func TestSlotDrainingForASavepointStopsItsShuffleReaderOnlyAfterEveryUpstreamStopMarker(t *testing.T) {
	serde := state.DefaultSerde[string]()
	tk := &drainTask{}
	recs := &collected[connector.ShuffleRecord]{}
	enc := NewBatchOperator(engine.OpInfo{Subtask: 1}, "c", 2, serde.Append, func(v string) int32 { return int32(len(v) % 2) }, engine.Output[connector.ShuffleRecord](recs))
	if err := enc.Open(tk); err != nil {
		t.Fatal(err)
	}
	if err := enc.Collect("ab", 10); err != nil {
		t.Fatal(err)
	}
	tk.draining = true
	if err := enc.EndInput(); err != nil {
		t.Fatal(err)
	}
	if got, want := shuffleEvents(t, recs.take()), "p0:batch, p0:stop 1, p1:stop 1"; got != want {
		t.Fatalf("the draining slot's encoding wrote %q at its end; want %q", got, want)
	}

	// Subtask 0 of 2 reads partitions 0 and 2 of 4, written by slots 0
	// and 1.
	log := &eventLog[string]{}
	dec := NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, func(p, _ int) int { return p % 2 })
	if err := dec.Open(tk); err != nil {
		t.Fatal(err)
	}
	stop := func(p int32, slot int) connector.ShuffleRecord {
		return markerRecord(t, p, slots.Marker{Kind: slots.StopMarker, Slot: slot})
	}
	drained := func() bool {
		told := len(tk.drained) > 0
		tk.drained = nil
		return told
	}
	tk.draining = false
	for _, r := range []connector.ShuffleRecord{stop(0, 0), stop(0, 1), stop(2, 0), stop(2, 1)} {
		if err := dec.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if drained() {
		t.Fatal("a slot that is not draining stopped its shuffle reader")
	}
	tk.draining = true
	dec = NewUnbatchOperator(engine.OpInfo{}, "c", serde.Decode, engine.Output[string](log), 2, 4, func(p, _ int) int { return p % 2 })
	if err := dec.Open(tk); err != nil {
		t.Fatal(err)
	}
	for i, r := range []connector.ShuffleRecord{
		stop(0, 0), stop(0, 1), stop(2, 1),
		markerRecord(t, 2, slots.Marker{Kind: slots.WatermarkMarker, Slot: 1, Watermark: 5}), // slot 1 went on
		stop(2, 0),
	} {
		if err := dec.Collect(r, 0); err != nil {
			t.Fatal(err)
		}
		if drained() {
			t.Fatalf("drained after record %d, before every upstream slot's stop marker in partition 2", i)
		}
	}
	if err := dec.Collect(stop(2, 1), 0); err != nil {
		t.Fatal(err)
	}
	if !drained() {
		t.Fatal("every upstream slot stopped in every partition read, and the reader did not say its channel is drained")
	}
	if err := dec.Collect(stop(2, 1), 0); err != nil || drained() {
		t.Fatalf("told twice (%v)", err)
	}
	if got := log.take(); got != "" {
		t.Fatalf("stop markers moved event time: %q", got)
	}
}
