package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// A window record's serde has its codec's shape (statecodec.WrappingSerde).
func (s windowRecordSerde[T]) WrappedShape() (string, *stateformat.Shape) {
	return statecodec.ShapeOf(s.c)
}
