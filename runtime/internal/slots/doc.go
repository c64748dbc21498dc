// Package slots holds the pieces of running one job over several
// processes that decide who owns what: the slot mapping and naming, the
// slot ownership log and its epoch rules, the merge of watermark markers
// from upstream slots (deterministic cores without I/O of their own), the
// membership in the job's consumer group that assigns slots, and the
// job's start point every process settles before it joins (Settle, which
// reads and creates the start record itself). The engine's distributed
// driver (runtime/internal/slotrun) performs what they decide (DESIGN.md,
// "Scale-out (in progress)").
//
// A job has S slots (DefaultSlots). Every stage runs with parallelism S
// and slot i is subtask i of every stage; key group kg belongs to slot
// kg*S/maxParallelism (ForKeyGroup), a partition of an input topic to a
// slot by a stable rule (ForPartition). A slot's checkpoints and its
// ownership log live in a storage of their own, <root>/<job>/slots/<i>
// (StoragePath), so any process can restore any slot. Its Kafka sinks
// name their transactional ids after the slot and the claim's epoch
// (txn.ClaimTransactionalID): an old owner that lives on can neither
// commit (its checkpoints are never recorded) nor abort the new owner's
// transactions (it cannot register the new claim's ids).
//
// # Invariants kept here
//
//   - At most one owner can commit output or state for a slot (the
//     shared design's invariant 12), on the storage side: an owner
//     records its claim in the slot's log before restoring, under an
//     epoch one above every claim there, once the group confirmed (an
//     offset commit under its current generation) that it still assigns
//     the slot to the owner; epochs are the log's own, so a group deleted
//     and started again (generations from 1) does not lock a slot out; a
//     checkpoint
//     is notified complete only once its record is in the log after that
//     claim; the log is one order of claims and checkpoint records, each
//     created once by a conditional write at the next position, so a
//     zombie's record after a newer claim either cannot be written or does
//     not count (Ownership, Decide).
//   - The restore point is the latest checkpoint recorded under the claim
//     governing the log at its position: the latest completed checkpoint
//     of the highest epoch that has one; a checkpoint written under an
//     older epoch after a newer claim is ignored (Decide).
//   - Checkpoint ids of a slot are never reused: a new owner numbers its
//     checkpoints above every id in the slot's storage and log.
//   - Compaction changes nothing a reader decides: the owner appends a
//     floor summing up the log before it, and deletes below it only after
//     the floor's marker exists; a record counts only if no floor marker
//     is above its position, so a stale writer's record created again at
//     a deleted position never counts (CompactLog, CheckFloor).
//   - A downstream partition's watermark is the minimum over its upstream
//     slots, never goes back (also when an upstream slot changes owner and
//     its new owner starts behind), and is held by an upstream slot never
//     heard from until it reports a watermark or idleness (Merge).
//
// # Files
//
//   - layout.go: slots, key groups and partitions; names of the topic,
//     group and storage paths.
//   - log.go: the ownership log's records, their stored form, LoadLog
//     (from the highest floor), Decide, CompactLog and floor markers.
//   - ownership.go: Ownership, the deterministic core of one member's
//     ownership of one slot.
//   - watermark.go: Marker and Merge, the watermark of a downstream
//     partition from the markers of its upstream slots.
//   - settle.go: Settle, the job's start point every process agrees on
//     before it joins (the start record), and the checks of what a job is
//     given to start from.
//   - membership.go: Membership, the job's consumer group over the topic
//     <job>.slots (franz-go, cooperative-sticky), which reports the slots
//     a process owns on every rebalance, and Confirm, the proof that the
//     group assigns a slot to this member in its current generation.
package slots
