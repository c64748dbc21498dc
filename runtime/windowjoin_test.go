package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/window"
)

func windowJoinStream(a window.Assigner, opts ...WindowOption) DataStream[jPair] {
	env := NewEnvironment()
	x := DataStream[jRec]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[jRec]{}})}
	y := DataStream[jRec]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[jRec]{}})}
	key := func(r jRec) string { return r.Key }
	return WindowJoin(KeyBy(x, key), KeyBy(y, key), a, func(x, y jRec) (jPair, error) {
		return jPair{X: x.Value, Y: y.Value}, nil
	}, opts...)
}

// windowJoinModel is the window join's rule written out plainly: a
// record joins each of its windows (by their definition) whose end the
// watermark has not passed; a watermark fires the windows whose end it
// passes with every pair of their two sides' records, at the window's
// max timestamp, and forgets them.
type windowJoinModel struct {
	wins    *winModel
	wm      int64
	sides   map[string]map[window.TimeWindow][2][]int
	dropped int64
}

func (m *windowJoinModel) add(second bool, key string, id int, ts int64) {
	cands := m.wins.windowsOf(ts)
	placed := false
	for _, w := range cands {
		if w.End-1 <= m.wm {
			continue
		}
		placed = true
		if m.sides[key] == nil {
			m.sides[key] = map[window.TimeWindow][2][]int{}
		}
		s := m.sides[key][w]
		side := 0
		if second {
			side = 1
		}
		s[side] = append(s[side], id)
		m.sides[key][w] = s
	}
	if !placed && len(cands) > 0 {
		m.dropped++
	}
}

func (m *windowJoinModel) watermark(wm int64) []jPair {
	var out []jPair
	for _, ws := range m.sides {
		for w, s := range ws {
			if w.End-1 > wm {
				continue
			}
			for _, x := range s[0] {
				for _, y := range s[1] {
					out = append(out, jPair{x, y, w.MaxTimestamp()})
				}
			}
			delete(ws, w)
		}
	}
	m.wm = max(m.wm, wm)
	return out
}

// Rule: a window join emits, when a window fires, every pair of a record
// of the first input and one of the second of that key in that window,
// at the window's max timestamp, and nothing for a window with one side
// only; records late for all their windows are dropped and counted; at
// the end no key keeps state and no timer is left. Tumbling and sliding
// windows, both backends, against the model over random records and
// watermarks.
func TestWindowJoinFollowsTheModel(t *testing.T) {
	assigners := []struct {
		a window.Assigner
		m shape
	}{
		{window.Tumbling(10 * time.Millisecond), shape{size: 10, slide: 10}},
		{window.Sliding(12*time.Millisecond, 4*time.Millisecond), shape{size: 12, slide: 4}},
		{window.Sliding(4*time.Millisecond, 6*time.Millisecond), shape{size: 4, slide: 6}},
	}
	keys := []string{"a", "b", "c"}
	for _, b := range stateBackends {
		for _, a := range assigners {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("%s/%s/%d", b, a.a, seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 3))
					w := openWin[string, either[jRec, jRec]](t, windowJoinStream(a.a), unitStateConfig(t, b), nil, 1, 0)
					defer w.stop()
					m := &windowJoinModel{wins: newWinModel(a.m, 0), wm: math.MinInt64, sides: map[string]map[window.TimeWindow][2][]int{}}
					maxTs, wm := int64(0), int64(-5)
					emitted := 0
					for step := range 400 {
						var want []jPair
						if rng.IntN(6) == 0 {
							wm = max(wm, maxTs-int64(rng.IntN(10)))
							want = m.watermark(wm)
							w.watermark(t, wm)
						} else {
							second := rng.IntN(2) == 1
							k := keys[rng.IntN(len(keys))]
							ts := maxTs + int64(rng.IntN(4)) - int64(rng.IntN(16))
							maxTs = max(maxTs, ts)
							m.add(second, k, step, ts)
							e := left[jRec, jRec](jRec{k, step})
							if second {
								e = right[jRec](jRec{k, step})
							}
							w.add(t, e, ts)
						}
						got := pairs(w)
						emitted += len(got)
						if !slices.Equal(sortedPairs(got), sortedPairs(want)) {
							t.Fatalf("step %d: emitted %v, the model %v", step, sortedPairs(got), sortedPairs(want))
						}
						if d := w.fn().lateDropped(); d != m.dropped {
							t.Fatalf("step %d: %d records dropped as late, the model %d", step, d, m.dropped)
						}
					}
					want := m.watermark(engine.MaxWatermark)
					w.watermark(t, engine.MaxWatermark)
					if got := pairs(w); !slices.Equal(sortedPairs(got), sortedPairs(want)) {
						t.Fatalf("end: emitted %v, the model %v", sortedPairs(got), sortedPairs(want))
					}
					if n := w.keysInState(t, keys); n != 0 {
						t.Fatalf("%d keys keep window state after the end of input", n)
					}
					if n := w.timersLeft(); n != 0 {
						t.Fatalf("%d timers left after the end of input", n)
					}
					if emitted == 0 || m.dropped == 0 {
						t.Fatalf("%d pairs emitted, %d records dropped: the run proves less than it says", emitted, m.dropped)
					}
				})
			}
		}
	}
}

