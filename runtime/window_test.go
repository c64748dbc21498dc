package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/window"
)

// kv is a keyed test record.
type kv struct {
	K string
	V int64
}

func kvKey(r kv) string { return r.K }

const clockBase = int64(1<<50) / 1000 * 1000 // a processing time the wall clock never reaches

// Rule (Flink's merging windows): a record that reaches two sessions of
// its key merges them, and their contents, into one session; Aggregate
// merges accumulators with Merge, WindowProcess keeps every record.
func TestSessionRecordBridgingTwoSessionsMergesThem(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			sum := state.Aggregator[kv, int64, int64]{
				Create: func() int64 { return 0 },
				Add:    func(acc int64, r kv) int64 { return acc + r.V },
				Merge:  func(a, b int64) int64 { return a + b },
				Result: func(acc int64) int64 { return acc },
			}
			agg := openWin[string, kv](t, winStream(kvKey, func(ks KeyedStream[string, kv]) DataStream[window.Result[string, int64]] {
				return WindowAggregate(Window(ks, window.Session(10*time.Millisecond)), sum)
			}), unitStateConfig(t, b), nil, 1, 0)
			defer agg.stop()
			proc := openWin[string, kv](t, winStream(kvKey, func(ks KeyedStream[string, kv]) DataStream[string] {
				return WindowProcess(Window(ks, window.Session(10*time.Millisecond)), func(w window.Info[string], rs []kv, out Collector[string]) error {
					var vs []string
					for _, r := range rs {
						vs = append(vs, fmt.Sprint(r.V))
					}
					out.Collect(fmt.Sprintf("%s %v %s %s", w.Key, w.Window, w.Firing, strings.Join(vs, ",")))
					return nil
				})
			}), unitStateConfig(t, b), nil, 1, 0)
			defer proc.stop()
			for _, r := range []struct {
				v, ts int64
			}{{1, 0}, {2, 20}, {4, 10}} { // [0,10) and [20,30), then [10,20) touching both
				agg.add(t, kv{"a", r.v}, r.ts)
				proc.add(t, kv{"a", r.v}, r.ts)
			}
			agg.watermark(t, 28)
			proc.watermark(t, 28)
			if got := agg.out.take(); len(got) != 0 {
				t.Fatalf("before the merged session's end: %v", got)
			}
			agg.watermark(t, 29)
			proc.watermark(t, 29)
			want := window.Result[string, int64]{Key: "a", Window: window.TimeWindow{Start: 0, End: 30}, Value: 7, Firing: window.OnTime}
			if got := agg.out.take(); !slices.Equal(got, []window.Result[string, int64]{want}) {
				t.Fatalf("aggregate: %v, want %v", got, want)
			}
			// Arrival order, which here is also the sessions' order.
			if got := proc.out.take(); !slices.Equal(got, []string{"a [0,30) on-time 1,2,4"}) {
				t.Fatalf("process: %q", got)
			}
			for _, w := range []interface {
				keysInState(testing.TB, []string) int
			}{agg, proc} {
				if n := w.keysInState(t, []string{"a"}); n != 0 {
					t.Fatalf("%d keys keep session state after the session fired", n)
				}
			}
		})
	}
}

// Rule: WindowProcess gets a window's records in their order of arrival,
// a merged session's too: merging two sessions renames their records'
// window and moves none of them, so the records of the later session that
// arrived first come first, not part by part.
func TestMergedSessionRecordsReachProcessInArrivalOrder(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			proc := openWin[string, kv](t, winStream(kvKey, func(ks KeyedStream[string, kv]) DataStream[string] {
				return WindowProcess(Window(ks, window.Session(10*time.Millisecond)), func(w window.Info[string], rs []kv, out Collector[string]) error {
					var vs []string
					for _, r := range rs {
						vs = append(vs, fmt.Sprint(r.V))
					}
					out.Collect(fmt.Sprintf("%v %s", w.Window, strings.Join(vs, ",")))
					return nil
				})
			}), unitStateConfig(t, b), nil, 1, 0)
			defer proc.stop()
			// [20,30) first, then [0,10), then [20,32) grows the first,
			// and 4 at 10 bridges [0,10) and [20,32) into [0,32).
			for _, r := range []struct{ v, ts int64 }{{1, 20}, {2, 0}, {3, 22}, {4, 10}, {5, 5}} {
				proc.add(t, kv{"a", r.v}, r.ts)
			}
			proc.watermark(t, 31)
			if got := proc.out.take(); !slices.Equal(got, []string{"[0,32) 1,2,3,4,5"}) {
				t.Fatalf("merged session fired %q, want its records in arrival order: [0,32) 1,2,3,4,5", got)
			}
		})
	}
}

