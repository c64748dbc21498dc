// Package keyed is the keyed state of an operator subtask, on both state
// backends: its value, map and list states (with their TTL), the views
// descriptors declare their states through, the snapshots of the heap
// backend (key-group entries, copy-on-write) and the pebble backend's
// states, DB opening, restore and incremental snapshots. The operator
// asks it for a state; which backend serves it is this package's
// business. runtime/state keeps the names a job uses (the descriptors, the
// ValueState, MapState and ListState interfaces, the state errors),
// runtime the operators, timers (runtime/internal/timers) and engine;
// keyed imports nothing of either.
package keyed

import (
	"reflect"
	"time"
)

// PublicError turns the errors of runtime/internal/statecodec that a job
// matches with errors.As (*statecodec.StateTypeError, StateSchemaError,
// IncompatibleSchemaError) into runtime/state's types of the same
// fields. runtime/state sets it when it loads: keyed cannot import it.
var PublicError = func(err error) error { return err }

// wallClock is the processing time of an operator without a clock of its
// own: the wall clock in milliseconds since the Unix epoch.
func wallClock() int64 { return time.Now().UnixMilli() }

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }
