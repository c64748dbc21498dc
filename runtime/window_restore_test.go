package runtime

import (
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/window"
)

// Rule (window.OnTime: a window fires on time once): a window that fired
// before a checkpoint does not fire on time again after a restore, when
// a record of it arrives before the first watermark.
func TestRestoredWindowFiresOnTimeOnce(t *testing.T) {
	for _, b := range stateBackends {
		for _, lateness := range []time.Duration{0, 5 * time.Millisecond} {
			t.Run(string(b)+"/"+lateness.String(), func(t *testing.T) {
				mem, err := checkpoint.NewMemoryStorage()
				if err != nil {
					t.Fatal(err)
				}
				ds := func() DataStream[window.Result[string, int64]] {
					return countStream(window.Tumbling(10*time.Millisecond), WithAllowedLateness(lateness))
				}
				w := openWin[string, string](t, ds(), unitStateConfig(t, b), nil, 1, 0)
				w.add(t, "a", 3)
				w.watermark(t, 10)
				expectWin(t, "on time", w, window.Result[string, int64]{Key: "a", Window: window.TimeWindow{Start: 0, End: 10}, Value: 1, Firing: window.OnTime})
				blob, files := w.snapshot(t, mem, 1)
				chk := commitBlobs(t, mem, 1, [][]byte{blob}, [][]checkpoint.FileHandle{files})
				w.stop()

				r := openWin[string, string](t, ds(), unitStateConfig(t, b), chk, 1, 0)
				defer r.stop()
				r.add(t, "a", 4) // before the upstream's first watermark after the restore
				r.watermark(t, 20)
				for _, res := range r.out.take() {
					if res.Firing == window.OnTime {
						t.Fatalf("after the restore: %v fired on time again", res)
					}
				}
			})
		}
	}
}
