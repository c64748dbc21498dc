// Package checkpoint decides when a checkpoint is taken, when it is
// complete, and keeps completed checkpoints so that a job can restart from
// the newest valid one. It has two independent parts, both driven by the
// engine: the Coordinator, a deterministic state machine, and Storage,
// where checkpoints are written and verified.
//
// # Invariants kept here
//
//   - Coordinators before barriers (an invariant of DESIGN.md): for
//     checkpoint N the Coordinator asks for SnapshotCoordinators first and
//     asks for InjectBarriers only after CoordinatorsSnapshotted(N)
//     succeeded.
//   - Persist before notify (atomic checkpoints, and through them the commit
//     rule): once every expected task acknowledged N the only action is
//     PersistMetadata; NotifyComplete(N), on which sinks commit their
//     transactions, is emitted only by Persisted(N, nil). This is
//     etcd-io/raft's Ready contract, "persist before send", applied to
//     checkpoints.
//   - Every triggered checkpoint ends exactly once, with NotifyComplete or
//     NotifyAborted (declined, timed out, coordinator or persist failure,
//     subsumed by a newer completion, aborted by Restore or a failing job).
//   - Checkpoint ids strictly increase for the life of the job, across
//     Restore too.
//   - A checkpoint exists in storage only after its metadata is durable:
//     state blobs first (each fsynced), then the metadata under a temp name,
//     fsync, rename, fsync of the directory. The metadata records a format
//     version, and every blob's owner, length and CRC-32C, and carries its
//     own CRC-32C; a torn or corrupt checkpoint is detected on load. On
//     S3 (S3Storage) each state object's PUT returns before the metadata
//     is PUT, last, with If-None-Match: * where the server honours it; a
//     failed metadata PUT is followed by its DELETE, so a failed Commit
//     leaves no checkpoint that looks complete, or, when that DELETE
//     fails too, a whole one beside its commit marker, never part of one.
//   - Shared files (Storage.PutFile) are durable before any metadata lists
//     them: copied to a temp name, fsynced, renamed, directory fsynced. A
//     name is stored once and never rewritten. The metadata records each
//     state's shared files with length and CRC-32C (format version 2;
//     version 1, without them, still loads, and is still written for
//     checkpoints that use none); Load and Latest check every listed file
//     is there with its length (no read: they may be large), CopyFile
//     checks the checksum as it copies, and a checkpoint missing one is
//     damaged under the same rules as one missing a blob.
//   - A shared file is deleted only by Commit(N), only after retention, and
//     only when no completed checkpoint still stored lists it and this
//     Storage did not put it after Begin(N) or the Begin of a checkpoint
//     still being written; a put under way is never disturbed. Safe under
//     the callers' contract (see Storage): a file put before Begin(N) is
//     used by a later checkpoint only if checkpoint N uses it too.
//   - Restoring from an older checkpoint never duplicates silently: Latest
//     falls back past a damaged checkpoint only when the storage can tell
//     it was never reported complete (DirStorage: a commit that never
//     returned, marked by chk-<id>/_committing), since otherwise its sinks
//     may have committed its output and resuming from an older checkpoint
//     would write it again. A damaged checkpoint that may have been
//     reported is a *DamagedCheckpointError that says how to proceed, and
//     a checkpoint that cannot be read (EIO, EMFILE) is an
//     *UnreadableCheckpointError; neither is ever passed over.
//
// # How the engine drives it
//
// One goroutine (the job master) owns the Coordinator and the Storage
// writers of pending checkpoints. It loops on a ticker and on messages from
// tasks and coordinators, turns each into one Coordinator call, and
// performs the returned actions in order:
//
//	Tick(now)                     -> SnapshotCoordinators{N}
//	  driver: Storage.Begin(N); snapshot each operator coordinator and
//	  WriteState(CoordinatorOwner(uid), bytes) each, on a goroutine of its
//	  own
//	CoordinatorsSnapshotted(N, h) -> InjectBarriers{N}
//	  driver: put barrier N into each running source task's mailbox; tasks
//	  align, snapshot and acknowledge with their bytes (or decline); the
//	  driver writes them, WriteState(OperatorOwner(uid, s), bytes), off its
//	  goroutine, and steps Ack only once they are durable
//	  (a state backend of immutable files puts new ones with PutFile
//	  first, and names them in WriteState(owner, bytes, files...))
//	Ack(N, task, h) ...           -> PersistMetadata{N, States} after the last
//	  driver: Writer.Commit(Metadata{N, Timestamp, fingerprint, States})
//	Persisted(N, err)             -> NotifyComplete{N} (or NotifyAborted{N})
//	  driver: notify every task and operator coordinator; sinks commit
//
// NotifyAborted also asks the driver to Abort the Writer of N. FailJob
// hands the job to the restart strategy; after a restart the driver calls
// Restore with the highest id Storage.List reports, so new ids never
// collide with checkpoints already on disk. When every bounded source has
// reached its end the engine calls TriggerFinal and ends the job after
// NotifyComplete with Final set has been delivered; tasks that finish
// earlier are reported with TaskFinished so checkpoints stop waiting for
// them.
//
// The Coordinator reads no clock and starts no goroutine: time comes in
// with Tick and TriggerFinal, which makes every rule testable as a plain
// sequence of events, without sleeps.
//
// # Decisions that differ from Flink
//
//   - A checkpoint whose metadata is being persisted does not time out: the
//     outcome of the write, not the clock, decides whether it completed.
//   - Metadata is persisted one checkpoint at a time, oldest first, so
//     completions are in id order.
//   - WithMinPause with WithMaxConcurrent above 1 is refused instead of
//     silently lowering the concurrency.
//   - The min pause runs from the end of the previous checkpoint, completed
//     or aborted; an end seen by an event without a time is dated by the
//     next Tick, which can only lengthen the pause.
//   - Latest does not fall back past a damaged checkpoint that may have
//     been reported complete, where Flink's store falls back to an older
//     one: the operator decides (restore it from a backup, or move it
//     away and accept the output since the previous one written again; an
//     exactly-once Kafka sink may then report the previous one's committed
//     transactions as lost, since their ids may have been reused, and the
//     way on is a fresh start from that checkpoint's source offsets).
//   - Latest does not fall back past metadata in an unknown format version
//     (a newer build wrote it), and when checkpoints exist but none
//     verifies it returns *NoValidCheckpointError rather than
//     ErrNoCheckpoint: starting from scratch would rewind sources behind
//     output sinks already committed.
//
// # Files
//
//   - coordinator.go: Coordinator, its events, actions and options.
//   - storage.go: Storage and Writer, Owner, StateHandle, Metadata,
//     Checkpoint, storage options.
//   - dir.go: DirStorage, chk-<id> directories and shared/ on a file
//     system.
//   - files.go: FileHandle, the bookkeeping and the collection rule of
//     shared files, Checkpoint.CopyFile.
//   - lock.go: DirStorage.Lock, the directory's OS file lock (flock on
//     DIR/_lock, through internal/flock) the engine holds while a job runs.
//   - metadata.go: the metadata file format and its verification.
//   - memory.go: MemoryStorage, the same rules in memory.
//   - errors.go: sentinel and struct errors of both parts.
package checkpoint