// Rule: session windows merge accumulators, so an aggregator without
// Merge is refused when the job is built.
func TestSessionAggregateWithoutMergeIsRefused(t *testing.T) {
	ds := winStream(kvKey, func(ks KeyedStream[string, kv]) DataStream[window.Result[string, int64]] {
		return WindowAggregate(Window(ks, window.Session(time.Second)), state.Aggregator[kv, int64, int64]{
			Create: func() int64 { return 0 }, Add: func(a int64, _ kv) int64 { return a }, Result: func(a int64) int64 { return a }})
	})
	if len(ds.node.errs) == 0 || !strings.Contains(ds.node.errs[0].Error(), "Merge") {
		t.Fatalf("errors %v, want one about Merge", ds.node.errs)
	}
}

// Rule: invalid assigners and options are refused, each with its reason.
func TestInvalidWindowConfigurationIsRefused(t *testing.T) {
	for _, c := range []struct {
		a    window.Assigner
		opts []WindowOption
		want string
	}{
		{window.Assigner{}, nil, "zero window.Assigner"},
		{window.Tumbling(0), nil, "size 0s"},
		{window.Tumbling(1500 * time.Microsecond), nil, "whole number of milliseconds"},
		{window.Sliding(time.Second, 0), nil, "slide 0s"},
		{window.Session(-time.Second), nil, "gap -1s"},
		{window.Count(0), nil, "at least 1"},
		{window.Tumbling(time.Second).WithOffset(time.Second), nil, "below the window's slide"},
		{window.Session(time.Second).WithOffset(time.Millisecond), nil, "WithOffset applies"},
		{window.Count(2).ProcessingTime(), nil, "ProcessingTime applies"},
		{window.Tumbling(time.Second).ProcessingTime(), []WindowOption{WithAllowedLateness(time.Second)}, "WithAllowedLateness applies"},
		{window.Tumbling(time.Second).ProcessingTime(), []WindowOption{WithEarlyFiring(time.Second)}, "WithEarlyFiring applies"},
		{window.Tumbling(time.Second), []WindowOption{WithAllowedLateness(-time.Second)}, "allowed lateness -1s"},
		{window.Tumbling(time.Second), []WindowOption{nil}, "window option"},
	} {
		ds := countStream(c.a, c.opts...)
		if err := errors.Join(ds.node.errs...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want one saying %q", c.a, c.opts, err, c.want)
		}
	}
}

// Rule (allowed lateness): a record late within the lateness updates its
// window, which fires again at once; beyond it the record is dropped and
// counted, and the window's state is gone.
func TestLateRecordWithinLatenessFiresAgainBeyondItIsDropped(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, string](t, countStream(window.Tumbling(10*time.Millisecond), WithAllowedLateness(5*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			win := window.TimeWindow{Start: 0, End: 10}
			w.add(t, "a", 3)
			w.watermark(t, 9)
			expectWin(t, "on time", w, window.Result[string, int64]{Key: "a", Window: win, Value: 1, Firing: window.OnTime})
			w.add(t, "a", 4)
			expectWin(t, "late within lateness", w, window.Result[string, int64]{Key: "a", Window: win, Value: 2, Firing: window.Late})
			w.watermark(t, 13)
			w.add(t, "a", 5)
			expectWin(t, "late within lateness again", w, window.Result[string, int64]{Key: "a", Window: win, Value: 3, Firing: window.Late})
			w.watermark(t, 14) // end-1+lateness: the window is gone
			if n := w.keysInState(t, []string{"a"}); n != 0 {
				t.Fatalf("%d keys keep state past the lateness", n)
			}
			w.add(t, "a", 6)
			expectWin(t, "beyond lateness", w)
			if n := w.fn().lateDropped(); n != 1 {
				t.Fatalf("%d records counted as dropped late, want 1", n)
			}
		})
	}
}

