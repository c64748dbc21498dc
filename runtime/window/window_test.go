package window

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Rule: Assign gives exactly the windows [offset + k*slide, ... + size)
// that hold a timestamp, and EndingAt finds each of them by its
// MaxTimestamp, for tumbling and sliding assigners with offsets.
func TestAssignAndEndingAtAgreeWithTheDefinition(t *testing.T) {
	for _, c := range []struct {
		a                   Assigner
		size, slide, offset int64
	}{
		{Tumbling(10 * time.Millisecond), 10, 10, 0},
		{Tumbling(10 * time.Millisecond).WithOffset(3 * time.Millisecond), 10, 10, 3},
		{Sliding(12*time.Millisecond, 4*time.Millisecond), 12, 4, 0},
		{Sliding(10*time.Millisecond, 3*time.Millisecond).WithOffset(-2 * time.Millisecond), 10, 3, -2},
		{Sliding(4*time.Millisecond, 6*time.Millisecond), 4, 6, 0},
	} {
		if err := c.a.Err(); err != nil {
			t.Fatalf("%s: %v", c.a, err)
		}
		for ts := int64(-40); ts <= 40; ts++ {
			var want []TimeWindow
			for k := int64(-20); k <= 20; k++ {
				s := c.offset + k*c.slide
				if s <= ts && ts < s+c.size {
					want = append(want, TimeWindow{s, s + c.size})
				}
			}
			got, err := c.a.Assign(ts, nil)
			if err != nil {
				t.Fatalf("%s: Assign(%d): %v", c.a, ts, err)
			}
			slices.SortFunc(got, func(x, y TimeWindow) int { return int(x.Start - y.Start) })
			if !slices.Equal(got, want) {
				t.Fatalf("%s: Assign(%d) = %v, want %v", c.a, ts, got, want)
			}
			for _, w := range want {
				if e, ok := c.a.EndingAt(w.MaxTimestamp()); !ok || e != w {
					t.Fatalf("%s: EndingAt(%d) = %v %v, want %v", c.a, w.MaxTimestamp(), e, ok, w)
				}
				if got := c.a.WindowAt(w.Start); got != w {
					t.Fatalf("%s: WindowAt(%d) = %v, want %v", c.a, w.Start, got, w)
				}
			}
		}
	}
}

// Rule: a window that would start below math.MinInt64 or end above
// math.MaxInt64 is an error naming the record's timestamp, never a window
// cut short at the limit.
func TestAssignRefusesWindowsBeyondTheInt64Range(t *testing.T) {
	a := Tumbling(10 * time.Millisecond)
	for _, ts := range []int64{math.MaxInt64, math.MinInt64} {
		if _, err := a.Assign(ts, nil); err == nil || !strings.Contains(err.Error(), "the record at") {
			t.Errorf("Assign(%d): err = %v, want an error naming the record", ts, err)
		}
	}
}

// Rule: an assigner's parameters are checked when it is made, and the
// error says which parameter and why; the zero Assigner is IsZero.
func TestAssignerParametersAreChecked(t *testing.T) {
	for _, c := range []struct {
		a    Assigner
		want string
	}{
		{Tumbling(0), "window size 0s: must be a positive whole number of milliseconds"},
		{Tumbling(1500 * time.Microsecond), "window size 1.5ms"},
		{Sliding(time.Second, -time.Second), "window slide -1s"},
		{Session(0), "window gap 0s"},
		{Count(0), "window count 0: must be at least 1"},
		{Session(time.Second).WithOffset(time.Millisecond), "WithOffset applies to tumbling and sliding windows"},
		{Tumbling(10 * time.Millisecond).WithOffset(10 * time.Millisecond), "its magnitude must be below the window's slide (10ms)"},
		{Count(3).ProcessingTime(), "ProcessingTime applies to time windows, not to Count"},
	} {
		if err := c.a.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Err() = %v, want it to say %q", c.a, err, c.want)
		}
	}
	if !(Assigner{}).IsZero() || Tumbling(time.Second).IsZero() {
		t.Error("IsZero: want true for the zero Assigner only")
	}
}

// Rule: time windows follow event time unless ProcessingTime is asked
// for; a count window follows neither, and each says what it is.
func TestAssignerTimeDomainsAndShapes(t *testing.T) {
	for _, c := range []struct {
		a                            Assigner
		event, processing, sess, cnt bool
		str                          string
	}{
		{Tumbling(time.Minute), true, false, false, false, "tumbling 60000ms event-time"},
		{Sliding(time.Minute, time.Second).ProcessingTime(), false, true, false, false, "sliding 60000ms every 1000ms processing-time"},
		{Session(time.Second), true, false, true, false, "session gap 1000ms event-time"},
		{Count(5), false, false, false, true, "global count 5"},
	} {
		if c.a.IsEventTime() != c.event || c.a.IsProcessingTime() != c.processing || c.a.IsSession() != c.sess || c.a.IsCount() != c.cnt {
			t.Errorf("%s: event %v processing %v session %v count %v", c.a, c.a.IsEventTime(), c.a.IsProcessingTime(), c.a.IsSession(), c.a.IsCount())
		}
		if c.a.String() != c.str {
			t.Errorf("String() = %q, want %q", c.a.String(), c.str)
		}
	}
	if Session(1500*time.Millisecond).Gap() != 1500 || Count(7).CountOf() != 7 {
		t.Error("Gap or CountOf does not give the assigner's parameter")
	}
}
