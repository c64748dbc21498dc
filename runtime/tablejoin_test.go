package runtime

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// The face of the table join's function for the window harness (openWin).
func (f *tableJoinFn[K, A, V, O]) setClock(func() int64) {}
func (f *tableJoinFn[K, A, V, O]) lateDropped() int64    { return f.droppedLate }

// tjRow is a table update of the table join tests: a string key's int
// value. The join's results are jPairs: X the stream record's id, Y the
// table's value (noValue for a left join's record without one).
type tjRow = TableUpdate[string, int]

const noValue = -1

type tjOp = winOp[string, either[jRec, tjRow], jPair]

func tableJoinStream(outer bool, opts ...TableJoinOption) DataStream[jPair] {
	env := NewEnvironment()
	a := DataStream[jRec]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[jRec]{}})}
	b := DataStream[tjRow]{env: env, node: env.addNode("Source", &node{out: typeOpsFor[tjRow]{}})}
	stream := KeyBy(a, func(r jRec) string { return r.Key })
	if outer {
		return LeftTableJoin(stream, b, func(x jRec, v int, ok bool) (jPair, error) {
			if !ok {
				v = noValue
			}
			return jPair{X: x.Value, Y: v}, nil
		}, opts...)
	}
	return TableJoin(stream, b, func(x jRec, v int) (jPair, error) {
		return jPair{X: x.Value, Y: v}, nil
	}, opts...)
}

// tjPairs takes what the join emitted, with its timestamps.
func tjPairs(w *tjOp) []jPair {
	out := slices.Clone(w.out.vals)
	for i := range out {
		out[i].Ts = w.out.ts[i]
	}
	w.out.take()
	return out
}

func openTableJoin(t testing.TB, outer bool, b backendKind) *tjOp {
	t.Helper()
	return openWin[string, either[jRec, tjRow]](t, tableJoinStream(outer), unitStateConfig(t, b), nil, 1, 0)
}

// tableState counts, for key, the stream records' timestamps and the
// table's versions the join holds.
func tableState(t testing.TB, w *tjOp, key string) (records, versions int) {
	t.Helper()
	w.p.state.SetKey(key)
	r, _ := w.p.state.States[tableJoinRecordsState].(interface{ Len() int })
	v, _ := w.p.state.States[tableJoinVersionsState].(interface{ Len() int })
	if r == nil || v == nil {
		t.Fatal("the table join's states are not declared")
	}
	records, versions = r.Len(), v.Len()
	if w.p.state.Err != nil {
		t.Fatal(w.p.state.Err)
	}
	return records, versions
}

// innerOnly drops the pairs of records without a table value: what the
// inner join emits of a left join's results.
func innerOnly(ps []jPair) []jPair {
	return slices.DeleteFunc(slices.Clone(ps), func(p jPair) bool { return p.Y == noValue })
}

func forJoinKinds(t *testing.T, f func(t *testing.T, b backendKind, outer bool)) {
	for _, b := range stateBackends {
		for _, outer := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/left=%t", b, outer), func(t *testing.T) { f(t, b, outer) })
		}
	}
}

