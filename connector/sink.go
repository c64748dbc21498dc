package connector

import (
	"context"
	"time"
)

// SinkInitContext describes the subtask a writer or committer is created
// for.
type SinkInitContext interface {
	// SubtaskIndex is the subtask, in [0, Parallelism()).
	SubtaskIndex() int

	// Parallelism is the number of parallel writers (or committers).
	Parallelism() int

	// AttemptNumber counts restarts of this subtask, starting at 0. A
	// transactional writer can use it to tell its own lingering work from
	// another attempt's.
	AttemptNumber() int

	// RestoredCheckpointID returns the checkpoint the job restarted from,
	// and false when it started without one.
	RestoredCheckpointID() (checkpointID int64, ok bool)

	// Context is cancelled when the subtask's task is cancelled (a
	// failover, a hard stop such as the drain timeout) and once the task
	// has ended. A graceful stop, which drains the job, does not cancel
	// it. Every blocking call of the writer and the committer (waiting
	// for buffer space, flushing, reaching a broker) should take it, so
	// that a sink stuck on an unreachable system cannot hold up failover
	// or a hard stop. It may be kept for the writer's or committer's
	// lifetime.
	Context() context.Context
}

// WriteContext carries the metadata of one element handed to SinkWriter.Write.
// It is a value: the writer may keep it.
type WriteContext struct {
	// Timestamp is the element's event time in milliseconds since the Unix
	// epoch, or NoTimestamp.
	Timestamp int64
	// CurrentWatermark is the writer's input watermark when the element
	// arrived, or NoTimestamp before the first watermark.
	CurrentWatermark int64
}

// Sink creates writers. On its own it is an at-most-once or at-least-once
// sink (depending on what Flush does); exactly-once needs
// [TwoPhaseCommittingSink].
//
// A Sink is a description: its methods may be called from any goroutine and
// several times.
type Sink[T any] interface {
	// CreateWriter returns the writer of one subtask, for a job that starts
	// without writer state (for a StatefulSink, also when it restarts with
	// none). Called on the subtask's task goroutine.
	CreateWriter(ctx SinkInitContext) (SinkWriter[T], error)
}

// SinkWriter writes the elements of one subtask to the external system.
//
// Every method is called on the subtask's task goroutine, never concurrently
// with another method of the same writer. Lifecycle: Write any number of
// times, Flush at every checkpoint barrier and once more at the end of input,
// then Close exactly once, on success and on failure alike.
type SinkWriter[T any] interface {
	// Write adds an element. It may buffer and may block for backpressure
	// from the external system, but should return promptly. An error fails
	// the task.
	Write(element T, ctx WriteContext) error

	// Flush makes everything written so far durable or, for a committing
	// writer, ready to be committed. It is called at each checkpoint barrier
	// before PrepareCommit and SnapshotState, with endOfInput false, and
	// once more with endOfInput true after the last element.
	Flush(endOfInput bool) error

	// Close releases the writer's resources. Work not flushed is discarded.
	Close() error
}

// TwoPhaseCommittingSink is a sink whose writes become visible only when a
// committer commits them after the checkpoint that covers them is complete
// (the commit rule of DESIGN.md). Comm is the committable: what the writer
// hands to the committer, for instance a prepared Kafka transaction.
//
// Writers created by such a sink must implement [CommittingSinkWriter] with
// the same type arguments.
type TwoPhaseCommittingSink[T, Comm any] interface {
	Sink[T]

	// CreateCommitter returns the committer of one committer subtask.
	// Called on that subtask's task goroutine.
	CreateCommitter(ctx SinkInitContext) (Committer[Comm], error)

	// CommittableSerializer encodes committables for the committer's state,
	// where they wait for their checkpoint to complete and survive restarts
	// until committed.
	CommittableSerializer() VersionedSerializer[Comm]
}

// CommittingSinkWriter is the writer side of a TwoPhaseCommittingSink.
type CommittingSinkWriter[T, Comm any] interface {
	SinkWriter[T]

	// PrepareCommit returns the committables for everything written since
	// the previous call, and starts a new unit of work for what follows.
	// It is called on the task goroutine at each checkpoint barrier, right
	// after Flush(false) and before SnapshotState, and once at the end of
	// input after Flush(true). checkpointID is the checkpoint the
	// committables belong to (at the end of input, the final checkpoint's).
	// The committables travel with the checkpoint and are committed only
	// after it completes.
	PrepareCommit(checkpointID int64) ([]Comm, error)
}

