package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

var testRules = rules{size: 60000, outOfOrderness: 5000, lateness: 30000}

// inputRecords is a generated input as one partition's records.
func inputRecords(lines []string) []*kgo.Record {
	recs := make([]*kgo.Record, len(lines))
	for i, l := range lines {
		user, _, _ := strings.Cut(l, " ")
		recs[i] = &kgo.Record{Key: []byte(user), Value: []byte(l), Offset: int64(i)}
	}
	return recs
}

// outputOf writes what x says the job writes, in an order the job could
// have written it: windows by user and start, each window's emissions in
// order.
func outputOf(x expectation, input []*kgo.Record, ru rules) (out, late []*kgo.Record) {
	for _, k := range slices.SortedFunc(maps.Keys(x.emissions), func(a, b winKey) int {
		return cmp.Or(strings.Compare(a.User, b.User), cmp.Compare(a.Start, b.Start))
	}) {
		for _, n := range x.emissions[k] {
			out = append(out, &kgo.Record{Key: []byte(k.User), Value: fmt.Appendf(nil, "%d %d %d", k.Start, k.Start+ru.size, n)})
		}
	}
	want := map[string]int{}
	for id, n := range x.late {
		want[id] = n
	}
	for _, r := range input {
		e, _ := parseEvent(r.Value)
		if id := lateID(e.User, r.Value); want[id] > 0 {
			want[id]--
			late = append(late, &kgo.Record{Key: []byte(e.User), Value: r.Value})
		}
	}
	return out, late
}

// The verifier passes the output the rules give and fails every kind of
// wrong output: a count off by one, an emission missing or twice, a
// window that should not exist, a late event missing, twice or not late,
// a malformed record.
func TestVerifierFailsOnWrongOutput(t *testing.T) {
	input := inputRecords(generate(20000, 3, testRules))
	x := expect(input, testRules)
	out, late := outputOf(x, input, testRules)
	if r := check(x, out, late, testRules); !r.ok() || r.refired == 0 || r.late == 0 {
		t.Fatalf("the rules' own output: ok=%v refired=%d late=%d, differences %v", r.ok(), r.refired, r.late, r.diffs)
	}
	// the first emission of a window emitted more than once
	refired := slices.IndexFunc(out, func(r *kgo.Record) bool {
		k := winKey{User: string(r.Key)}
		_, _ = fmt.Sscanf(string(r.Value), "%d", &k.Start)
		return len(x.emissions[k]) > 1
	})
	if refired < 0 {
		t.Fatal("no re-fired window in the input")
	}
	clone := func(rs []*kgo.Record) []*kgo.Record {
		c := make([]*kgo.Record, len(rs))
		for i, r := range rs {
			cp := *r
			c[i] = &cp
		}
		return c
	}
	for _, m := range []struct {
		name   string
		mutate func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record)
		want   string
	}{
		{"count off by one", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			var s, e, n int64
			_, _ = fmt.Sscanf(string(out[0].Value), "%d %d %d", &s, &e, &n)
			out[0].Value = fmt.Appendf(nil, "%d %d %d", s, e, n+1)
			return out, late
		}, "emitted counts"},
		{"emission missing", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			return slices.Delete(out, refired, refired+1), late
		}, "emitted counts"},
		{"emission twice", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			return slices.Insert(out, refired, out[refired]), late
		}, "emitted counts"},
		{"window of another user", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			out[0].Key = []byte("nobody")
			return out, late
		}, "window nobody"},
		{"late event missing", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			return out, late[1:]
		}, "written 0 times, want 1"},
		{"late event twice", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			return out, append(late, late[0])
		}, "written 2 times, want 1"},
		{"on-time event as late", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			for _, r := range input {
				e, _ := parseEvent(r.Value)
				if x.late[lateID(e.User, r.Value)] == 0 {
					return out, append(late, &kgo.Record{Key: []byte(e.User), Value: r.Value})
				}
			}
			return out, late
		}, "written 1 times, want 0"},
		{"malformed count", func(out, late []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
			out[0].Value = []byte("1 2 3")
			return out, late
		}, "not \"window_start_ms window_end_ms count\""},
	} {
		t.Run(m.name, func(t *testing.T) {
			o, l := m.mutate(clone(out), clone(late))
			r := check(x, o, l, testRules)
			if r.ok() || !strings.Contains(strings.Join(r.diffs, "\n"), m.want) {
				t.Fatalf("ok=%v, differences:\n%s\nwant one saying %q", r.ok(), strings.Join(r.diffs, "\n"), m.want)
			}
		})
	}
}

