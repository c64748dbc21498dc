// Package pebblestate is the pebble state backend's storage: one Pebble DB per
// keyed operator subtask, in a local working directory, with a write
// buffer in front of it (Store), and its checkpoints as files; the job's
// working directory and the block cache its DBs share (Backend); the blob
// that describes one subtask's checkpoint (Blob) and the laying out of a
// DB from it. The engine (package runtime) encodes keys and values and
// decides when to snapshot; this package holds bytes.
//
// # Key layout
//
//	keyGroup (2 bytes, big-endian) | state id (2 bytes, big-endian) | key | [user key]
//
// Every state of a key group is contiguous, and so is every key group
// range, so that a rescaled subtask takes the ranges it now owns from the
// old subtasks' DBs and deletes the rest by range. A map state's key is
// length-prefixed (the engine's job), so that a key's entries share one
// prefix. Timers take state id 0 and order their user keys by time
// (keyGroup | 0 | domain | timestamp | key); they are written as ordered
// map entries (OrderedPut) and read in order (MapScanAfter).
//
// # Invariants kept here
//
//   - The synchronous part of a snapshot does not grow with the state
//     (invariant 11 of the shared design): writes go to a write buffer
//     (Store.Put and friends), which reaches the DB in batches; Freeze, at
//     the barrier, only sets the buffer aside and starts a new one. The
//     frozen buffer is applied to the DB, the DB flushed and checkpointed
//     (hard links) by Snapshot.Materialize, on another goroutine, while
//     the task reads through the new buffer, the frozen one and the DB, in
//     that order, and writes only to the new buffer: the DB changes then
//     only by keys the frozen buffer shadows, so every read sees the state
//     as of its latest write.
//   - A checkpoint's files are immutable: SST files are shared between
//     checkpoints (uploaded once, by the engine), the other files of a
//     Pebble checkpoint (MANIFEST, OPTIONS, markers) are small and travel
//     in the checkpoint's blob.
//   - A snapshot whose DB held exactly an earlier snapshot's checkpoint
//     at its freeze (Snapshot.Base: that checkpoint was made and nothing
//     else reached the DB since) is that checkpoint's files plus its frozen
//     buffer, which a delta checkpoint stores (AppendDelta) and a restore
//     applies over the files with the buffer's own semantics, filtered to
//     the owned key groups (ApplyDelta, CopyFrom).
//   - The local directory is scratch: a DB is never reopened from it after
//     a failure; it is made anew from a checkpoint.
package pebblestate