// StatefulSink is a sink whose writers keep state across checkpoints and
// restarts (say, a buffer, or the identity of an open transaction). W is the
// writer state type.
//
// Writers created by such a sink must implement [StatefulSinkWriter] with
// the same type arguments.
type StatefulSink[T, W any] interface {
	Sink[T]

	// RestoreWriter returns the writer of one subtask, continuing from the
	// states snapshotted by the writers of the restored checkpoint. When the
	// parallelism changed, one subtask may receive several writers' states
	// or none. Called on the subtask's task goroutine.
	RestoreWriter(ctx SinkInitContext, states []W) (StatefulSinkWriter[T, W], error)

	// WriterStateSerializer encodes writer states for checkpoints.
	WriterStateSerializer() VersionedSerializer[W]
}

// StatefulTwoPhaseSink is a two-phase-committing sink whose writers also
// keep state of their own: both [TwoPhaseCommittingSink] and
// [StatefulSink]. Its writers implement [CommittingSinkWriter] and
// [StatefulSinkWriter]; at each checkpoint barrier the engine takes the
// committables (PrepareCommit) and then the writer's state
// (SnapshotState), and checkpoints both together.
type StatefulTwoPhaseSink[T, Comm, W any] interface {
	TwoPhaseCommittingSink[T, Comm]
	StatefulSink[T, W]
}

// StatefulSinkWriter is the writer side of a StatefulSink.
type StatefulSinkWriter[T, W any] interface {
	SinkWriter[T]

	// SnapshotState returns the writer's state for checkpoint checkpointID.
	// It is called on the task goroutine at each checkpoint barrier, after
	// Flush and, for a committing writer, after PrepareCommit.
	SnapshotState(checkpointID int64) ([]W, error)
}

// RestoredCommittablesListener is an optional capability of a Committer.
// When a subtask starts from a checkpoint, the engine calls
// RestoredCommittables on its committer on the task goroutine, right after
// CreateCommitter and before the first Commit, with the committables of the
// whole checkpoint: those of every subtask that wrote it, not only those
// this subtask is handed to commit. After a parallelism change one old
// subtask's committables go to another new subtask, and subtasks start
// concurrently, so a sink that cleans up what earlier attempts left behind
// (a Kafka sink aborts lingering transactions) must spare every committable
// of the checkpoint: another subtask may be about to commit it. all is nil
// when the checkpoint holds none.
type RestoredCommittablesListener[Comm any] interface {
	RestoredCommittables(all []Comm)
}

// CheckpointListener is an optional capability of a SinkWriter: the engine
// calls NotifyCheckpointComplete on the task goroutine once checkpoint
// checkpointID is complete everywhere (after the committers of that
// checkpoint were asked to commit). A transactional writer uses it to reuse
// resources that the checkpoint no longer needs.
type CheckpointListener interface {
	NotifyCheckpointComplete(checkpointID int64) error
}

// CheckpointConfig is the checkpoint and failover configuration of a job,
// as a SinkInitContext that implements CheckpointConfigProvider gives it.
type CheckpointConfig struct {
	// Interval between checkpoint triggers; 0 when checkpoints are off.
	Interval time.Duration
	// Timeout after which a checkpoint not yet acknowledged fails.
	Timeout time.Duration
	// MinPause is the least time between the end of one checkpoint and the
	// trigger of the next.
	MinPause time.Duration
	// TolerableFailures is how many checkpoints in a row may fail before
	// the job fails.
	TolerableFailures int
	// MaxRestartDelay is the longest the restart strategy waits before a
	// restart.
	MaxRestartDelay time.Duration
	// Unbounded reports whether some source of the job never ends.
	Unbounded bool
	// Takeover is, in a slot of a distributed job, what a takeover of the
	// slot may take; zero outside a slot.
	Takeover Takeover
}