// Rule (event-time temporal join): a stream record at t joins the value
// of the latest table update of its key at or before t (an update at
// exactly t counts; of two at one timestamp the later), deletions remove
// the value, and the result is emitted with timestamp t once the
// watermark reaches t. The inner join emits nothing for a record without
// a value, the left join emits it with none. Once the watermark passes
// them, a key's versions collapse to its current value (none after a
// deletion). A stream record at or behind the watermark is late: dropped
// and counted. A table update behind the watermark replaces the current
// value unless that is newer.
func TestTableJoinJoinsTheValueAsOfTheRecordsTime(t *testing.T) {
	forJoinKinds(t, func(t *testing.T, b backendKind, outer bool) {
		w := openTableJoin(t, outer, b)
		defer w.stop()
		type step struct {
			op       byte // 'r' record (v: id), 't' table update (v: value), 'd' deletion, 'w' watermark
			key      string
			v        int
			ts       int64
			want     []jPair // what the step emits, for the left join
			versions int     // key's versions held after the step
		}
		steps := []step{
			{'t', "k", 100, 10, nil, 1},
			{'r', "k", 1, 9, nil, 1},  // before any value
			{'r', "k", 2, 10, nil, 1}, // at the update
			{'t', "k", 200, 15, nil, 2},
			{'r', "k", 3, 14, nil, 2}, // before the second
			{'r', "k", 4, 20, nil, 2}, // after both
			{'r', "k", 5, 15, nil, 2}, // at the second
			{'d', "k", 0, 17, nil, 3},
			{'r', "k", 6, 18, nil, 3}, // after the deletion
			{'t', "k", 300, 19, nil, 4},
			{'r', "k", 7, 19, nil, 4},
			{'r', "k", 8, 12, nil, 4}, // out of order, within the watermark
			{'w', "k", 0, 16, []jPair{{1, noValue, 9}, {2, 100, 10}, {8, 100, 12}, {3, 100, 14}, {5, 200, 15}}, 3},
			{'w', "k", 0, 20, []jPair{{6, noValue, 18}, {7, 300, 19}, {4, 300, 20}}, 1}, // 100..300 collapse to 300
			{'r', "k", 9, 20, nil, 1},   // at the watermark: late
			{'t', "k", 400, 5, nil, 1},  // behind the watermark and older than 300@19: ignored
			{'t', "k", 500, 21, nil, 2}, // two updates at one timestamp:
			{'t', "k", 600, 21, nil, 2}, // the later wins
			{'r', "k", 10, 21, nil, 2},
			{'r', "k", 11, 25, nil, 2},
			{'t', "j", 7, 22, nil, 1},
			{'r', "j", 12, 23, nil, 1},
			{'w', "k", 0, 30, []jPair{{10, 600, 21}, {12, 7, 23}, {11, 600, 25}}, 1},
			{'d', "j", 0, 25, nil, 0},   // behind the watermark, newer than 7@22: deletes j
			{'r', "j", 13, 31, nil, 0},  // no value
			{'t', "k", 700, 26, nil, 1}, // behind the watermark, newer than 600@21: replaces it
			{'r', "k", 14, 40, nil, 1},
			{'w', "k", 0, 45, []jPair{{13, noValue, 31}, {14, 700, 40}}, 1},
		}
		for i, s := range steps {
			switch s.op {
			case 'r':
				w.add(t, left[jRec, tjRow](jRec{s.key, s.v}), s.ts)
			case 't':
				w.add(t, right[jRec](tjRow{Key: s.key, Value: s.v}), s.ts)
			case 'd':
				w.add(t, right[jRec](tjRow{Key: s.key, Value: 999, Deleted: true}), s.ts)
			case 'w':
				w.watermark(t, s.ts)
			}
			want := s.want
			if !outer {
				want = innerOnly(want)
			}
			if got := tjPairs(w); !slices.Equal(sortedByTs(got), sortedByTs(want)) {
				t.Fatalf("step %d: emitted %v, want %v", i, sortedByTs(got), sortedByTs(want))
			}
			if _, v := tableState(t, w, s.key); v != s.versions {
				t.Fatalf("step %d: key %s holds %d versions, want %d", i, s.key, v, s.versions)
			}
		}
		if d := w.fn().lateDropped(); d != 1 {
			t.Fatalf("%d records dropped as late, want 1", d)
		}
		for _, k := range []string{"k", "j"} {
			if r, _ := tableState(t, w, k); r != 0 {
				t.Fatalf("key %s keeps %d timestamps of records after the watermark passed them", k, r)
			}
		}
		if n := w.timersLeft(); n != 0 {
			t.Fatalf("%d timers left after the watermark passed everything", n)
		}
	})
}

func sortedByTs(ps []jPair) []jPair {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b jPair) int { return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(a.X, b.X)) })
	return ps
}

// tjEvent is one event of an input of the interleaving test: a record or
// table update (kind 'r', 't', 'd') or the input's watermark ('w').
type tjEvent struct {
	kind byte
	key  string
	v    int
	ts   int64
}

// tjInput makes one input's events: n records or updates of keys with
// timestamps out of order by up to bound below the highest so far, and
// after some of them the input's watermark (bounded out-of-orderness:
// the highest timestamp - bound - 1), so none of its records is behind
// its own watermark.
func tjInput(rng *rand.Rand, table bool, n int, keys []string, bound int64, firstID int) []tjEvent {
	var evs []tjEvent
	hi := int64(0)
	for i := range n {
		hi += int64(rng.IntN(3))
		ts := hi - int64(rng.IntN(int(bound)+1))
		e := tjEvent{kind: 'r', key: keys[rng.IntN(len(keys))], v: firstID + i, ts: ts}
		if table {
			e.kind = 't'
			if rng.IntN(6) == 0 {
				e.kind = 'd'
			}
		}
		evs = append(evs, e)
		if rng.IntN(4) == 0 {
			evs = append(evs, tjEvent{kind: 'w', ts: hi - bound - 1})
		}
	}
	return evs
}

