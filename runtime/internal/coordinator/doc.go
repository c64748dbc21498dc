// Package coordinator decides when a checkpoint is taken and when it is
// complete: the Coordinator, a deterministic state machine that the
// engine's master goroutine steps with events and whose actions it
// performs, writing through runtime/checkpoint's Storage. It is the
// engine's, not a user's: package checkpoint holds what users see.
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
package coordinator
