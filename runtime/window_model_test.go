package runtime

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/window"
)

// winRes is a window count result, comparable.
type winRes struct {
	Key string
	W   window.TimeWindow
	N   int64
	F   window.Firing
}

func sortedRes(rs []winRes) []winRes {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b winRes) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.W.Start, b.W.Start), cmp.Compare(a.W.End, b.W.End),
			cmp.Compare(a.N, b.N), cmp.Compare(a.F, b.F))
	})
	return rs
}

// winModel is the rules of counting windows, written out plainly: per
// key, the windows and their counts; a record joins every window of it
// whose end plus the allowed lateness the watermark has not passed,
// firing it at once if the watermark passed its end; a watermark fires
// the windows whose end it passes and forgets those whose end plus the
// lateness it passes.
// shape is a window assigner as the model sees it, given by the test
// beside the assigner rather than read from it, so that the model stays
// independent of the code under test: gap > 0 is a session of that gap,
// otherwise windows [offset + k*slide, offset + k*slide + size).
type shape struct{ size, slide, offset, gap int64 }

type winModel struct {
	a        shape
	lateness int64
	wm       int64
	wins     map[string]map[window.TimeWindow]int64
	dropped  int64
}

func newWinModel(a shape, lateness int64) *winModel {
	return &winModel{a: a, lateness: lateness, wm: math.MinInt64, wins: map[string]map[window.TimeWindow]int64{}}
}

// windowsOf lists ts's tumbling or sliding windows by their definition:
// every [s, s+size) holding ts with s = offset + k*slide.
func (m *winModel) windowsOf(ts int64) []window.TimeWindow {
	var out []window.TimeWindow
	for k := (ts-m.a.offset-m.a.size)/m.a.slide - 2; ; k++ {
		s := m.a.offset + k*m.a.slide
		if s > ts {
			break
		}
		if ts < s+m.a.size {
			out = append(out, window.TimeWindow{Start: s, End: s + m.a.size})
		}
	}
	return out
}

func (m *winModel) add(key string, ts int64) []winRes {
	ws := m.wins[key]
	if ws == nil {
		ws = map[window.TimeWindow]int64{}
		m.wins[key] = ws
	}
	if m.a.gap > 0 {
		return m.addSession(key, ws, ts)
	}
	var out []winRes
	placed := false
	cands := m.windowsOf(ts)
	for _, w := range cands {
		if w.End-1+m.lateness <= m.wm {
			continue
		}
		placed = true
		ws[w]++
		if w.End-1 <= m.wm {
			out = append(out, winRes{key, w, ws[w], window.Late})
		}
	}
	if !placed && len(cands) > 0 {
		m.dropped++
	}
	return out
}

func (m *winModel) addSession(key string, ws map[window.TimeWindow]int64, ts int64) []winRes {
	merged := window.TimeWindow{Start: ts, End: ts + m.a.gap}
	var n int64 = 1
	var parts []window.TimeWindow
	for w, c := range ws {
		if w.Start <= ts+m.a.gap && w.End >= ts {
			parts = append(parts, w)
			n += c
			merged.Start, merged.End = min(merged.Start, w.Start), max(merged.End, w.End)
		}
	}
	if merged.End-1+m.lateness <= m.wm {
		m.dropped++
		return nil
	}
	for _, p := range parts {
		delete(ws, p)
	}
	ws[merged] = n
	if merged.End-1 <= m.wm {
		return []winRes{{key, merged, n, window.Late}}
	}
	return nil
}

func (m *winModel) watermark(wm int64) []winRes {
	if wm <= m.wm {
		return nil
	}
	var out []winRes
	for key, ws := range m.wins {
		for w, c := range ws {
			if w.End-1 > m.wm && w.End-1 <= wm {
				out = append(out, winRes{key, w, c, window.OnTime})
			}
			if w.End-1+m.lateness <= wm {
				delete(ws, w)
			}
		}
	}
	m.wm = wm
	return out
}

func countStream(a window.Assigner, opts ...WindowOption) DataStream[window.Result[string, int64]] {
	return winStream(func(s string) string { return s }, func(ks KeyedStream[string, string]) DataStream[window.Result[string, int64]] {
		return WindowCount(Window(ks, a, opts...))
	})
}

