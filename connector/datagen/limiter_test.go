package datagen

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The limiter hands out between one and the wanted number of records at
// any rate a float holds: at rates whose saved tokens do not fit an int it
// handed out a negative number and the reader generated nothing, forever;
// at rates whose wait for a token does not fit a time.Duration it spun
// instead of waiting.
func TestRateLimiterHoldsAtExtremeRates(t *testing.T) {
	t.Run("huge", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(1e30)
			time.Sleep(time.Second)
			if n := l.take(context.Background(), nil, 256); n != 256 {
				t.Fatalf("take(256) at 1e30 records a second = %d, want 256", n)
			}
		})
	})
	t.Run("tiny", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(1e-12)
			if n := l.take(context.Background(), nil, 5); n != 1 {
				t.Fatalf("first take = %d, want the one token a limiter starts with", n)
			}
			// The next token is 1e12 seconds away: the wait lasts until
			// the context ends, in a bubble whose clock moves only while
			// every goroutine waits.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			start := time.Now()
			if n := l.take(ctx, nil, 5); n != 0 {
				t.Fatalf("take with no token due = %d, want 0 when the context ends", n)
			}
			if el := time.Since(start); el != time.Hour {
				t.Fatalf("the wait ended after %v of the bubble's clock, want the context's hour", el)
			}
		})
	})
}

// The limiter never hands out more than its rate allows plus one burst of
// a tenth of a second's worth, however long it was left unused; measured
// on the bubble's clock, which moves only while the taker waits, so the
// bound is exact.
func TestRateLimiterBurstIsATenthOfASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 1000.0 // burst 100
		l := newLimiter(rate)
		time.Sleep(time.Minute) // unused for a long time: the saving stops at the burst
		start := time.Now()
		taken := 0
		for taken < 5000 {
			n := l.take(context.Background(), nil, 64)
			if n < 1 || n > 64 {
				t.Fatalf("take(64) = %d", n)
			}
			taken += n
			if limit := 100 + rate*time.Since(start).Seconds(); float64(taken) > limit+1e-6 {
				t.Fatalf("%d records taken %v after a long pause, more than the burst of 100 plus %v a second allow (%.0f)",
					taken, time.Since(start), rate, limit)
			}
		}
		// Nor slower than the rate: 5000 records at 1000 a second, the
		// first 100 saved, take 4.9s.
		if el := time.Since(start); el > 4900*time.Millisecond+time.Millisecond {
			t.Fatalf("5000 records took %v, want 4.9s at 1000 a second with a burst of 100", el)
		}
	})
}
