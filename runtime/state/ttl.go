package state

import (
	"time"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
)

// State time-to-live (Flink's StateTtlConfig): a ValueState or MapState
// (a ListState: ttllist.go) declared WithTTL keeps each value (each map
// entry) with the processing
// time of its last write, and a value older than the TTL reads as absent
// and is removed. The value is stored as a ttlValue, the timestamp
// followed by the value, in the serde ttlSerde names after the value's
// own (so a checkpoint of the state with TTL differs from one without,
// and a restore that turns TTL on or off for a state is refused, naming
// it). Expired values are removed:
//
//   - on access: a read of an expired value removes it;
//   - at checkpoints, heap backend: the snapshot leaves expired values out
//     (the encoder filters them with the time of the barrier);
//   - incrementally: every access to the state checks a few more of its
//     values, the current key's or not, in turn (heap: key after key of
//     each slot, a slot's keys listed when the cleanup reaches it; pebble: a cursor
//     over the state's entries in the DB, one scan every
//     pebbleSweepEvery accesses), so the values of keys never seen again
//     go away while the state is in use.

// TTLUpdateType says which accesses renew a value's time to live.
type TTLUpdateType int

const (
	// TTLOnCreateAndWrite renews a value when it is written (the default).
	TTLOnCreateAndWrite TTLUpdateType = iota
	// TTLOnReadAndWrite renews a value when it is read too.
	TTLOnReadAndWrite
)

func (u TTLUpdateType) applyTTL(c *keyed.TTLConfig) { c.Update = keyed.TTLUpdate(u) }

// TTLOption configures a state's time to live (WithTTL).
type TTLOption interface{ applyTTL(*keyed.TTLConfig) }

type ttlOptionFunc func(*keyed.TTLConfig)

func (f ttlOptionFunc) applyTTL(c *keyed.TTLConfig) { f(c) }

// TTLCleanupPerAccess sets how many of the state's values an access to it
// checks for expiry besides the one it reads (default 5, as Flink's
// incremental cleanup); 0 turns the incremental cleanup off, leaving the
// cleanup on read and (heap backend) at checkpoints.
func TTLCleanupPerAccess(n int) TTLOption {
	return ttlOptionFunc(func(c *keyed.TTLConfig) { c.PerAccess = n })
}

// defaultTTLCleanupPerAccess is Flink's default cleanup size.
const defaultTTLCleanupPerAccess = 5

// WithTTL gives a ValueState, MapState or ListState (and a
// ReducingState or AggregatingState, a ValueState underneath) a time to
// live: a value (a map entry, a list element) not written for ttl of
// processing time, or with
// TTLOnReadAndWrite neither read nor written, expires; it is then never
// returned (Flink's NeverReturnExpired) and is removed on access, from
// checkpoints of the heap backend, and incrementally as the state is
// used (see TTLCleanupPerAccess). Timestamps are milliseconds, so ttl is
// at least one millisecond; a shorter ttl makes the descriptor's
// constructor panic, naming the state.
//
// Turning TTL on or off changes how the state's values are stored: a
// checkpoint of the state with TTL does not restore into it without TTL,
// nor the reverse (the restore is refused, naming the state). Changing
// ttl itself is allowed: a restored value expires ttl after its last
// write under the new setting.
//
// A state has one TTL: declaring its name again in the operator with
// another TTL (another duration, update type or cleanup size), or without
// one, fails the call with an error naming the state, which no restart
// mends.
func WithTTL(ttl time.Duration, opts ...TTLOption) Option {
	return stateOptionFunc(func(o *stateOptions) {
		c := &keyed.TTLConfig{TTL: ttl, PerAccess: defaultTTLCleanupPerAccess}
		for _, opt := range opts {
			if opt != nil {
				opt.applyTTL(c)
			}
		}
		o.ttl = c
	})
}