// Rule: session windows of a window join merge over both inputs: a
// record of either side extends its key's session, and the merged
// session pairs every record of the first side with every one of the
// second.
func TestWindowJoinSessionsMergeAcrossInputs(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			w := openWin[string, either[jRec, jRec]](t, windowJoinStream(window.Session(5*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			w.add(t, left[jRec, jRec](jRec{"k", 1}), 0) // [0,5)
			w.add(t, right[jRec](jRec{"k", 2}), 8)      // [8,13)
			w.add(t, left[jRec, jRec](jRec{"k", 3}), 4) // [4,9) bridges: [0,13)
			w.add(t, right[jRec](jRec{"k", 4}), 30)     // [30,35): one side only
			w.watermark(t, 12)
			want := []jPair{{1, 2, 12}, {3, 2, 12}}
			if got := sortedPairs(pairs(w)); !slices.Equal(got, want) {
				t.Fatalf("emitted %v, want %v", got, want)
			}
			w.watermark(t, engine.MaxWatermark)
			if got := pairs(w); len(got) != 0 {
				t.Fatalf("a session of one side emitted %v", got)
			}
			if n := w.keysInState(t, []string{"k"}); n != 0 {
				t.Fatalf("%d keys keep window state", n)
			}
		})
	}
}

// Rule: a window join emits each pair once. A record that arrives within
// the allowed lateness after its window fired pairs only with the other
// side's records, not again every pair the window emitted before; an
// early firing's pairs are not repeated on time; sessions that fired
// early and then merge emit the pairs across them, and only those. Both
// backends.
func TestWindowJoinEmitsEachPairOnce(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b)+"/lateness", func(t *testing.T) {
			w := openWin[string, either[jRec, jRec]](t, windowJoinStream(window.Tumbling(10*time.Millisecond), WithAllowedLateness(100*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			w.add(t, left[jRec, jRec](jRec{"k", 1}), 1)
			w.add(t, right[jRec](jRec{"k", 2}), 2)
			w.watermark(t, 9)
			if got, want := sortedPairs(pairs(w)), []jPair{{1, 2, 9}}; !slices.Equal(got, want) {
				t.Fatalf("on time: emitted %v, want %v", got, want)
			}
			w.add(t, right[jRec](jRec{"k", 3}), 3) // late, within the lateness
			if got, want := sortedPairs(pairs(w)), []jPair{{1, 3, 9}}; !slices.Equal(got, want) {
				t.Fatalf("a late right record: emitted %v, want %v (only its own pairs)", got, want)
			}
			w.add(t, left[jRec, jRec](jRec{"k", 4}), 4)
			if got, want := sortedPairs(pairs(w)), []jPair{{4, 2, 9}, {4, 3, 9}}; !slices.Equal(got, want) {
				t.Fatalf("a late left record: emitted %v, want %v (only its own pairs)", got, want)
			}
			w.watermark(t, engine.MaxWatermark)
			if got := pairs(w); len(got) != 0 {
				t.Fatalf("the cleanup emitted %v", got)
			}
			if n := w.keysInState(t, []string{"k"}); n != 0 {
				t.Fatalf("%d keys keep window state", n)
			}
		})
		t.Run(string(b)+"/early", func(t *testing.T) {
			w := openWin[string, either[jRec, jRec]](t, windowJoinStream(window.Session(5*time.Millisecond), WithEarlyFiring(100*time.Millisecond)), unitStateConfig(t, b), nil, 1, 0)
			defer w.stop()
			w.add(t, left[jRec, jRec](jRec{"k", 1}), 0)  // [0,5)
			w.add(t, right[jRec](jRec{"k", 2}), 1)       // [0,6)
			w.add(t, left[jRec, jRec](jRec{"k", 3}), 10) // [10,15)
			w.add(t, right[jRec](jRec{"k", 4}), 11)      // [10,16)
			w.advance(t, w.clock+100)                    // the next early-firing period
			if got, want := sortedPairs(pairs(w)), []jPair{{1, 2, 5}, {3, 4, 15}}; !slices.Equal(got, want) {
				t.Fatalf("early: emitted %v, want %v", got, want)
			}
			w.add(t, right[jRec](jRec{"k", 5}), 5) // [5,10) bridges: [0,16)
			w.watermark(t, engine.MaxWatermark)
			want := []jPair{{1, 4, 15}, {1, 5, 15}, {3, 2, 15}, {3, 5, 15}}
			if got := sortedPairs(pairs(w)); !slices.Equal(got, want) {
				t.Fatalf("on time after the merge: emitted %v, want %v (the pairs across the merged sessions and the new record's)", got, want)
			}
		})
	}
}
