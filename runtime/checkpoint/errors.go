package checkpoint

import (
	"errors"
	"fmt"
	"strings"
)

// Storage errors. Match them with errors.Is.
var (
	// ErrNoCheckpoint: the storage holds no completed checkpoint at all; a
	// job starts from scratch.
	ErrNoCheckpoint = errors.New("checkpoint: no completed checkpoint")
	// ErrNotFound: the checkpoint asked for was never committed, or its
	// directory is gone.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrExists: Begin was given the id of a committed checkpoint. Ids are
	// never reused; restore the coordinator with the highest id of List.
	ErrExists = errors.New("checkpoint: id already committed")
	// ErrCorrupt: metadata that is torn or fails its checksum, a state
	// blob that is missing, of the wrong length or fails its checksum, or
	// a shared file that is missing (ErrMissingFile), of the wrong length,
	// or fails its checksum when copied.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrUnsupportedVersion: the metadata was written in a format this
	// build does not know, most likely by a newer splitflow. Latest does
	// not fall back past such a checkpoint: run the newer build.
	ErrUnsupportedVersion = errors.New("checkpoint: unsupported metadata format version")
	// ErrUnknownHandle: Commit was given a state handle that this Writer
	// did not write.
	ErrUnknownHandle = errors.New("checkpoint: unknown state handle")
	// ErrDuplicateState: a second WriteState for the same owner in one
	// checkpoint.
	ErrDuplicateState = errors.New("checkpoint: state already written for owner")
	// ErrWriterClosed: the Writer was already committed or aborted.
	ErrWriterClosed = errors.New("checkpoint: writer already committed or aborted")
)

// CheckpointError says which checkpoint, and which file of it, failed
// verification or I/O. Err wraps ErrCorrupt, ErrNotFound,
// ErrUnsupportedVersion or an I/O error.
type CheckpointError struct {
	ID int64
	// File is the file at fault relative to the storage ("chk-7/_metadata"),
	// or empty.
	File string
	Err  error
}

func (e *CheckpointError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("checkpoint %d: %v", e.ID, e.Err)
	}
	return fmt.Sprintf("checkpoint %d: %s: %v", e.ID, e.File, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }

// NoValidCheckpointError is Latest's answer when checkpoints were committed
// but none of them verifies. It deliberately does not match
// ErrNoCheckpoint: restarting from scratch would rewind sources to their
// initial offsets while sinks have already committed output.
type NoValidCheckpointError struct {
	// Skipped holds one error per committed checkpoint, newest first.
	Skipped []error
}

func (e *NoValidCheckpointError) Error() string {
	msgs := make([]string, len(e.Skipped))
	for i, err := range e.Skipped {
		msgs[i] = err.Error()
	}
	return "checkpoint: no valid checkpoint to restore from; repair or remove the storage deliberately: " + strings.Join(msgs, "; ")
}

func (e *NoValidCheckpointError) Unwrap() []error { return e.Skipped }

// DamagedCheckpointError is Latest's answer when the newest checkpoint is
// damaged (torn or altered metadata, a state file missing, of the wrong
// length or checksum) and may have been reported complete, so its sinks
// may have committed its transactions: resuming from an older checkpoint
// would write that output again, so Latest does not. It matches
// ErrCorrupt.
type DamagedCheckpointError struct {
	// Storage names the storage: a DirStorage's directory, an S3
	// storage's URL (Blob.Location).
	Storage string
	ID      int64
	// Previous is the newest checkpoint older than ID, 0 if there is none.
	Previous int64
	// Remedy says how to proceed.
	Remedy string
	// Err is the verification error, a *CheckpointError naming the file.
	Err error
}

func (e *DamagedCheckpointError) Error() string {
	return fmt.Sprintf("checkpoint storage %s: checkpoint %d is damaged (%v); it may have been reported complete, so sinks may have committed its output, and resuming from an older checkpoint would write that output again; %s",
		e.Storage, e.ID, e.Err, e.Remedy)
}

