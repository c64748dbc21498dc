package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// The operator contract: what a task drives an operator of its chain
// through, on the task goroutine. Package runtime builds chains of
// operators and runs them; an operator may live in runtime or in a package
// of its own under runtime/internal, which cannot import runtime, so
// everything here speaks of the task only through Task.

// Output is where an operator emits: the input of the next operator in its
// chain (a plain method call, no copy), a fan-out to several, or a record
// writer towards another task. Every chained operator is itself the output
// of its predecessor, typed by what it consumes.
//
// Watermarks and stream status travel through outputs because an operator
// may act on them before passing them on (a keyed process operator fires
// its event-time timers first).
type Output[T any] interface {
	Collect(v T, ts int64) error
	EmitWatermark(wm int64) error
	EmitStatus(idle bool) error
}

// Lifecycle is the type-free face of a chained operator, driven by its
// task on the task goroutine: Open (tail of the chain first, so an
// operator's outputs are open before it emits), EndInput (head first, once
// all of the chain's input has been processed), Close (always, also on
// failure). Info is the operator's identity, for errors and metrics.
type Lifecycle interface {
	Info() *OpInfo
	Open(t Task) error
	EndInput() error
	Close() error
}

// Task is what an operator may use of the task running it, given to Open.
// Package runtime's task implements it; a method here is one an operator
// outside runtime needs.
type Task interface {
	// Restored is the state the task restores, empty on a fresh start.
	Restored() *RestoredState
	// DrainingForSavepoint reports whether the task's slot of a
	// distributed job drains for a savepoint of the job (a shuffle's
	// encoding then writes a stop marker at its end of input).
	DrainingForSavepoint() bool
	// ShuffleDrained tells the execution that the decoding of channel
	// read every upstream slot's stop marker: the sources reading it may
	// stop. Called once, on the task goroutine.
	ShuffleDrained(channel string)

	// For runtime/internal's operators (sinkop, sourceop).

	// Context is the task's: cancelled on failover and hard stop, and
	// when the task ends (context.Background for a task driven by hand).
	// A sink hands it to its writer and committer and waits on it between
	// commit retries.
	Context() context.Context
	// NewTimer returns a stopped timer whose expiry runs fn on the task
	// goroutine (through the mailbox), where the operator's state lives.
	// The task stops it when it ends.
	NewTimer(name string, fn func() error) *time.Timer
	// MetricGroup is the metric group of the operator info names, nil when
	// the task reports no metrics (a task driven by hand); an operator
	// hands it to its connector's reader, writer and committer
	// (metrics.GroupProvider).
	MetricGroup(info OpInfo) *metrics.Group

	// For sink operators (runtime/internal/sinkop).

	// JobFacts is what a sink's init context tells its writer and
	// committer of the job and of this attempt of the task, which only
	// runtime's configuration and execution know.
	JobFacts() JobFacts
	// CommitsSettled tells the task that an operator which held commits
	// back to retry (Committing) settled them all: the task may then
	// report its checkpoints committed to the master, and finish if it
	// waited only for them.
	CommitsSettled()
	// EndOfInputCommit is called by a sink, in a job without checkpoints,
	// before it commits at the end of input; sink names it in errors. No
	// checkpoint holds what it commits, so a restart of the task would
	// commit its records again (the commit rule): the task makes the
	// commit and a restart exclude each other, and fails with
	// ErrTaskCancelled when the restart came first.
	EndOfInputCommit(sink string) error

	// For source operators (runtime/internal/sourceop).

	// ActivityTime reads the task's clock that stands still while the
	// task is backpressured: the wall clock minus the time its output
	// was unavailable. A source measures idleness on it: a reader that
	// could not emit has not found its input empty.
	ActivityTime() time.Time
	// CountLag counts r's lag in the job's source lag gauge until
	// uncount is called; nil when the task runs in no job.
	CountLag(r connector.LagReporter) (uncount func())
	// SourceSettings are what a source operator follows of the job's
	// configuration and of the slot the task runs in.
	SourceSettings() SourceSettings
}

// JobFacts is Task.JobFacts: the job and checkpoint facts a sink's init
// context hands over (connector.SinkInitContext and the interfaces it
// implements).
type JobFacts struct {
	// Attempt is the task's attempt number, 0 on the first run.
	Attempt int
	// Checkpoints is the job's checkpoint and restart configuration
	// (connector.CheckpointConfigProvider); CheckpointsEnabled whether
	// checkpoints are taken at all, without which a two-phase sink
	// commits at the end of input.
	Checkpoints        connector.CheckpointConfig
	CheckpointsEnabled bool
	// Job names the job, Distributed is set for a distributed job
	// (connector.JobInfo).
	Job         string
	Distributed bool
	// ClaimEpoch is the epoch of the process's claim on the slot the
	// task runs in (a distributed job), 0 otherwise; ClaimIncarnation
	// names the run of the job that numbers it (connector.ClaimInfo,
	// connector.ClaimIncarnation).
	ClaimEpoch       int64
	ClaimIncarnation string
}

