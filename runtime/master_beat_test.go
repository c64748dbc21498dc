package runtime

import (
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/coordinator"
)

// The master beats at a periodic checkpoint's due time when it is
// sooner than its regular beat, so the checkpoint is triggered then and
// not up to a beat later; a due time already past (a trigger held back)
// waits a regular beat, not zero, which would spin.
func TestMasterBeatsAtTheDueTimeOfTheNextCheckpoint(t *testing.T) {
	cc, err := coordinator.NewCoordinator([]checkpoint.TaskID{{UID: "source", Subtask: 0}}, coordinator.WithInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	every := 50 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	if got := nextBeat(cc, every, t0); got != every {
		t.Fatalf("before the first Tick: %v, want %v", got, every)
	}
	cc.Tick(t0)
	for _, c := range []struct {
		now  time.Duration
		want time.Duration
	}{
		{0, every},
		{980 * time.Millisecond, 20 * time.Millisecond},
		{time.Second - time.Microsecond, time.Microsecond},
		{time.Second, every},
		{time.Second + 10*time.Millisecond, every},
	} {
		if got := nextBeat(cc, every, t0.Add(c.now)); got != c.want {
			t.Errorf("at t0+%v: %v, want %v", c.now, got, c.want)
		}
	}
}
