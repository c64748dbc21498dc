// Package slotrun is the driver of a distributed job's process: it
// joins the job's group (runtime/internal/slots.Join), and runs each slot
// the group assigns this process until the slot is revoked, lost or
// fails. A slot's runner claims the slot in its ownership log
// (slots.Ownership), has the engine make an execution of it from the
// log's restore point (Config.NewExecution: the slot's subtask of every
// chain, on the claim's own storage), and records each of its
// checkpoints in the log before the checkpoint is notified (Slot.Record),
// so that a process that lost the slot never commits. A revoked slot
// drains with a final checkpoint; a lost one stops at once.
//
// It also takes part in the job's savepoints (savepoint.go): every
// process reads the requests in the job's checkpoint root, drains its
// slots for an open one, records their final checkpoints, and one of
// them merges those into a savepoint of a job in one process.
//
// The rules (who owns a slot, which checkpoint restores it) are
// runtime/internal/slots'; this package performs them. See
// docs/design/scale-out.md, "The driver".
package slotrun
