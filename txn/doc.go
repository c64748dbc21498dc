// Package txn holds the Kafka transaction mechanics that exactly-once
// delivery needs, independent of the engine (it imports no runtime).
//
//   - Naming: transactional ids are prefix:<subtask>-<n>, n drawn from a small
//     bounded pool per subtask (TransactionalID, ParseTransactionalID). A
//     subtask that runs in a slot of a distributed job under a claim of
//     epoch e uses prefix:<subtask>-e<e>-<n> (ClaimTransactionalID,
//     WithClaimEpoch): an older owner of the slot that lives on cannot
//     register, and so abort, a newer owner's ids. A prefix may not hold
//     the colon (Terminator), so the ids beginning with prefix: are this
//     prefix's alone, for ACLs; the parsers also take the legacy layout
//     with a dash for the colon, which older checkpoints name.
//   - Lease: a prefix belongs to one job, which holds the consumer group
//     prefix:lease (AcquireLease); another job is refused with a
//     *PrefixHeldError.
//   - Pool: one franz-go client per pooled id, created on first use and kept:
//     a transaction per checkpoint reuses a client instead of creating one.
//     Begin opens a transaction, Txn.Prepare flushes it and hands back a
//     Committable{TransactionalID, ProducerID, Epoch, CheckpointID}, and
//     Pool.Commit ends it after the checkpoint completes.
//   - Resume: Commit and Abort end a prepared transaction from any client
//     with a raw EndTxn request, knowing only its Committable. Committing an
//     already committed transaction succeeds. A transaction the broker has
//     already aborted, or whose id was taken by a newer producer, is a
//     *DataLossError naming the id, producer id, epoch and checkpoint.
//   - Lingering: AbortLingering lists the open transactions under a prefix
//     with kadm and aborts those a subtask owns that are not restored
//     committables; where the broker cannot list transactions it probes the
//     pooled ids instead.
//   - Hanging commits: a broker that loses a commit marker (the partition
//     had no leader when the coordinator sent it) leaves a committed
//     transaction open in that partition for ever. FindHangingCommits finds
//     those of given committed transactions, EndHangingCommits writes their
//     markers (HangingCommit).
//
// # Rules learned from the broker (DESIGN.md, "Kafka, established")
//
// Under transaction protocol v2 the epoch moves at the end of every
// transaction, and once an id has run a later transaction (or a new producer
// has registered it) the old identity is fenced: its outcome can no longer
// be confirmed. Two rules follow, and the pool keeps both:
//
//  1. An id is reused only when no checkpoint that may be restored still
//     holds a committable of it. After a commit is confirmed, the id waits
//     for the next snapshot to be taken (SnapshotTaken) and for that
//     checkpoint to complete (CheckpointComplete). A restore always goes to
//     the latest completed checkpoint, whose committables therefore all name
//     ids that have not moved on, so re-committing them is idempotent.
//  2. Restored committables are committed before any producer registers an
//     id of the new attempt, since registering aborts an open transaction.
//     AbortLingering runs after that and spares every restored committable
//     of the checkpoint (Lingering.Keep), and registering ids fences every
//     producer of an older attempt (zombie fencing). The ids of restored
//     committables are registered anew by their owner once a checkpoint
//     taken after the restore completes (Pool.Reserve holds them until
//     then), since committing a transaction under protocol v2 leaves its
//     producer with a current epoch.
//
// A pool that a newer producer fenced stops for good (ErrFenced): it never
// registers an id again, which would fence the newer attempt in turn.
//
// Registering an id is the one thing a stale writer can do to a newer one:
// it aborts whatever the id has open, a prepared transaction whose
// checkpoint completed too. Within one process, attempts are ordered, and
// rule 2 keeps them apart. Across processes (a slot of a distributed job
// whose old owner was paused and resumes) nothing orders a restart of the
// old owner after the new owner's claim, so the two claims use different
// ids, and a writer aborts lingering transactions only of its own and
// older claims (Lingering.Epoch).
package txn
