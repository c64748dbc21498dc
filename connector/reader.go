package connector

import (
	"context"
	"math"
	"reflect"
)

// NoTimestamp marks a record or write without an event timestamp.
const NoTimestamp int64 = math.MinInt64

// InputStatus is what SourceReader.PollNext reports about the reader after a
// call.
type InputStatus int

const (
	// MoreAvailable means the reader can emit more right away: the engine
	// may call PollNext again without waiting.
	MoreAvailable InputStatus = iota + 1
	// NothingAvailable means the reader has nothing to emit now. The engine
	// waits on Available before polling again, serving its mailbox
	// (checkpoints, timers) meanwhile.
	NothingAvailable
	// EndOfInput means the reader has emitted everything it ever will. Only
	// a reader that has been told there are no more splits can return it.
	EndOfInput
)

// String returns the name used in logs and errors.
func (s InputStatus) String() string {
	switch s {
	case MoreAvailable:
		return "more-available"
	case NothingAvailable:
		return "nothing-available"
	case EndOfInput:
		return "end-of-input"
	default:
		return "unknown-input-status"
	}
}

// Watermark asserts that no more records with a timestamp at or before
// Timestamp (milliseconds since the Unix epoch) are expected.
type Watermark struct {
	Timestamp int64
}

// SourceReader reads the splits assigned to one subtask. It runs on that
// subtask's task goroutine and must never block it: reading from an
// external system happens on goroutines the reader owns (see package
// connector/base), and PollNext only hands over what is already there.
//
// Every method is called on the task goroutine, never concurrently with
// another method of the same reader. Lifecycle: CreateReader, then AddSplits
// with the splits restored from the subtask's checkpoint (if any), then
// Start, then any interleaving of the other methods, then Close exactly once.
type SourceReader[T any, S Split] interface {
	// Start is called once, after the restored splits were added and before
	// the first PollNext. A pull-mode reader with no splits asks for its
	// first one here.
	Start() error

	// PollNext emits what is available to out and reports whether there is
	// more. It must not block. An implementation may emit one record or
	// several per call; emitting a bounded amount keeps checkpoints from
	// waiting behind a long batch. An error fails the task.
	PollNext(out ReaderOutput[T]) (InputStatus, error)

	// Available returns a channel that becomes ready to receive when
	// PollNext is worth calling again. The engine asks for it after
	// PollNext returned NothingAvailable and waits for one receive.
	//
	// Readiness may be spurious (the next PollNext may again report
	// NothingAvailable), but it must never be missed: if data arrives, an
	// error occurs or the reader reaches the end after the last PollNext,
	// the channel must become ready. The channel may be closed or deliver a
	// value; the caller must ask for it again after every wait rather than
	// keep it.
	Available() <-chan struct{}

	// SnapshotState returns the splits the reader owns for checkpoint
	// checkpointID, each carrying the position from which reading resumes:
	// just after the last record PollNext emitted. Records that were
	// fetched but not emitted are not in the snapshot; after a restore they
	// are read again. The returned splits are the caller's.
	SnapshotState(checkpointID int64) ([]S, error)

	// AddSplits gives the reader more splits to read, from the enumerator
	// or from a restored checkpoint. It may be called before Start.
	AddSplits(splits []S) error

	// NotifyNoMoreSplits tells the reader that AddSplits will not be called
	// again. A bounded reader returns EndOfInput once it has finished its
	// splits after this call, never before.
	NotifyNoMoreSplits()

	// NotifyCheckpointComplete tells the reader that checkpoint
	// checkpointID is complete and that the job's sinks committed its
	// output, for instance to commit consumed offsets to an external
	// system: a position recorded then never runs ahead of the committed
	// output. It comes after every sink subtask of the reader's failover
	// region (the whole job, unless it is made of independent pipelines)
	// has settled its commits of checkpointID; a commit still retrying
	// delays it, a failed one means it never comes for that checkpoint.
	// Calls come in increasing order, and a checkpoint may be skipped
	// when a later one is committed first: the later one subsumes it.
	NotifyCheckpointComplete(checkpointID int64) error

	// HandleSourceEvent receives an event the enumerator sent with
	// SplitEnumeratorContext.SendEventToSourceReader.
	HandleSourceEvent(event SourceEvent) error

	// PauseOrResumeSplits stops reading from the splits in pause and starts
	// again on those in resume, by split ID; the engine uses it to align
	// watermarks across splits. Unknown IDs are ignored. A reader that
	// cannot pause returns an error saying so.
	PauseOrResumeSplits(pause, resume []string) error

	// Close stops every goroutine the reader started and releases its
	// resources. It is called exactly once, also when Start was not, and
	// no method is called afterwards.
	Close() error
}

