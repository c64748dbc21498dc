package connectortest

import (
	"testing"
	"time"
)

// Rule: while a check waits for checkpoints (before a stop or a planned
// failure), the records it holds back leave the job seconds to complete
// them, not milliseconds: on a loaded machine a checkpoint takes longer
// than the 2 ms per record a fixed hold gave the last 400 records of 600,
// and the input ended first, so the check failed without having tested
// anything.
func TestHoldingBackLeavesCheckpointsSecondsToComplete(t *testing.T) {
	var total time.Duration
	for unread := int64(400); unread > 0; unread-- {
		total += holdFor(unread)
	}
	if total < 5*time.Second {
		t.Fatalf("the last 400 records are held %v in all, want at least 5s", total)
	}
	if d := holdFor(100_000); d > 2*time.Millisecond {
		t.Fatalf("a record with 100000 still to come is held %v, want at most 2ms: a long input is not slowed more than before", d)
	}
}
