// Package checkpoint keeps completed checkpoints so that a job can restart
// from the newest valid one: Storage, where checkpoints are written and
// verified (a directory, S3 or memory), retention, shared files,
// savepoints, and the inspection of what a checkpoint holds. When a
// checkpoint is taken and when it is complete is decided by the engine's
// coordinator (runtime/internal/coordinator), which drives Storage.
//
// # Invariants kept here
//
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
// # Decisions that differ from Flink
//
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
//   - records.go: RecordStorage, the optional capability (all three
//     storages) to keep small records, each created once by a
//     conditional write: link(2) of a fsynced temp file on a directory,
//     If-None-Match: * on S3 (refused where the server ignores it), and
//     deleted (a deleted name can be created again). A distributed job's
//     slot ownership log is made of them.
//   - errors.go: sentinel and struct errors, those of the coordinator's
//     aborts and failures among them (AbortError, TooManyFailuresError),
//     which the engine's errors wrap.
package checkpoint