// tjExpected is the table join written out plainly over the whole of
// both inputs: each record joins the latest update of its key at or
// before its timestamp (of two at one timestamp, the later in the
// table's order), none if there is none or it is a deletion.
func tjExpected(stream, table []tjEvent) []jPair {
	var out []jPair
	for _, r := range stream {
		if r.kind != 'r' {
			continue
		}
		var best *tjEvent
		for i := range table {
			u := &table[i]
			if u.kind == 'w' || u.key != r.key || u.ts > r.ts {
				continue
			}
			if best == nil || u.ts >= best.ts {
				best = u
			}
		}
		y := noValue
		if best != nil && best.kind == 't' {
			y = best.v
		}
		out = append(out, jPair{X: r.v, Y: y, Ts: r.ts})
	}
	return out
}

// Rule: the table join's output does not depend on how its two inputs
// interleave, as long as each input keeps to its own watermark: whether
// the table's updates come before the records that need them (a table
// read ahead) or after (a table still being loaded), every record joins
// the value its key had at its time. The operator's watermark is the
// minimum of the inputs'; random inputs and interleavings, both
// backends, inner and left; against the join computed over the whole
// inputs. At the end no record is buffered, a key holds at most its
// current value, and no timer is left.
func TestTableJoinOutputDoesNotDependOnInterleaving(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	forJoinKinds(t, func(t *testing.T, b backendKind, outer bool) {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 11))
			stream := tjInput(rng, false, 300, keys, 6, 0)
			table := tjInput(rng, true, 150, keys, 4, 1000)
			want := tjExpected(stream, table)
			if !outer {
				want = innerOnly(want)
			}
			matched, unmatched := 0, 0
			for _, p := range want {
				if p.Y == noValue {
					unmatched++
				} else {
					matched++
				}
			}
			if matched == 0 || (outer && unmatched == 0) {
				t.Fatalf("seed %d: %d records with a value, %d without: the inputs prove less than the test says", seed, matched, unmatched)
			}
			// The table first, the stream first, and random mixes with
			// the table ahead or behind.
			for mix, tableFirst := range []float64{1, 0, 0.5, 0.2, 0.8} {
				w := openTableJoin(t, outer, b)
				var got []jPair
				si, ti := 0, 0
				wms := [2]int64{-1 << 40, -1 << 40}
				opWm := int64(-1 << 40)
				for si < len(stream) || ti < len(table) {
					var e tjEvent
					side := 0
					if ti < len(table) && (si == len(stream) || rng.Float64() < tableFirst) {
						e, side = table[ti], 1
						ti++
					} else {
						e = stream[si]
						si++
					}
					switch e.kind {
					case 'w':
						wms[side] = max(wms[side], e.ts)
						if m := min(wms[0], wms[1]); m > opWm {
							opWm = m
							w.watermark(t, m)
						}
					case 'r':
						w.add(t, left[jRec, tjRow](jRec{e.key, e.v}), e.ts)
					default:
						w.add(t, right[jRec](tjRow{Key: e.key, Value: e.v, Deleted: e.kind == 'd'}), e.ts)
					}
					got = append(got, tjPairs(w)...)
				}
				w.watermark(t, engine.MaxWatermark)
				got = append(got, tjPairs(w)...)
				if !slices.Equal(sortedPairs(got), sortedPairs(want)) {
					t.Fatalf("seed %d mix %d: emitted %d results, want %d; first difference %s", seed, mix, len(got), len(want), firstDiff(sortedPairs(got), sortedPairs(want)))
				}
				if d := w.fn().lateDropped(); d != 0 {
					t.Fatalf("seed %d mix %d: %d records dropped as late, none is", seed, mix, d)
				}
				for _, k := range keys {
					if r, v := tableState(t, w, k); r != 0 || v > 1 {
						t.Fatalf("seed %d mix %d: key %s holds %d record timestamps and %d versions at the end, want none and at most 1", seed, mix, k, r, v)
					}
				}
				if n := w.timersLeft(); n != 0 {
					t.Fatalf("seed %d mix %d: %d timers left", seed, mix, n)
				}
				w.stop()
			}
		}
	})
}

func firstDiff(got, want []jPair) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got %v, want %v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

var lateRecordsTag = NewOutputTag[jRec]("late-records")