// The verifier's rules on a small input worked out by hand: windows of a
// minute, 5 s of out-of-orderness, 30 s of lateness.
func TestExpectByHand(t *testing.T) {
	input := inputRecords([]string{
		"ann a 10000",  // [0,60000) count 1; watermark 4999
		"ann a 70000",  // [60000,120000); watermark 64999: [0,60000) fires with 1
		"ann a 59000",  // late within lateness (end-1+30000 = 89999 > 64999): [0,60000) fires again with 2
		"ann a 95000",  // watermark 89999: [0,60000)'s lateness is over
		"ann a 1000",   // late beyond lateness: 89999 <= 89999
		"bob b 89000",  // on time within the bound (89000 >= 95000-5000-1)
		"ann a 125000", // watermark 119999: [60000,120000) fires with 2
		"bob b 20000",  // late beyond: a window bob never had
		"bob b 40000",  // the same again: written twice
		"bob b 40000",
	})
	x := expect(input, testRules)
	want := map[winKey][]int64{
		{"ann", 0}:      {1, 2},
		{"ann", 60000}:  {2},
		{"ann", 120000}: {1}, // at the end of input
		{"bob", 60000}:  {1},
	}
	if len(x.emissions) != len(want) {
		t.Errorf("emissions %v, want %v", x.emissions, want)
	}
	for k, w := range want {
		if !slices.Equal(x.emissions[k], w) {
			t.Errorf("%v: emissions %v, want %v", k, x.emissions[k], w)
		}
	}
	wantLate := map[string]int{lateID("ann", []byte("ann a 1000")): 1, lateID("bob", []byte("bob b 20000")): 1, lateID("bob", []byte("bob b 40000")): 2}
	if len(x.late) != len(wantLate) {
		t.Errorf("late %v, want %v", x.late, wantLate)
	}
	for id, n := range wantLate {
		if x.late[id] != n {
			t.Errorf("late %q: %d, want %d", id, x.late[id], n)
		}
	}
}

// The generated input holds every case the rules distinguish, so that a
// run that passes has met each: on time out of order within the bound,
// late within the lateness, late beyond it, and the edges, late by one
// millisecond and on time by one.
func TestGeneratedInputCoversTheRules(t *testing.T) {
	for _, ru := range []rules{testRules, {size: 60000, outOfOrderness: 5000}} {
		lines := generate(20000, 1, ru)
		cases := map[string]int{}
		wm, maxTs := int64(math.MinInt64), int64(math.MinInt64)
		for _, l := range lines {
			e, err := parseEvent([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			end := windowStart(e.At, ru.size) + ru.size
			switch cleanup := end - 1 + ru.lateness; {
			case cleanup == wm:
				cases["late by 1ms"]++
			case cleanup <= wm:
				cases["late beyond lateness"]++
			case cleanup == wm+1:
				cases["on time by 1ms"]++
			case end-1 <= wm:
				cases["late within lateness"]++
			case e.At < maxTs:
				cases["out of order within the bound"]++
			}
			maxTs = max(maxTs, e.At)
			wm = max(wm, e.At-ru.outOfOrderness-1)
		}
		t.Logf("lateness %dms: %v", ru.lateness, cases)
		for _, c := range []string{"late by 1ms", "late beyond lateness", "on time by 1ms", "out of order within the bound"} {
			if cases[c] < 5 {
				t.Errorf("lateness %dms: %d events %s, want at least 5", ru.lateness, cases[c], c)
			}
		}
		if ru.lateness > 0 && cases["late within lateness"] < 100 {
			t.Errorf("lateness %dms: %d events late within it, want at least 100", ru.lateness, cases["late within lateness"])
		}
	}
}
