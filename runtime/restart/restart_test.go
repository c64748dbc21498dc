package restart

import (
	"testing"
	"time"
)

// Rule (Flink's fixed-delay): a fixed-delay strategy restarts attempts
// times, each after its delay, and Unlimited never gives up.
func TestFixedDelayRestartsItsAttemptsThenGivesUp(t *testing.T) {
	s := FixedDelay(2, time.Second)
	for n := 1; n <= 2; n++ {
		if d, ok := s.Backoff(n); !ok || d != time.Second {
			t.Fatalf("restart %d: %v %v, want 1s true", n, d, ok)
		}
	}
	if _, ok := s.Backoff(3); ok {
		t.Fatal("a third restart of FixedDelay(2, ...)")
	}
	if _, ok := FixedDelay(Unlimited, 0).Backoff(1 << 20); !ok {
		t.Fatal("Unlimited gave up")
	}
	if s.MaxDelay() != time.Second {
		t.Fatalf("MaxDelay %v, want 1s", s.MaxDelay())
	}
}

// Rule (Flink's exponential-delay): the delay starts at initial, grows by
// the multiplier per restart and stops at maxDelay.
func TestExponentialDelayGrowsToItsMaximum(t *testing.T) {
	s := ExponentialDelay(Unlimited, 100*time.Millisecond, time.Second, 2)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if d, ok := s.Backoff(i + 1); !ok || d != w*time.Millisecond {
			t.Fatalf("restart %d: %v %v, want %v", i+1, d, ok, w*time.Millisecond)
		}
	}
	if s.MaxDelay() != time.Second {
		t.Fatalf("MaxDelay %v, want 1s", s.MaxDelay())
	}
}

// Rule: None never restarts, and attempts below Unlimited are refused.
func TestNoneNeverRestartsAndNegativeAttemptsAreRefused(t *testing.T) {
	if _, ok := None().Backoff(1); ok {
		t.Fatal("None restarted")
	}
	if FixedDelay(-2, 0).Validate() == nil || ExponentialDelay(-5, 0, 0, 1).Validate() == nil {
		t.Fatal("attempts below Unlimited accepted")
	}
	if FixedDelay(Unlimited, 0).Validate() != nil || FixedDelay(0, 0).Validate() != nil {
		t.Fatal("Unlimited or 0 attempts refused")
	}
}