// Rule: with WithSideOutputLateRecords a stream record at or behind the
// watermark goes, as it came and with its own timestamp, to the side
// output; it is counted as dropped all the same, and records ahead of
// the watermark are joined as ever.
func TestTableJoinLateRecordsGoToTheSideOutput(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			ds := tableJoinStream(false, WithSideOutputLateRecords(lateRecordsTag))
			if len(ds.node.sideTags) != 1 || ds.node.sideTags[0].id != "late-records" {
				t.Fatalf("the join declares side outputs %v, want the late-records tag", ds.node.sideTags)
			}
			late := &winOut[jRec]{}
			sides := &sideOutputs{ids: []string{"late-records"}, outs: []any{engine.Output[jRec](late)}}
			w := openWinSides[string, either[jRec, tjRow]](t, ds, unitStateConfig(t, b), nil, 1, 0, sides)
			defer w.stop()
			w.add(t, right[jRec](tjRow{Key: "k", Value: 5}), 1)
			w.watermark(t, 10)
			w.add(t, left[jRec, tjRow](jRec{"k", 1}), 10) // at the watermark
			w.add(t, left[jRec, tjRow](jRec{"k", 2}), 3)  // behind it
			w.add(t, left[jRec, tjRow](jRec{"k", 3}), 11)
			w.watermark(t, 11)
			if !slices.Equal(late.vals, []jRec{{"k", 1}, {"k", 2}}) || !slices.Equal(late.ts, []int64{10, 3}) {
				t.Fatalf("late side output got %v at %v, want records 1 and 2 at [10 3]", late.vals, late.ts)
			}
			if got := tjPairs(w); !slices.Equal(got, []jPair{{3, 5, 11}}) {
				t.Fatalf("emitted %v, want record 3 joined with 5 at 11", got)
			}
			if n := w.fn().lateDropped(); n != 2 {
				t.Fatalf("%d records counted as late, want 2", n)
			}
		})
	}
}

// Build-time refusals of the table joins, and a stream keyed with
// KeyByHashed, whose hash the table takes.
func TestTableJoinMisuseIsRefused(t *testing.T) {
	key := func(v int64) int64 { return v }
	rows := func(ds DataStream[int64]) DataStream[TableUpdate[int64, int64]] {
		return Map(ds, func(v int64) (TableUpdate[int64, int64], error) {
			return TableUpdate[int64, int64]{Key: v, Value: v}, nil
		})
	}
	for _, c := range []struct {
		name, want string
		build      func(a KeyedStream[int64, int64], b DataStream[TableUpdate[int64, int64]]) DataStream[int64]
	}{
		{"nil inner function", "join function is nil", func(a KeyedStream[int64, int64], b DataStream[TableUpdate[int64, int64]]) DataStream[int64] {
			return TableJoin[int64, int64, int64, int64](a, b, nil)
		}},
		{"nil left function", "join function is nil", func(a KeyedStream[int64, int64], b DataStream[TableUpdate[int64, int64]]) DataStream[int64] {
			return LeftTableJoin[int64, int64, int64, int64](a, b, nil)
		}},
		{"nil option", "table join option is nil", func(a KeyedStream[int64, int64], b DataStream[TableUpdate[int64, int64]]) DataStream[int64] {
			return TableJoin(a, b, func(x, v int64) (int64, error) { return x, nil }, nil)
		}},
		{"late tag of another type", "the tag carries string, but the stream's records are int64", func(a KeyedStream[int64, int64], b DataStream[TableUpdate[int64, int64]]) DataStream[int64] {
			return TableJoin(a, b, func(x, v int64) (int64, error) { return x, nil }, WithSideOutputLateRecords(NewOutputTag[string]("late")))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := NewEnvironment(WithLogger(discardLogger()))
			a := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "a")
			b := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "b")
			SinkTo(c.build(KeyBy(a, key), rows(b)), newCollectSink[int64]())
			err := env.Execute(testCtx(t), "misuse")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Execute: %v, want ErrInvalidGraph saying %q", err, c.want)
			}
		})
	}
	t.Run("hashed stream", func(t *testing.T) {
		env := NewEnvironment(WithLogger(discardLogger()))
		a := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "a")
		b := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "b")
		ds := TableJoin(KeyByHashed(a, key, func(v int64) uint32 { return uint32(v) }), rows(b), func(x, v int64) (int64, error) { return x, nil })
		if err := errors.Join(ds.node.errs...); err != nil {
			t.Fatalf("a stream keyed with KeyByHashed: %v; the table should take its hash", err)
		}
	})
}
