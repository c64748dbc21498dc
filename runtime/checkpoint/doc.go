// Package checkpoint keeps completed checkpoints so that a job can restart
// from the newest valid one: Storage, where checkpoints are written and
// verified (a directory, S3, memory, or any store behind a Blob),
// retention, shared files, savepoints, and the inspection of what a
// checkpoint holds. When a checkpoint is taken and when it is complete is
// decided by the engine's coordinator (runtime/internal/coordinator),
// which drives Storage.
//
// # Invariants kept here
//
//   - A checkpoint exists in storage only after its metadata is durable:
//     state blobs first (each durable when written), then the writer's
//     commit marker, then the metadata by a conditional create
//     (create-if-absent), then the marker's deletion. The metadata records
//     a format version, and every blob's owner, length and CRC-32C, and
//     carries its own CRC-32C; a torn or corrupt checkpoint is detected on
//     load. Of two writers of one id only one completes it; a failed
//     Commit deletes the metadata first (its create may have succeeded
//     with the answer lost), so it leaves no checkpoint that looks
//     complete, or, when that deletion fails too, a whole one beside its
//     commit marker, never part of one.
//   - Shared files (Storage.PutFile) are durable before any metadata lists
//     them. A name is stored once and never rewritten. The metadata records each
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
//     it was never reported complete (a commit that never returned: its
//     metadata beside its writer's chk-<id>/_committing-<token>), since
//     otherwise its sinks
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
// # Storage on a blob store
//
// Every Storage of this package is a BlobStorage: the logic above (layout,
// metadata, the commit protocol, retention, shared files and their
// collection, records, the bounds on what is read back) written once on a
// Blob, a small interface of whole objects under '/'-separated keys:
// Open, Create, CreateIfAbsent, Stat, List (by prefix), Delete and
// Location (for messages). DirStorage, S3Storage and MemoryStorage are
// BlobStorages on three adapters. A user with another store (GCS, Azure
// Blob, a database) writes only a Blob and passes it to NewBlobStorage.
//
// The adapter must keep Blob's contract, and exactly-once depends on one
// part of it above all: CreateIfAbsent must decide atomically between
// concurrent creators of one key, exactly one of them succeeding and the
// others getting fs.ErrExist with nothing changed. A checkpoint is
// complete when its metadata is created that way, and a checkpoint root's
// owner, a distributed job's slot ownership and a savepoint's committed
// mark are records created that way: a store that let a second creator
// replace the first one's object would let two processes each believe
// they completed a checkpoint or own a slot, and both commit output. A
// store that cannot create conditionally says so (ErrNoConditionalWrites):
// checkpoints then still complete, the last writer winning, and records
// are refused. Creates must also be atomic (an object is whole or absent)
// and durable (a Create at the latest when a later CreateIfAbsent or
// Delete returns), and listings must show every object created before
// them.
//
// # Files
//
//   - storage.go: Storage and Writer, Owner, StateHandle, Metadata,
//     Checkpoint, storage options, Latest's rule.
//   - blob.go: Blob, the contract of a store.
//   - blobstorage.go: BlobStorage, the storage logic on a Blob: layout,
//     Begin/WriteState/Commit, retention, scan, Latest and Load with
//     their verification, shared files.
//   - dir.go: DirStorage and its Blob on a directory (temp file, fsync,
//     rename or link(2), directory fsync; files 0600, directories 0700).
//   - s3.go: S3Storage and its Blob on S3 (If-None-Match: * for the
//     conditional create, multipart uploads), its options and probes.
//   - memory.go: MemoryStorage and its Blob on a map.
//   - files.go: FileHandle, the bookkeeping and the collection rule of
//     shared files, Checkpoint.CopyFile.
//   - lock.go: DirStorage.Lock, the directory's OS file lock (flock on
//     DIR/_lock, through internal/flock) the engine holds while a job runs.
//   - metadata.go: the metadata file format and its verification.
//   - records.go: RecordStorage, small records, each created once by the
//     Blob's conditional create, and deleted (a deleted name can be
//     created again). A distributed job's slot ownership log is made of
//     them.
//   - errors.go: sentinel and struct errors, those of the coordinator's
//     aborts and failures among them (AbortError, TooManyFailuresError),
//     which the engine's errors wrap.
package checkpoint
