package runtime

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// Rule: at the end of event time (the final watermark, maxWatermark, which
// a bounded input sends when it ends) every pending event-time timer
// fires, and so does every timer registered while they fire; a timer
// registered by one of those is dropped. A periodic timer, one whose
// OnTimer registers the next period, thus fires once more after the ones
// pending and the input ends: every time is due at the final watermark,
// and the firing used to follow such a timer for ever.
func TestSelfRegisteringTimerLetsTheInputEnd(t *testing.T) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			var fired []string
			fn := KeyedProcessFuncs[string, string, string]{
				Element: func(ctx *KeyedContext[string, string], _ string) error {
					ctx.RegisterEventTimeTimer(ctx.Timestamp() + 10)
					return nil
				},
				Timer: func(ctx *KeyedContext[string, string], tm Timer) error {
					fired = append(fired, fmt.Sprintf("%s@%d", ctx.Key(), tm.Timestamp))
					if len(fired) > 100 {
						return errors.New("more than 100 timers fired: the periodic timer keeps the final watermark firing")
					}
					ctx.RegisterEventTimeTimer(tm.Timestamp + 10)
					return nil
				},
			}
			p, stop, err := openKeyedOn(t, unitStateConfig(t, b), nil, 1, 0, fn)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			for _, r := range []struct {
				key string
				ts  int64
			}{{"a", 5}, {"b", 7}} {
				if err := p.Collect(r.key, r.ts); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.EmitWatermark(20); err != nil {
				t.Fatal(err)
			}
			if want := []string{"a@15", "b@17"}; !slices.Equal(fired, want) {
				t.Fatalf("at watermark 20 fired %v, want %v", fired, want)
			}
			if err := p.EmitWatermark(engine.MaxWatermark); err != nil {
				t.Fatalf("final watermark: %v (fired %d timers)", err, len(fired))
			}
			// The pending a@25 and b@27, then the a@35 and b@37 they
			// registered; a@45 and b@47 are dropped.
			if want := []string{"a@15", "b@17", "a@25", "b@27", "a@35", "b@37"}; !slices.Equal(fired, want) {
				t.Fatalf("fired %v, want %v", fired, want)
			}
			if left := allTimers(&p.timers.event); len(left) != 0 {
				t.Fatalf("timers left after the final watermark: %v", left)
			}
		})
	}
}
