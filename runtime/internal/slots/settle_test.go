package slots

import (
	"errors"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// A slot's checkpoint holds that slot's subtask alone: given as the
// savepoint a distributed job starts from, every other slot would start
// without its state, so it is refused, naming what it is. A savepoint of
// a job in one process holds no shuffle's state and passes.
func TestSlotCheckpointGivenAsTheSavepointToStartFromIsRefused(t *testing.T) {
	chk := func(uids ...string) *checkpoint.Checkpoint {
		var states []checkpoint.StateHandle
		for _, uid := range uids {
			states = append(states, checkpoint.StateHandle{Owner: checkpoint.OperatorOwner(uid, 1)})
		}
		return &checkpoint.Checkpoint{Metadata: checkpoint.Metadata{ID: 7, States: states}}
	}
	err := NotASlotCheckpoint(chk("numbers", ShuffleDecodeUIDPrefix+"logs.count", "count"), "/ckpt/logs/slots/1/epoch-3/chk-7")
	if !errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), "one slot") || !strings.Contains(err.Error(), "logs.count") {
		t.Fatalf("a slot's checkpoint as the savepoint: %v; want ErrIncompatibleCheckpoint naming the slot and its shuffle", err)
	}
	var unrecoverable *engine.UnrecoverableError
	if !errors.As(err, &unrecoverable) {
		t.Fatalf("%v: want it unrecoverable, since every restart finds the same checkpoint", err)
	}
	if err := NotASlotCheckpoint(chk("numbers", "count", "out"), "/savepoints/savepoint-7"); err != nil {
		t.Fatalf("a single-process savepoint: %v", err)
	}
}