func expectWin(t *testing.T, step string, w *winOp[string, string, window.Result[string, int64]], want ...window.Result[string, int64]) {
	t.Helper()
	ts := slices.Clone(w.out.ts)
	got := w.out.take()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: emitted %v, want %v", step, got, want)
	}
	for i, r := range got {
		if ts[i] != r.Window.MaxTimestamp() {
			t.Fatalf("%s: %v at timestamp %d, want %d", step, r, ts[i], r.Window.MaxTimestamp())
		}
	}
}

// Rule: processing-time windows assign records by the clock and fire when
// the clock passes their end, not by the watermark; a session's timer at
// an end it grew past fires nothing.
func TestProcessingTimeWindowsFollowTheClock(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, string](t, countStream(window.Tumbling(10*time.Millisecond).ProcessingTime()), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			w.clock = clockBase + 1
			w.add(t, "a", 5) // the record's timestamp plays no part
			w.advance(t, clockBase+3)
			w.add(t, "a", 500)
			w.watermark(t, engine.MaxWatermark)
			expectWin(t, "watermark", w)
			w.advance(t, clockBase+8)
			expectWin(t, "before the end", w)
			w.advance(t, clockBase+9)
			expectWin(t, "end", w, window.Result[string, int64]{Key: "a", Window: window.TimeWindow{Start: clockBase, End: clockBase + 10}, Value: 2, Firing: window.OnTime})
			w.advance(t, clockBase+12)
			w.add(t, "b", 0)
			w.advance(t, clockBase+40)
			expectWin(t, "next", w, window.Result[string, int64]{Key: "b", Window: window.TimeWindow{Start: clockBase + 10, End: clockBase + 20}, Value: 1, Firing: window.OnTime})

			s := openWin[string, string](t, countStream(window.Session(5*time.Millisecond).ProcessingTime()), unitStateConfig(t, b), nil, 1, 0)
			defer s.stop()
			s.clock = clockBase
			s.add(t, "a", 0)
			s.advance(t, clockBase+3)
			s.add(t, "a", 0) // the session grows to [base, base+8)
			s.advance(t, clockBase+6)
			expectWin(t, "session's old end", s)
			s.advance(t, clockBase+7)
			expectWin(t, "session's end", s, window.Result[string, int64]{Key: "a", Window: window.TimeWindow{Start: clockBase, End: clockBase + 8}, Value: 2, Firing: window.OnTime})
			for _, o := range []*winOp[string, string, window.Result[string, int64]]{w, s} {
				if n, left := o.keysInState(t, []string{"a", "b"}), o.timersLeft(); n != 0 || left != 0 {
					t.Fatalf("%d keys with state and %d timers left", n, left)
				}
			}
		})
	}
}

// Rule: with WithEarlyFiring an event-time window emits its partial result
// every period of processing time until it fires on time, and then stops.
func TestEarlyFiringEmitsPartialResultsUntilTheWindowFires(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, string](t, countStream(window.Tumbling(100*time.Millisecond), WithEarlyFiring(10*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			win := window.TimeWindow{Start: 0, End: 100}
			w.clock = clockBase + 3
			w.add(t, "a", 5)
			w.advance(t, clockBase+9)
			expectWin(t, "within the first period", w)
			w.advance(t, clockBase+10)
			expectWin(t, "first period", w, window.Result[string, int64]{Key: "a", Window: win, Value: 1, Firing: window.Early})
			w.add(t, "a", 7)
			w.advance(t, clockBase+45) // behind: one firing, not three
			expectWin(t, "late period", w, window.Result[string, int64]{Key: "a", Window: win, Value: 2, Firing: window.Early})
			w.watermark(t, 99)
			expectWin(t, "on time", w, window.Result[string, int64]{Key: "a", Window: win, Value: 2, Firing: window.OnTime})
			w.advance(t, clockBase+100)
			expectWin(t, "after the window fired", w)
			if n, left := w.keysInState(t, []string{"a"}), w.timersLeft(); n != 0 || left != 0 {
				t.Fatalf("%d keys with state and %d timers left", n, left)
			}
		})
	}
}

