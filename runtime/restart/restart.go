// Package restart holds the strategies that decide, after a failure,
// whether a job restarts from its last completed checkpoint and after
// what delay (Flink's restart strategies), given to the job with
// runtime.WithRestartStrategy:
//
//	env := runtime.NewEnvironment(runtime.WithRestartStrategy(
//		restart.ExponentialDelay(restart.Unlimited, 100*time.Millisecond, time.Minute, 2)))
package restart

import (
	"fmt"
	"time"
)

// Strategy decides, after a failure, whether the job restarts and after
// what delay. None, FixedDelay and ExponentialDelay are the strategies
// Flink has; a Strategy of your own implements the interface.
type Strategy interface {
	// Backoff is asked after the restarts-th failure that could be
	// restarted (1 for the first): the delay before the restart, or false
	// to fail the job instead.
	Backoff(restarts int) (delay time.Duration, restart bool)
	// MaxDelay is the longest delay Backoff returns, which the job's
	// status reports so that a watcher knows how long a restart may take.
	MaxDelay() time.Duration
	// Validate says what is wrong with the strategy's arguments; the job
	// refuses to start with it.
	Validate() error
	// String names the strategy in logs and errors.
	String() string
}

// Unlimited, given as a number of attempts, sets no limit. It is the one
// spelling of "no limit" among the options of splitflow's packages;
// other negative numbers are refused.
const Unlimited = -1

func validateAttempts(attempts int) error {
	if attempts < Unlimited {
		return fmt.Errorf("restart attempts must be >= 0, or Unlimited (-1) for no limit, got %d", attempts)
	}
	return nil
}

type none struct{}

func (none) Backoff(int) (time.Duration, bool) { return 0, false }
func (none) MaxDelay() time.Duration           { return 0 }
func (none) Validate() error                   { return nil }
func (none) String() string                    { return "no restart" }

// None fails the job on its first failure (Flink's none).
func None() Strategy { return none{} }

type fixedDelay struct {
	attempts int
	delay    time.Duration
}

func (f fixedDelay) Backoff(n int) (time.Duration, bool) {
	if f.attempts >= 0 && n > f.attempts {
		return 0, false
	}
	return f.delay, true
}

func (f fixedDelay) MaxDelay() time.Duration { return f.delay }
func (f fixedDelay) Validate() error         { return validateAttempts(f.attempts) }
func (f fixedDelay) String() string          { return "fixed delay" }

// FixedDelay restarts at most attempts times (Unlimited: without limit),
// delay after each failure (Flink's fixed-delay).
func FixedDelay(attempts int, delay time.Duration) Strategy {
	return fixedDelay{attempts: attempts, delay: max(delay, 0)}
}

type exponentialDelay struct {
	initial, maxDelay time.Duration
	multiplier        float64
	attempts          int
}

func (e exponentialDelay) Backoff(n int) (time.Duration, bool) {
	if e.attempts >= 0 && n > e.attempts {
		return 0, false
	}
	d := float64(e.initial)
	for i := 1; i < n && d < float64(e.maxDelay); i++ {
		d *= e.multiplier
	}
	return min(time.Duration(d), e.maxDelay), true
}

func (e exponentialDelay) MaxDelay() time.Duration { return e.maxDelay }
func (e exponentialDelay) Validate() error         { return validateAttempts(e.attempts) }
func (e exponentialDelay) String() string          { return "exponential delay" }

// ExponentialDelay restarts at most attempts times (Unlimited: without
// limit), waiting initial after the first failure and multiplier times
// longer after each next one, up to maxDelay (Flink's exponential-delay).
// The attempts come first, as in FixedDelay.
func ExponentialDelay(attempts int, initial, maxDelay time.Duration, multiplier float64) Strategy {
	return exponentialDelay{initial: max(initial, 0), maxDelay: max(maxDelay, initial), multiplier: max(multiplier, 1), attempts: attempts}
}