// The capabilities below are optional: the task finds them on an operator
// by type assertion. An operator meaning to have one asserts it at compile
// time (var _ engine.Snapshotter = ...): a method misspelt or left
// unexported would otherwise compile and never be called.

// Preparer is an operator that acts on a barrier before any state is
// taken: a sink writer flushes, and a two-phase one prepares its
// transaction (Flink's prepareSnapshotPreBarrier). A failure there fails
// the task: the writer may have given up what it held (a Kafka writer whose
// prepare fails has aborted its transaction), and a later checkpoint would
// complete with source positions past those records. The restart goes back
// to the last completed checkpoint, which reads them again.
type Preparer interface {
	PrepareSnapshotPreBarrier(id int64) error
}

// Snapshotter is an operator with state to checkpoint. SnapshotState runs
// on the task goroutine when the task's barrier for id is complete; the
// bytes are stored under the operator's UID and subtask. A SnapshotState
// error must lose nothing (the state stays in the operator and the next
// checkpoint takes it): it declines the checkpoint, which counts towards
// the job's tolerable checkpoint failures.
type Snapshotter interface {
	SnapshotState(id int64) ([]byte, error)
}

// AsyncSnapshotter is an operator whose snapshot is taken in two parts
// (Flink's asynchronous snapshots): FreezeState, on the task goroutine at
// the barrier, makes the state as of the barrier immutable, at a cost that
// does not follow the size of the state, and returns its encoder; the
// encoder runs on another goroutine, reading only what FreezeState froze,
// while the task goes on, and returns early once stop says so (runtime's
// errSnapshotAbandoned); ThawState, on the task goroutine once the encoder
// returned, ends the freeze. An error of either part declines the
// checkpoint, as a SnapshotState error does.
//
// The encoder returns the blob and the shared files of checkpoint storage
// the state uses besides it (the pebble backend's immutable files, which
// it stored with Storage.PutFile); they are recorded with the blob.
type AsyncSnapshotter interface {
	FreezeState(id int64) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error)
	ThawState()
}

// NewFileBytes is an AsyncSnapshotter that says how many bytes of shared
// files its last encoder stored.
type NewFileBytes interface {
	NewFileBytes() int64
}

// CheckpointNotified is an operator that acts when a checkpoint completes
// (a reader, a sink writer that is a connector.CheckpointListener, the
// committer).
type CheckpointNotified interface {
	NotifyCheckpointComplete(id int64) error
}

// Committing is an operator that may hold commits to retry; the task does
// not finish while it does.
type Committing interface {
	CommitsPending() bool
}

// OutputCommitter is a sink operator: it makes output visible when told
// that a checkpoint completed. It therefore hears of a completed
// checkpoint first, and the chain's other operators (source readers) only
// once every sink task committed its output (runtime's notify.go), so
// that nothing upstream acts on a checkpoint whose output is not
// committed yet. CommitsOutput does nothing; it marks the operator.
type OutputCommitter interface {
	CheckpointNotified
	CommitsOutput()
}

// OpInfo identifies one operator instance for errors, logs and metrics.
type OpInfo struct {
	Name    string
	UID     string
	Subtask int
	// Records counts the records into the operator (for a source, those
	// its reader emitted), on the task goroutine.
	Records int64
	// Sides are the operator's side outputs, nil if it declares none:
	// runtime's, which only runtime's operators and contexts read.
	Sides any
}

// Count is Records: what runtime's metrics read of every operator and
// record writer.
func (i *OpInfo) Count() int64 { return i.Records }

// Wrap attributes err to this operator, unless it already carries an
// operator: an error returned through a chain keeps the operator that
// produced it, not the one it passed through.
//
// The error is package runtime's OperatorError, a type of its API that
// this package cannot name; runtime installs how to make it
// (SetOperatorErrors). Before that (this package's own tests), the error is
// a plain wrapping that names the operator.
func (i *OpInfo) Wrap(err error) error {
	if err == nil {
		return nil
	}
	if attribute != nil {
		return attribute(i, err)
	}
	return fmt.Errorf("operator %q (uid %s) subtask %d failed: %w", i.Name, i.UID, i.Subtask, err)
}

// attribute is SetOperatorErrors's f.
var attribute func(info *OpInfo, err error) error

// SetOperatorErrors installs f as what OpInfo.Wrap returns for a non-nil
// error: f attributes err to the operator info names, or returns err as
// it is when it already carries an operator. Package runtime calls it once,
// in an init, before any task runs, so that reading it needs no lock. It
// is one function rather than a type here because the error is a type of
// runtime's API, whose fields `go doc` shows there, and because the rule
// of the operator already carried needs to know that type too.
func SetOperatorErrors(f func(info *OpInfo, err error) error) { attribute = f }