func (e *DamagedCheckpointError) Unwrap() error { return e.Err }

// UnreadableCheckpointError is Latest's answer when a checkpoint cannot be
// read for a reason other than damage (EIO, EMFILE, permissions): the job
// must not start from an older one instead, nor from nothing.
type UnreadableCheckpointError struct {
	Storage string
	ID      int64
	// Err is the cause, a *CheckpointError naming the file.
	Err error
}

func (e *UnreadableCheckpointError) Error() string {
	return fmt.Sprintf("checkpoint storage %s: cannot read checkpoint %d (%v); it is not passed over, since resuming from an older checkpoint could write output again: fix the cause and start again", e.Storage, e.ID, e.Err)
}

func (e *UnreadableCheckpointError) Unwrap() error { return e.Err }

// Reasons a checkpoint is aborted, carried by an *AbortError. Match them
// with errors.Is.
var (
	// ErrDeclined: a task declined the checkpoint (it could not snapshot).
	ErrDeclined = errors.New("declined by a task")
	// ErrTimeout: not every task acknowledged within the timeout.
	ErrTimeout = errors.New("timed out")
	// ErrCoordinatorSnapshotFailed: an operator coordinator could not
	// snapshot.
	ErrCoordinatorSnapshotFailed = errors.New("operator coordinator snapshot failed")
	// ErrPersistFailed: the metadata could not be made durable.
	ErrPersistFailed = errors.New("persisting metadata failed")
	// ErrSubsumed: a newer checkpoint completed first. Not a failure: the
	// newer one covers everything the older one would have.
	ErrSubsumed = errors.New("subsumed by a newer completed checkpoint")
	// ErrRestarted: the job was restored (Restore) while the checkpoint was
	// pending. Not counted as a checkpoint failure.
	ErrRestarted = errors.New("job restarted")
	// ErrJobFailing: the job is failing because of too many failed
	// checkpoints; pending ones are aborted with it. Not counted again.
	ErrJobFailing = errors.New("job failing")
)

// ErrTooManyFailures is matched by the error of FailJob.
var ErrTooManyFailures = errors.New("too many consecutive checkpoint failures")

// AbortError is why checkpoint ID was aborted: Reason is one of the
// sentinels above (ErrDeclined, ErrTimeout, ...), Err the cause when there
// is one (the task's decline reason, the storage error). Both are
// reachable with errors.Is.
type AbortError struct {
	ID     int64
	Reason error
	// Task is the declining task, for ErrDeclined.
	Task TaskID
	Err  error
}

func (e *AbortError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d aborted: %v", e.ID, e.Reason)
	if errors.Is(e.Reason, ErrDeclined) {
		fmt.Fprintf(&b, " (%s)", e.Task)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *AbortError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// TooManyFailuresError is the error of FailJob: Consecutive checkpoints
// failed in a row, more than Tolerable, the last because of Last.
type TooManyFailuresError struct {
	Consecutive int
	Tolerable   int
	Last        error
}

func (e *TooManyFailuresError) Error() string {
	return fmt.Sprintf("checkpoint: %d consecutive checkpoint failures exceed the tolerable %d; last: %v; "+
		"if such failures are transient (a timeout under load, a storage hiccup), the job's runtime.WithTolerableCheckpointFailures can tolerate more; "+
		"if every checkpoint fails the same way, fix the cause: tolerating more only delays this failure", e.Consecutive, e.Tolerable, e.Last)
}

func (e *TooManyFailuresError) Unwrap() []error { return []error{ErrTooManyFailures, e.Last} }

// TaskID names one task: a chain of operators for one subtask, known by the
// UID of its head operator.
type TaskID struct {
	UID     string
	Subtask int
}

func (t TaskID) String() string { return fmt.Sprintf("task %s/%d", t.UID, t.Subtask) }
