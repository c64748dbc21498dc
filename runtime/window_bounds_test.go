package runtime

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/window"
)

// Rule: window bounds are int64 milliseconds computed without overflow. A
// record whose tumbling or sliding window would start before math.MinInt64
// or end after math.MaxInt64 fails the job, naming its timestamp (as an
// event-time window refuses a record without a timestamp); a record near
// the limits whose windows fit is counted in them, and they fire. Before,
// ts - offset and the window's start wrapped around: a record at
// math.MinInt64+1 landed in a window at the top of time, one near the top
// went to a window that never fired, and a sliding window's records near
// the bottom were dropped without a word.
func TestWindowBoundsNearInt64LimitsDoNotOverflow(t *testing.T) {
	const lo, hi = math.MinInt64, math.MaxInt64
	sec, half := time.Second, 500*time.Millisecond
	for _, c := range []struct {
		name string
		a    window.Assigner
		ts   int64
		want []window.TimeWindow // nil: refused
	}{
		{"tumbling, lowest whole window", window.Tumbling(sec), lo + 808, []window.TimeWindow{{Start: lo + 808, End: lo + 1808}}},
		{"tumbling, below it", window.Tumbling(sec), lo + 1, nil},
		{"tumbling, highest whole window", window.Tumbling(sec), hi - 808, []window.TimeWindow{{Start: hi - 1807, End: hi - 807}}},
		{"tumbling, above it", window.Tumbling(sec), hi - 1, nil},
		{"offset -500ms, ts - offset past the top", window.Tumbling(sec).WithOffset(-half), hi - 407, []window.TimeWindow{{Start: hi - 1307, End: hi - 307}}},
		{"offset 500ms, ts - offset below the bottom", window.Tumbling(sec).WithOffset(half), lo + 400, []window.TimeWindow{{Start: lo + 308, End: lo + 1308}}},
		{"sliding, one window below the bottom", window.Sliding(sec, half), lo + 600, nil},
		{"sliding, both windows fit", window.Sliding(sec, half), lo + 1400, []window.TimeWindow{{Start: lo + 808, End: lo + 1808}, {Start: lo + 1308, End: lo + 2308}}},
		{"sliding, one window above the top", window.Sliding(sec, half), hi - 500, nil},
		{"session at the top ends at math.MaxInt64", window.Session(sec), hi - 10, []window.TimeWindow{{Start: hi - 10, End: hi}}},
		{"session at the bottom", window.Session(sec), lo + 1, []window.TimeWindow{{Start: lo + 1, End: lo + 1001}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := openWin[string, string](t, countStream(c.a), unitStateConfig(t, kindHeap), nil, 1, 0)
			defer w.stop()
			err := w.p.Collect("k", c.ts)
			if c.want == nil {
				var ue *unrecoverableError
				if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), strconv.FormatInt(c.ts, 10)) {
					t.Fatalf("record at %d: error %v, want the job failed naming the timestamp", c.ts, err)
				}
				if err := w.p.EmitWatermark(engine.MaxWatermark); err != nil {
					t.Fatal(err)
				}
				if got := w.out.take(); len(got) != 0 {
					t.Fatalf("a refused record was counted: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("record at %d: %v", c.ts, err)
			}
			if err := w.p.EmitWatermark(engine.MaxWatermark); err != nil {
				t.Fatal(err)
			}
			var got []window.TimeWindow
			for _, r := range w.out.take() {
				if r.Value != 1 {
					t.Errorf("window %v counted %d, want 1", r.Window, r.Value)
				}
				got = append(got, r.Window)
			}
			slices.SortFunc(got, func(a, b window.TimeWindow) int { return cmpInt64(a.Start, b.Start) })
			if !slices.Equal(got, c.want) {
				t.Fatalf("record at %d fired windows %v, want %v", c.ts, got, c.want)
			}
		})
	}
}
