package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/shuffleop"
)

// A savepoint of a distributed job is one consistent state of every
// slot, and the slots exchange records through Kafka: a slot's final
// checkpoint alone leaves out what other slots wrote to it and it has not
// read yet. So each slot stops for it in a drain (scale-out.md, "Savepoints
// of a distributed job"):
//
//  1. its sources stop, except those reading a shuffle, without the end
//     of event time (as a stop with a savepoint in one process);
//  2. the ended input of a shuffle's encoding writes, after its last
//     batch, a stop marker to every partition of its channel
//     (shuffleop.BatchOperator.EndInput); the slot's next checkpoint commits
//     both;
//  3. a shuffle's decoding stops its source once it has read the stop
//     marker (or the end) of every upstream slot in every partition it
//     owns (slots.Merge.Drained): everything written to it is read, and
//     the end of that input drains the next stage the same way;
//  4. once every task of the slot ended, its final checkpoint holds the
//     slot's whole share, and nothing is in flight to or from it.
//
// Each slot drains on its own; what they need of each other is the
// markers, which the other slots' checkpoints commit as the drain goes.

// beginSavepointDrain starts the drain of this slot's execution, on the
// master goroutine.
func (ex *execution) beginSavepointDrain() {
	if ex.savepointDrain || ex.stopped || ex.draining {
		return
	}
	ex.savepointDrain = true
	ex.drainingForSavepoint.Store(true)
	ex.log.Info("splitflow: slot draining for a savepoint of the job", "slot", ex.slotIndex())
	if !ex.restarting {
		ex.drainTasksForSavepoint(ex.tasks)
	}
}

// drainTasksForSavepoint stops the sources of tasks that read no shuffle,
// and has every shuffle decoding look whether it is drained already (a
// restored one may be, and a decoding that owns no partition always is).
func (ex *execution) drainTasksForSavepoint(tasks []*task) {
	for _, t := range tasks {
		if t.isSource && t.shuffleChannel == "" {
			t.requestStop()
		}
		for _, op := range t.ops {
			if d, ok := op.(shuffleDrainer); ok {
				t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "shuffle drained?", Run: func() error {
					d.CheckDrained()
					return nil
				}})
			}
		}
	}
}

// shuffleDrainer is a shuffle's decoding, which tells when it has read
// every upstream slot's stop marker.
type shuffleDrainer interface {
	CheckDrained()
}

var _ shuffleDrainer = (*shuffleop.UnbatchOperator[int])(nil)

// shuffleDrained stops the sources of the current tasks that read
// channel: called from a task goroutine once the channel's decoding read
// every stop marker.
func (ex *execution) shuffleDrained(channel string) {
	if ex == nil {
		return // a task driven by hand in a test
	}
	ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "shuffle drained", Run: func() error {
		if !ex.savepointDrain {
			return nil
		}
		ex.log.Info("splitflow: shuffle drained for the savepoint", "slot", ex.slotIndex(), "channel", channel)
		for _, t := range ex.tasks {
			if t.isSource && t.shuffleChannel == channel {
				t.requestStop()
			}
		}
		return nil
	}})
}