// results turns what the operator emitted into winRes, checking each
// result's timestamp is its window's MaxTimestamp.
func results(t *testing.T, step int, w *winOp[string, string, window.Result[string, int64]]) []winRes {
	t.Helper()
	var out []winRes
	for i, r := range w.out.vals {
		if w.out.ts[i] != r.Window.MaxTimestamp() {
			t.Fatalf("step %d: result %+v has timestamp %d, want its window's max timestamp", step, r, w.out.ts[i])
		}
		out = append(out, winRes{r.Key, r.Window, r.Value, r.Firing})
	}
	w.out.take()
	return out
}

// Rule: tumbling, sliding and session windows in event time count, fire
// (on time and late), drop late records and forget windows as the model
// says, over random records and watermarks, with and without allowed
// lateness, on both backends; once the input ends no key keeps state or
// timers.
func TestWindowsFollowTheModel(t *testing.T) {
	assigners := []struct {
		a window.Assigner
		m shape
	}{
		{window.Tumbling(10 * time.Millisecond), shape{size: 10, slide: 10}},
		{window.Tumbling(10 * time.Millisecond).WithOffset(3 * time.Millisecond), shape{size: 10, slide: 10, offset: 3}},
		{window.Sliding(12*time.Millisecond, 4*time.Millisecond), shape{size: 12, slide: 4}},
		{window.Sliding(10*time.Millisecond, 3*time.Millisecond).WithOffset(-2 * time.Millisecond), shape{size: 10, slide: 3, offset: -2}},
		{window.Sliding(4*time.Millisecond, 6*time.Millisecond), shape{size: 4, slide: 6}}, // gaps between windows
		{window.Session(5 * time.Millisecond), shape{gap: 5}},
	}
	keys := []string{"a", "b", "c", "d", "e"}
	for _, b := range stateBackends {
		for _, a := range assigners {
			for _, lateness := range []int64{0, 7} {
				for seed := range uint64(3) {
					t.Run(fmt.Sprintf("%s/%s/lateness=%d/%d", b, a.a, lateness, seed), func(t *testing.T) {
						runWindowModel(t, b, a.a, a.m, lateness, seed, keys)
					})
				}
			}
		}
	}
}

func runWindowModel(t *testing.T, b backendKind, a window.Assigner, ms shape, lateness int64, seed uint64, keys []string) {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := openWin[string, string](t, countStream(a, WithAllowedLateness(time.Duration(lateness)*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
	defer w.stop()
	m := newWinModel(ms, lateness)
	maxTs, wm := int64(0), int64(-5)
	for step := range 600 {
		var want []winRes
		if rng.IntN(5) == 0 {
			wm = max(wm, maxTs-int64(rng.IntN(12)))
			want = m.watermark(wm)
			w.watermark(t, wm)
		} else {
			k := keys[rng.IntN(len(keys))]
			ts := maxTs + int64(rng.IntN(6)) - int64(rng.IntN(20)) // some out of order, some late
			maxTs = max(maxTs, ts)
			want = m.add(k, ts)
			w.add(t, k, ts)
		}
		if got := results(t, step, w); !slices.Equal(sortedRes(got), sortedRes(want)) {
			t.Fatalf("step %d: emitted %v, the model %v", step, sortedRes(got), sortedRes(want))
		}
		if got := w.fn().lateDropped(); got != m.dropped {
			t.Fatalf("step %d: %d records dropped as late, the model %d", step, got, m.dropped)
		}
	}
	want := m.watermark(engine.MaxWatermark)
	w.watermark(t, engine.MaxWatermark)
	if got := results(t, -1, w); !slices.Equal(sortedRes(got), sortedRes(want)) {
		t.Fatalf("end: emitted %v, the model %v", sortedRes(got), sortedRes(want))
	}
	if n := w.keysInState(t, keys); n != 0 {
		t.Fatalf("%d keys keep window state after the end of input", n)
	}
	if n := w.timersLeft(); n != 0 {
		t.Fatalf("%d timers left after the end of input", n)
	}
}
