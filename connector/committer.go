package connector

import "context"

// Committer commits the committables produced by a TwoPhaseCommittingSink's
// writers, once the checkpoint that produced them is complete.
//
// Commits must be idempotent: after a failure the engine retries
// committables restored from the last checkpoint, some of which may have been
// committed already. Committing an already committed committable must
// succeed (or be reported with SignalAlreadyCommitted), never fail.
//
// Every method is called on the committer subtask's task goroutine, never
// concurrently with another method of the same committer.
type Committer[Comm any] interface {
	// Commit commits requests, all of whose checkpoints are complete. Each
	// request is settled by the signal the committer gives it; a request
	// given none counts as committed. Signals must be given before Commit
	// returns.
	//
	// ctx is cancelled when the task is cancelled; a blocking commit must
	// return then. A non-nil error fails the task, and every request not
	// signalled otherwise is retried after the restart: use it for failures
	// of the committer itself, and the per-request signals for failures of
	// one committable.
	Commit(ctx context.Context, requests []CommitRequest[Comm]) error

	// Close releases the committer's resources. It is called exactly once.
	Close() error
}

// CommitterCheckpointListener is an optional capability of a Committer: the
// engine calls CheckpointCompleted on the committer's task goroutine each
// time a checkpoint completes, after Commit was handed the committables
// then due, and also when none were. A committer that goes on watching
// what it committed (the Kafka sink checks that every partition got its
// commit marker) uses it to keep watching while the input is idle and no
// Commit comes.
//
// ctx is cancelled when the task is cancelled. A non-nil error fails the
// task, as one from Commit does.
type CommitterCheckpointListener interface {
	CheckpointCompleted(ctx context.Context, checkpointID int64) error
}

// CommitRequest is one committable handed to Committer.Commit, together with
// the ways to report what became of it. The engine implements it.
//
// Its methods are called on the committer's task goroutine, during the Commit
// call that received the request. At most one signal counts; later signals
// replace earlier ones.
type CommitRequest[Comm any] interface {
	// Committable is what to commit.
	Committable() Comm

	// NumberOfRetries counts how often this committable has been retried
	// with RetryLater or UpdateAndRetryLater, starting at 0.
	NumberOfRetries() int

	// SignalFailedWithKnownReason reports that the committable can never be
	// committed for a reason the sink understands (for example, the broker
	// aborted the transaction after its timeout). The engine surfaces err;
	// the committable is not retried and its data is lost, which the
	// surfaced error must make visible rather than silent.
	SignalFailedWithKnownReason(err error)

	// SignalFailedWithUnknownReason reports an unexpected failure. The
	// engine fails the job with err; the committable is retried after the
	// restart.
	SignalFailedWithUnknownReason(err error)

	// RetryLater asks for the committable to be committed again in a later
	// Commit call, for transient failures.
	RetryLater()

	// UpdateAndRetryLater is RetryLater with a replacement committable, for
	// instance one that carries a refreshed producer epoch.
	UpdateAndRetryLater(committable Comm)

	// SignalAlreadyCommitted reports that the committable had been committed
	// before (typically by the attempt that failed). It counts as success.
	SignalAlreadyCommitted()
}
