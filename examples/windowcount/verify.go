package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// winKey is one window of one user.
type winKey struct {
	User  string
	Start int64
}

// expectation is what the job must write for an input.
type expectation struct {
	// exact: the input is one partition, so the watermark every event
	// meets is known and so is each verdict; else only bounds are.
	exact bool
	// emissions: per window, its counts in the order emitted (exact).
	emissions map[winKey][]int64
	// events: per window, the number of its events in the input.
	events map[winKey]int64
	// late: the events beyond the allowed lateness, as "user\x00value",
	// with how many times each (exact); mayBeLate: those whose verdict
	// the interleaving of partitions decides (not exact).
	late, mayBeLate map[string]int
	total           int
}

// expect computes the job's output from the input records by the rules of
// the engine's event-time windows:
//
//   - an event's window is the tumbling window [start, start+size) that
//     holds its time;
//   - the watermark an event meets is the largest event time before it in
//     its partition minus the out-of-orderness minus 1 ms (the job's
//     watermark generator emits after every event that advances it, and
//     the watermark follows the event that made it); with one partition
//     it is exactly that, with several the minimum over the partitions'
//     is at most that (the window operator's watermark is the minimum
//     over its inputs, and its inputs' over their splits);
//   - an event is late, and goes to the late topic uncounted, when its
//     window's end-1 plus the allowed lateness is at or before the
//     watermark (the window's state is gone);
//   - otherwise it is counted, and if the watermark is at or past its
//     window's end-1 already (a late event within the lateness) the window
//     is emitted again at once with the new count;
//   - a window is emitted on time when the watermark reaches its end-1,
//     and, at the end of the bounded input, the final watermark fires
//     every window not yet emitted.
func expect(input []*kgo.Record, ru rules) expectation {
	x := expectation{emissions: map[winKey][]int64{}, events: map[winKey]int64{}, late: map[string]int{}, mayBeLate: map[string]int{}}
	parts := map[int32][]*kgo.Record{}
	for _, r := range input {
		parts[r.Partition] = append(parts[r.Partition], r)
	}
	x.exact = len(parts) <= 1
	counts := map[winKey]int64{}
	pending := map[winKey]bool{} // counted, not emitted on time yet
	for _, recs := range parts {
		slices.SortFunc(recs, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
		wm := int64(math.MinInt64)
		for _, r := range recs {
			e, err := parseEvent(r.Value)
			if err != nil {
				continue // the source skips it
			}
			x.total++
			k := winKey{e.User, windowStart(e.At, ru.size)}
			end := k.Start + ru.size
			x.events[k]++
			if end-1+ru.lateness <= wm {
				if x.exact {
					x.late[lateID(e.User, r.Value)]++
				} else {
					x.mayBeLate[lateID(e.User, r.Value)]++
				}
			} else if x.exact {
				counts[k]++
				if end-1 <= wm {
					x.emissions[k] = append(x.emissions[k], counts[k])
				} else {
					pending[k] = true
				}
			}
			if next := e.At - ru.outOfOrderness - 1; next > wm {
				wm = next
				if x.exact {
					for k := range pending {
						if k.Start+ru.size-1 <= wm {
							x.emissions[k] = append(x.emissions[k], counts[k])
							delete(pending, k)
						}
					}
				}
			}
		}
	}
	for k := range pending { // the final watermark
		x.emissions[k] = append(x.emissions[k], counts[k])
	}
	return x
}

func lateID(user string, value []byte) string { return user + "\x00" + string(value) }

// report is what verification found.
type report struct {
	windows, emissions, refired, late, events int
	diffs                                     []string
}

func (r report) ok() bool { return len(r.diffs) == 0 }

// check compares the output and late records with x.
//
// Exact: every window's emissions are x's, in order, each once; the late
// topic holds exactly x's late events, each once.
//
// Not exact (an input of several partitions): every late record is an
// input event whose verdict could be late, written once; a window's
// emissions are its on-time count, then one more per late event within the
// lateness, and the last is its events minus those in the late topic.
func check(x expectation, out, late []*kgo.Record, ru rules) report {
	rep := report{events: x.total}
	diff := func(format string, args ...any) { rep.diffs = append(rep.diffs, fmt.Sprintf(format, args...)) }
	got := map[winKey][]int64{}
	for _, r := range out {
		f := strings.Fields(string(r.Value))
		var v [3]int64
		var err error
		for i := 0; i < len(f) && i < 3 && err == nil; i++ {
			v[i], err = strconv.ParseInt(f[i], 10, 64)
		}
		if len(f) != 3 || err != nil || v[1]-v[0] != ru.size || windowStart(v[0], ru.size) != v[0] {
			diff("output %q=%q: not \"window_start_ms window_end_ms count\" of a %dms window", r.Key, r.Value, ru.size)
			continue
		}
		k := winKey{string(r.Key), v[0]}
		got[k] = append(got[k], v[2])
		rep.emissions++
	}
	rep.windows = len(got)
	for _, es := range got {
		rep.refired += len(es) - 1
	}
	gotLate := map[string]int{}
	lateOf := map[winKey]int64{}
	for _, r := range late {
		e, err := parseEvent(r.Value)
		if err != nil || string(r.Key) != e.User {
			diff("late record %q=%q: not an event of user %q", r.Key, r.Value, r.Key)
			continue
		}
		gotLate[lateID(e.User, r.Value)]++
		lateOf[winKey{e.User, windowStart(e.At, ru.size)}]++
		rep.late++
	}
	keys := slices.SortedFunc(maps.Keys(joinKeys(got, x.events)), func(a, b winKey) int {
		return cmp.Or(cmp.Compare(a.User, b.User), cmp.Compare(a.Start, b.Start))
	})
	for _, k := range keys {
		g := got[k]
		if x.exact {
			if w := x.emissions[k]; !slices.Equal(g, w) {
				diff("window %s %s: emitted counts %v, want %v", k.User, windowText(k, ru), g, w)
			}
			continue
		}
		final := x.events[k] - lateOf[k]
		switch {
		case final == 0 && len(g) > 0:
			diff("window %s %s: emitted %v, but all its %d events are in the late topic", k.User, windowText(k, ru), g, x.events[k])
		case final > 0 && (len(g) == 0 || g[len(g)-1] != final):
			diff("window %s %s: emitted counts %v, want them to end at %d (%d events, %d in the late topic)", k.User, windowText(k, ru), g, final, x.events[k], lateOf[k])
		case len(g) > 0 && (g[0] < 1 || ru.lateness == 0 && len(g) > 1):
			diff("window %s %s: emitted counts %v", k.User, windowText(k, ru), g)
		default:
			for i := 1; i < len(g); i++ {
				if g[i] != g[i-1]+1 {
					diff("window %s %s: emitted counts %v, not one more per late event", k.User, windowText(k, ru), g)
					break
				}
			}
		}
	}
	want := x.late
	if !x.exact {
		want = x.mayBeLate
	}
	for _, id := range slices.Sorted(maps.Keys(joinKeys(gotLate, want))) {
		g, w := gotLate[id], want[id]
		user, value, _ := strings.Cut(id, "\x00")
		switch {
		case g > w:
			diff("late event %s %q: written %d times, want %s", user, value, g, atMost(x.exact, w))
		case x.exact && g < w:
			diff("late event %s %q: written %d times, want %d", user, value, g, w)
		}
	}
	slices.Sort(rep.diffs)
	return rep
}

func atMost(exact bool, n int) string {
	if exact {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("at most %d (its verdict can be late)", n)
}

func windowText(k winKey, ru rules) string { return fmt.Sprintf("[%d,%d)", k.Start, k.Start+ru.size) }

// joinKeys is the set of the keys of a and b.
func joinKeys[K comparable, A, B any](a map[K]A, b map[K]B) map[K]struct{} {
	s := make(map[K]struct{}, len(a)+len(b))
	for k := range a {
		s[k] = struct{}{}
	}
	for k := range b {
		s[k] = struct{}{}
	}
	return s
}
