package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// The capabilities runtime's operators have, checked at compile time: the
// task finds each by type assertion, so a method that stopped matching
// would otherwise just stop being called.
var (
	_ engine.Preparer         = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.Snapshotter      = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.AsyncSnapshotter = (*keyedProcessOperator[int, int, int])(nil)
	_ engine.NewFileBytes     = (*keyedProcessOperator[int, int, int])(nil)
	_ resumable               = (*keyedProcessOperator[int, int, int])(nil)
	_ taskBound               = (*keyedProcessOperator[int, int, int])(nil)

	_ taskBound = (*processOperator[int, int])(nil)
)

// Collector receives the records a function emits. It is valid only during
// the call it was passed to.
type Collector[T any] interface {
	Collect(v T)
}