// Rule (Flink's countWindow): window.Count fires every n records of a key,
// with the timestamp of the record that completed the count, and starts
// over; fewer than n records wait.
func TestGlobalCountFiresEveryNRecords(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, string](t, countStream(window.Count(3)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			for i := range 7 {
				w.add(t, "a", int64(i))
			}
			w.add(t, "b", 0)
			w.add(t, "b", 1)
			w.watermark(t, engine.MaxWatermark)
			global := window.TimeWindow{Start: math.MinInt64, End: math.MaxInt64}
			want := []window.Result[string, int64]{{Key: "a", Window: global, Value: 3, Firing: window.OnTime}, {Key: "a", Window: global, Value: 3, Firing: window.OnTime}}
			if got := w.out.vals; !slices.Equal(got, want) || !slices.Equal(w.out.ts, []int64{2, 5}) {
				t.Fatalf("emitted %v at %v, want %v at [2 5]", got, w.out.ts, want)
			}
			if n := w.keysInState(t, []string{"a", "b"}); n != 2 {
				t.Fatalf("%d keys hold a partial count, want 2", n)
			}
		})
	}
}

// Rule: window state and timers are keyed state: a checkpoint taken with
// windows open restores, at another parallelism and on either backend,
// into subtasks that emit together what the job would have emitted
// without the restore.
func TestWindowsRestoreMidWindowAcrossParallelism(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, b := range stateBackends {
		for _, a := range []window.Assigner{window.Tumbling(10 * time.Millisecond), window.Sliding(12*time.Millisecond, 4*time.Millisecond), window.Session(5 * time.Millisecond)} {
			for _, par := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/par=%d", b, a, par), func(t *testing.T) {
					runWindowRestore(t, b, a, par, keys)
				})
			}
		}
	}
}

type winStep struct {
	key    string
	ts, wm int64 // wm > 0: a watermark
}

func runWindowRestore(t *testing.T, b backendKind, a window.Assigner, par int, keys []string) {
	rng := rand.New(rand.NewPCG(uint64(par), 5))
	ds := func() DataStream[window.Result[string, int64]] {
		return countStream(a, WithAllowedLateness(4*time.Millisecond))
	}
	var steps []winStep
	maxTs, wm := int64(0), int64(0)
	for range 400 {
		if rng.IntN(6) == 0 {
			wm = max(wm, maxTs-int64(rng.IntN(10)))
			steps = append(steps, winStep{wm: wm + 1})
			continue
		}
		ts := max(0, maxTs+int64(rng.IntN(5))-int64(rng.IntN(12)))
		maxTs = max(maxTs, ts)
		steps = append(steps, winStep{key: keys[rng.IntN(len(keys))], ts: ts})
	}
	apply := func(w *winOp[string, string, window.Result[string, int64]], s winStep) {
		if s.wm > 0 {
			w.watermark(t, s.wm-1)
		} else {
			w.add(t, s.key, s.ts)
		}
	}
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	orig := openWin[string, string](t, ds(), unitStateConfig(t, b), nil, 1, 0)
	defer orig.stop()
	const at = 200
	for _, s := range steps[:at] {
		apply(orig, s)
	}
	blob, files := orig.snapshot(t, mem, 1)
	chk := commitBlobs(t, mem, 1, [][]byte{blob}, [][]checkpoint.FileHandle{files})
	orig.out.take()
	for _, s := range steps[at:] {
		apply(orig, s)
	}
	orig.watermark(t, engine.MaxWatermark)
	want := results(t, -1, orig)

	var got []winRes
	for sub := range par {
		w := openWin[string, string](t, ds(), unitStateConfig(t, b), chk, par, sub)
		lo, hi := keygroup.Range(sub, par, 128)
		// No watermark first: the restored operator has the checkpoint's,
		// and records that were late before the restore are late after it.
		var mine []string
		for _, k := range keys {
			if g := w.p.state.GroupOf(k); g >= lo && g <= hi {
				mine = append(mine, k)
			}
		}
		for _, s := range steps[at:] {
			if s.wm > 0 || slices.Contains(mine, s.key) {
				apply(w, s)
			}
		}
		w.watermark(t, engine.MaxWatermark)
		got = append(got, results(t, -1, w)...)
		if n, left := w.keysInState(t, keys), w.timersLeft(); n != 0 || left != 0 {
			t.Fatalf("subtask %d: %d keys with state and %d timers left", sub, n, left)
		}
		w.stop()
	}
	if len(want) == 0 {
		t.Fatal("no window fired after the checkpoint: the test proves nothing")
	}
	if !slices.Equal(sortedRes(got), sortedRes(want)) {
		t.Fatalf("restored at parallelism %d emitted\n%v\nwithout the restore\n%v", par, sortedRes(got), sortedRes(want))
	}
}

var lateTag = NewOutputTag[string]("late")

// Rule (Flink's sideOutputLateData): with WithSideOutputLateRecords, a record
// later than the allowed lateness goes, as it came and with its own
// timestamp, to the side output the user named; it is counted as dropped
// late all the same, and records within the lateness stay in the window.
func TestRecordsBeyondLatenessGoToTheLateDataSideOutput(t *testing.T) {
	for _, b := range stateBackends {
		for _, a := range []window.Assigner{window.Tumbling(10 * time.Millisecond), window.Session(10 * time.Millisecond)} {
			t.Run(fmt.Sprintf("%s/%s", b, a), func(t *testing.T) {
				ds := countStream(a, WithAllowedLateness(5*time.Millisecond), WithSideOutputLateRecords(lateTag))
				if len(ds.node.sideTags) != 1 || ds.node.sideTags[0].id != "late" {
					t.Fatalf("the window declares side outputs %v, want the late-data tag", ds.node.sideTags)
				}
				late := &winOut[string]{}
				sides := &sideOutputs{ids: []string{"late"}, outs: []any{engine.Output[string](late)}}
				w := openWinSides[string, string](t, ds, unitStateConfig(t, b), nil, 1, 0, sides)
				defer w.stop()
				w.add(t, "a", 3)
				w.watermark(t, 12)
				w.add(t, "a", 4) // within the lateness: into the window
				w.watermark(t, 14)
				w.add(t, "a", -10) // beyond it
				w.add(t, "b", -5)  // beyond it, a key with no window
				w.add(t, "c", 20)
				if !slices.Equal(late.vals, []string{"a", "b"}) || !slices.Equal(late.ts, []int64{-10, -5}) {
					t.Fatalf("late side output got %v at %v, want [a b] at [-10 -5]", late.vals, late.ts)
				}
				if n := w.fn().lateDropped(); n != 2 {
					t.Fatalf("%d records counted as late, want 2", n)
				}
			})
		}
	}
}

// Rule: the late-data tag carries the window's record type; another type
// is refused when the job is built, naming both.
func TestLateDataTagOfAnotherTypeIsRefused(t *testing.T) {
	ds := countStream(window.Tumbling(time.Second), WithSideOutputLateRecords(NewOutputTag[int]("late")))
	err := errors.Join(ds.node.errs...)
	if err == nil || !strings.Contains(err.Error(), "int") || !strings.Contains(err.Error(), "string") {
		t.Fatalf("error %v, want one naming the tag's type int and the records' type string", err)
	}
}