// LagReporter is an optional capability of a SourceReader: how far it is
// behind its input. The engine sums it over the readers of a job's
// sources into the job's lag gauge (splitflow_source_lag_records), the
// figure an autoscaler scales on; the readers of a distributed job's
// shuffle are left out, their records being the job's own.
type LagReporter interface {
	// LagRecords returns how many records of the splits the reader holds
	// lie past what it has emitted, as of the newest ends it knows; a
	// split whose end is not known yet counts 0. It is called from the
	// goroutine of a metrics scrape, concurrently with the task
	// goroutine's calls and possibly after Close, so it must be safe for
	// concurrent use and must not block: a reader that asks its system
	// for the ends does so in the background, for a later call.
	LagRecords() int64
}

// SourceReaderContext is a reader's view of the engine.
//
// Its methods are called on the reader's task goroutine.
type SourceReaderContext interface {
	// SubtaskIndex is the reader's subtask, in [0, Parallelism()).
	SubtaskIndex() int

	// Parallelism is the number of readers of the source.
	Parallelism() int

	// SendSplitRequest asks the enumerator for a split. It returns at once;
	// the answer, if any, arrives later as AddSplits or NotifyNoMoreSplits.
	SendSplitRequest()

	// SendSourceEvent delivers event to the enumerator's HandleSourceEvent.
	// It returns at once.
	SendSourceEvent(event SourceEvent)

	// Context is cancelled when the reader's task is cancelled (a
	// failover, a hard stop) and once the task has ended; a graceful stop
	// does not cancel it. Blocking work the reader starts (a fetch, an
	// offset lookup) should take it. It may be kept for the reader's
	// lifetime.
	Context() context.Context
}

// SideOutputs is what a SourceReaderContext offers when the engine lets a
// source emit side outputs: streams beside its records, which the job
// declares on the source's stream (runtime: DeclareSideOutputs and
// SideOutput), such as the records a reader could not deserialize. A
// reader that has a side output to emit asserts its context to
// SideOutputs in CreateReader.
type SideOutputs interface {
	// SideOutput returns the function that emits a record of type typ with
	// an event timestamp (or NoTimestamp) to the side output called id,
	// or an error saying why there is none: the source's stream does not
	// declare id, or declares it with another type. The function is called
	// on the task goroutine from within SourceReader.PollNext, like the
	// methods of SourceOutput, and like them reports no error: a failure
	// downstream fails the task when PollNext returns. The records go out
	// between the same checkpoint barriers as the reader's own.
	SideOutput(id string, typ reflect.Type) (func(record any, timestamp int64), error)
}

// SourceOutput receives the records of a reader, or of one of its splits.
//
// Its methods are called on the task goroutine from within
// SourceReader.PollNext. They never block and report no errors: a failure
// downstream is recorded by the engine and fails the task when PollNext
// returns.
type SourceOutput[T any] interface {
	// Collect emits a record without an event timestamp, or with the one
	// the engine's timestamp assigner gives it.
	Collect(record T)

	// CollectWithTimestamp emits a record with an event timestamp in
	// milliseconds since the Unix epoch.
	CollectWithTimestamp(record T, timestamp int64)

	// EmitWatermark emits a watermark generated by the source itself. On a
	// split output it is that split's watermark; the engine combines the
	// splits' watermarks into the reader's.
	EmitWatermark(wm Watermark)

	// MarkIdle declares that this output will not emit records for a while,
	// so it should not hold back the combined watermark.
	MarkIdle()

	// MarkActive reverses MarkIdle. Emitting a record does so as well.
	MarkActive()
}

// ReaderOutput is the reader-wide output passed to PollNext. Besides emitting
// directly, it hands out one output per split, so that watermarks are
// generated per split and combined (the minimum over active splits) instead
// of being confused by interleaved splits.
type ReaderOutput[T any] interface {
	SourceOutput[T]

	// CreateOutputForSplit returns the output for splitID, creating it on
	// the first call. Records emitted there count towards that split's
	// watermark. Calling it again for the same ID returns the same output.
	CreateOutputForSplit(splitID string) SourceOutput[T]

	// ReleaseOutputForSplit discards the output of a finished split so it no
	// longer holds back the combined watermark. Unknown IDs are ignored.
	ReleaseOutputForSplit(splitID string)
}
