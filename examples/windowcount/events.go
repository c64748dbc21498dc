package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// event is one input record: "user page event_time_ms".
type event struct {
	User, Page string
	At         int64  // event time, milliseconds since the epoch
	Raw        string // the record's value as it came, for the late-events topic
}

func parseEvent(value []byte) (event, error) {
	f := strings.Fields(string(value))
	if len(f) != 3 {
		return event{}, fmt.Errorf("not an event (user page event_time_ms): %q", value)
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return event{}, fmt.Errorf("not an event time: %q", value)
	}
	return event{User: f[0], Page: f[1], At: at, Raw: string(value)}, nil
}

// windowStart is the start of the tumbling window of size that holds ts
// (windows aligned to the epoch, as window.Tumbling's).
func windowStart(ts, size int64) int64 {
	r := ts % size
	if r < 0 {
		r += size
	}
	return ts - r
}

// genStart is the event time the generated input starts at:
// 2026-01-01T00:00:00Z.
const genStart = 1767225600000

var (
	genUsers = []string{"ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ivy", "jon",
		"kim", "lou", "max", "ned", "oli", "pam", "quin", "rex", "sue", "tom"}
	genPages = []string{"home", "search", "product", "cart", "checkout", "help"}
)

// generate returns n events, deterministic by seed, in the order they are
// written to the input topic, with about 60 ms of event time between two.
// It keeps the watermark the job will have (the largest event time so far
// minus the out-of-orderness minus 1 ms) to place its events:
//   - most are out of order within the bound (up to the out-of-orderness
//     behind the latest), and so on time;
//   - up to 3% are late within the allowed lateness, when it is > 0: in a
//     window whose end the watermark passed less than the lateness ago;
//   - 2% are late beyond it, a window or more behind the watermark;
//   - a few are pairs at the exact edge, where the latest event time is
//     near the edge of a window's lateness: an event that moves the
//     watermark to the window's last moment of lateness (or one
//     millisecond short of it), then an event of that window, late by a
//     millisecond (or on time by one).
//
// The verifier does not trust these intentions: it classifies every event
// from the input topic by the rules alone.
func generate(n int, seed uint64, ru rules) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	out := make([]string, 0, n)
	clock := int64(genStart)
	maxTs, seen := int64(math.MinInt64), false
	add := func(ts int64) {
		out = append(out, fmt.Sprintf("%s %s %d", genUsers[r.IntN(len(genUsers))], genPages[r.IntN(len(genPages))], ts))
		if !seen || ts > maxTs {
			maxTs, seen = ts, true
		}
		clock = max(clock, ts)
	}
	for len(out) < n {
		clock += r.Int64N(121)
		wm := maxTs - ru.outOfOrderness - 1
		onTime := func() { add(clock - r.Int64N(ru.outOfOrderness+1)) }
		switch p := r.IntN(1000); {
		case p < 20 && seen: // late beyond the allowed lateness
			add(wm - ru.lateness - ru.size - r.Int64N(ru.size))
		case p < 50 && seen: // late within it, if a window is in its lateness
			end := windowStart(wm+1, ru.size) // the last window end at or before wm+1
			var ends []int64
			for e := end; e-1 > wm-ru.lateness && len(ends) < 8; e -= ru.size {
				ends = append(ends, e)
			}
			if len(ends) == 0 {
				onTime()
				continue
			}
			e := ends[r.IntN(len(ends))]
			add(e - 1 - r.Int64N(ru.size))
		case p < 150 && len(out)+2 <= n: // a pair at the edge of lateness
			// The first window whose cleanup time (end-1+lateness) the
			// pusher can make the watermark reach without going back;
			// only when that is near, so as not to leap ahead in time.
			e := windowStart(clock-ru.outOfOrderness-ru.lateness, ru.size) + ru.size
			short := r.IntN(2) // 1: the watermark stops one millisecond short
			pusher := e - 1 + ru.lateness + ru.outOfOrderness + 1 - int64(short)
			if pusher < clock || pusher-clock > max(ru.size/60, 1) {
				onTime()
				continue
			}
			add(pusher)
			add(e - 1 - r.Int64N(ru.size))
		default: // on time, out of order within the bound
			onTime()
		}
	}
	return out
}