// Takeover is what delays the commit of a prepared transaction whose
// process died in a slot of a distributed job: the slot's next owner
// commits it, once the job's group noticed the death, gave the slot to
// another process, and that process claimed and restored it.
type Takeover struct {
	// SessionTimeout is how long the group waits for a silent process
	// (runtime.Distributed.SessionTimeout).
	SessionTimeout time.Duration
	// RebalanceTimeout bounds the rebalance that gives the slot away.
	RebalanceTimeout time.Duration
	// Claim bounds the new owner's confirmation of its claim.
	Claim time.Duration
	// Restore is what the restore of the slot is allowed: the checkpoint
	// timeout, within which a checkpoint wrote what the restore reads.
	// Nothing bounds a restore; this is an estimate.
	Restore time.Duration
}

// Total is the longest a takeover may take.
func (t Takeover) Total() time.Duration {
	return t.SessionTimeout + t.RebalanceTimeout + t.Claim + t.Restore
}

// CheckpointConfigProvider is an optional capability of a SinkInitContext:
// the job's checkpoint and failover configuration. A sink whose
// transactions time out (the broker aborts a Kafka transaction after
// transaction.timeout.ms) checks at start that a transaction outlives the
// longest it can wait for the checkpoint that commits it.
type CheckpointConfigProvider interface {
	CheckpointConfig() CheckpointConfig
}

// CommitterInfo is an optional capability of a SinkInitContext: whether
// the engine runs the sink's committer beside the writer created with the
// context. The engine cannot see through a wrapper that passes on neither
// TwoPhaseCapable nor CommitterRequired, and runs what it wraps as a plain
// sink, without committer; a sink whose writes only its committer
// publishes checks this in CreateWriter and fails (wrapping
// ErrInvalidConfiguration) instead of writing what nobody would commit.
// A context without it (a test's own) says nothing either way.
type CommitterInfo interface {
	// CommitterRuns reports whether the sink's committer runs beside the
	// writer and commits what it prepares.
	CommitterRuns() bool
}

// ClaimInfo is an optional capability of a SinkInitContext and a
// SourceReaderContext: the claim under which the subtask runs, in a
// distributed job, where every subtask runs in a slot that one process
// at a time owns. A process whose slot was taken over may run on for a
// while without knowing (it was paused); a transactional sink names its
// transactions after the claim so that such a process never aborts or
// fences the newer owner's transactions (the Kafka sink:
// txn.ClaimTransactionalID). A reader learns from it that only its
// slot's log names what is restored (the Kafka shuffle purges below its
// completed checkpoints).
type ClaimInfo interface {
	// ClaimEpoch is the epoch of this process's claim on the subtask's
	// slot (>= 1; a newer owner has a higher one), or 0 outside a
	// distributed job.
	ClaimEpoch() int64
}

// ClaimIncarnation is an optional capability of a context that is a
// ClaimInfo: the run of the distributed job whose slot logs number its
// claims. A job started into a new checkpoint root, afresh or from a
// savepoint (runtime.WithRestoreFrom), is a new incarnation and numbers
// its claims from 1 again, so a sink that fences stale claims across
// restarts compares epochs only within one incarnation (the PostgreSQL
// sink's progress row).
type ClaimIncarnation interface {
	// ClaimIncarnation names the incarnation: the same in every process
	// and every claim of one run of the job, another in the next run
	// started into a new checkpoint root; "" outside a distributed job.
	ClaimIncarnation() string
}

// JobInfo is an optional capability of a SinkInitContext: the job the
// subtask runs in. A sink that keeps a resource for one job (the Kafka
// sink its transactional id prefix) tells the job's processes from
// another job's by it.
type JobInfo interface {
	// JobName is the job's name: Distributed.Job in a distributed job,
	// else the name the job was executed under.
	JobName() string
	// DistributedJob reports whether the job runs over many processes
	// (runtime.WithDistributed), every one of which runs the same sinks:
	// what one job holds, all of them share.
	DistributedJob() bool
}

// CommitterRequired is an optional capability of a Sink whose writes become
// visible only through its committer, such as a Kafka sink in exactly-once
// mode. Go cannot recognise a TwoPhaseCommittingSink from a Sink[T] alone
// (its committable type is unknown), so such a sink says so here: the
// engine refuses to run it without its committer (runtime.SinkTo, when
// the sink, or a wrapper around it, is not TwoPhaseCapable), and
// refuses a job that feeds it from an unbounded source without
// checkpoints.
type CommitterRequired interface {
	// CommitterRequired reports whether the sink's writes need a committer
	// to become visible. It may be called from any goroutine.
	CommitterRequired() bool
}
