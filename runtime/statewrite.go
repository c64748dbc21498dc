package runtime

import (
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// State files are written off the master goroutine: the master hands each
// acknowledgement's blobs (and the coordinators' snapshots) to a goroutine
// that writes and fsyncs them, and takes the acknowledgement to the
// checkpoint coordinator only once they are durable, so the metadata, which
// follows the last acknowledgement, is still written after every state
// file. Meanwhile the master keeps serving ticks, acknowledgements,
// declines and failures.

// stateWriteConcurrency bounds the acknowledgements whose state is being
// written at once, across the job: enough to keep a disk's queue busy,
// few enough that a job of many subtasks does not fsync hundreds of files
// at the same instant.
const stateWriteConcurrency = 4

// writeStates writes the blobs of owners through w on a goroutine of its
// own, waiting for one of stateWriteConcurrency slots first, and runs done
// on the master goroutine with their handles and total size, or the first
// error. Called on the master goroutine; the goroutine is waited for
// before Execute returns (snapWG).
func (ex *execution) writeStates(w checkpoint.Writer, blobs []ownedState, done func(hs []checkpoint.StateHandle, size int64, err error)) {
	if ex.stateIO == nil {
		ex.stateIO = make(chan struct{}, stateWriteConcurrency)
	}
	sem := ex.stateIO
	ex.snapWG.Go(func() {
		sem <- struct{}{}
		hs := make([]checkpoint.StateHandle, 0, len(blobs))
		var size int64
		var err error
		for _, b := range blobs {
			var h checkpoint.StateHandle
			if h, err = w.WriteState(b.owner, b.data, b.files...); err != nil {
				break
			}
			hs = append(hs, h)
			size += int64(len(b.data))
		}
		<-sem
		ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "state written", Run: func() error {
			done(hs, size, err)
			return nil
		}})
	})
}
