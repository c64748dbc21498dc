package connector

import (
	"context"
	"time"
)

// SplitEnumerator discovers a source's splits and decides which reader reads
// each one. There is one per source per job, owned by the engine's source
// coordinator.
//
// Every method is called on the coordinator goroutine, one at a time
// (the single-threaded enumerator of DESIGN.md), so an enumerator needs no
// locks. Work that blocks (listing files, asking a broker for partitions)
// belongs in SplitEnumeratorContext.CallAsync, never in these methods,
// because while one of them runs the coordinator cannot serve readers or
// checkpoints.
//
// A non-nil error returned by any method fails the coordinator, which fails
// the job over globally.
type SplitEnumerator[S Split, C any] interface {
	// Start begins discovery, typically by scheduling periodic work with
	// CallAsyncPeriodically. It is called once, after creation or restore
	// and before any other method except Close.
	Start() error

	// HandleSplitRequest answers a reader that asked for work with
	// SourceReaderContext.SendSplitRequest: assign it a split, tell it
	// there are no more with SignalNoMoreSplits, or remember the request
	// and answer later. Pull-mode enumerators live here; push-mode ones
	// may ignore it.
	HandleSplitRequest(subtask int) error

	// AddSplitsBack returns splits that were assigned to subtask after that
	// subtask's last successful checkpoint, when the subtask fails and
	// restarts from it. They are in no reader's checkpoint, so unless the
	// enumerator takes them back (and assigns them again) they are lost.
	AddSplitsBack(splits []S, subtask int) error

	// AddReader tells the enumerator that subtask's reader is registered
	// and can be sent splits. It is called again for the same subtask after
	// that subtask restarts.
	AddReader(subtask int) error

	// SnapshotState returns the enumerator's state for checkpoint
	// checkpointID: the splits it still holds and whatever discovery
	// progress it needs to resume. The engine calls it before any reader
	// sees the barrier of that checkpoint (coordinators before barriers). The
	// returned value is serialized right away; the enumerator may change its
	// own state afterwards, but must not mutate memory the value shares with
	// it.
	SnapshotState(checkpointID int64) (C, error)

	// NotifyCheckpointComplete tells the enumerator that checkpoint
	// checkpointID is complete everywhere. Most enumerators ignore it.
	NotifyCheckpointComplete(checkpointID int64) error

	// HandleSourceEvent receives an event a reader sent with
	// SourceReaderContext.SendSourceEvent.
	HandleSourceEvent(subtask int, event SourceEvent) error

	// Close releases the enumerator's resources. It may be called without
	// Start having been called, and is called exactly once. Asynchronous
	// work still running when Close is called has its context cancelled and
	// its continuation dropped.
	Close() error
}

// AsyncWork is work a SplitEnumerator hands to the coordinator to run off the
// coordinator goroutine. It receives a context that is cancelled when the
// enumerator closes, and returns a continuation that the coordinator runs
// back on its own goroutine, where it may touch the enumerator's state.
//
// The continuation closes over the work's typed result, which keeps the
// handoff type-safe without a generic method:
//
//	ctx.CallAsync(func(c context.Context) func() error {
//		parts, err := listPartitions(c) // off the coordinator goroutine
//		return func() error {             // on the coordinator goroutine
//			return e.handleDiscovery(parts, err)
//		}
//	})
//
// A nil continuation means there is nothing to do afterwards. An error
// returned by the continuation fails the coordinator like an error returned
// by an enumerator method.
type AsyncWork func(ctx context.Context) (then func() error)

// SplitEnumeratorContext is the enumerator's view of the engine: who the
// readers are, and how to send them splits and events.
//
// Methods are meant to be called from the coordinator goroutine (from inside
// an enumerator method or a continuation). Calling them from another
// goroutine is a bug, except where a method says otherwise.
type SplitEnumeratorContext[S Split] interface {
	// CurrentParallelism is the number of readers (subtasks) of the source.
	CurrentParallelism() int

	// RegisteredReaders returns the readers registered so far, by subtask.
	// The map is a copy the caller may keep.
	RegisteredReaders() map[int]ReaderInfo

	// AssignSplits assigns splits to readers. The assignment is recorded by
	// the coordinator (the booking rule) before it is sent, so a split
	// assigned after a reader's last checkpoint comes back through
	// AddSplitsBack if that reader fails. It returns an error, assigning
	// nothing, if a target subtask has no registered reader.
	AssignSplits(assignment SplitsAssignment[S]) error

	// AssignSplit is AssignSplits for a single split.
	AssignSplit(split S, subtask int) error

	// SignalNoMoreSplits tells subtask's reader that it will not be
	// assigned any more splits; a bounded reader can then finish once it has
	// read what it holds. It fails like AssignSplits for an unregistered
	// subtask.
	SignalNoMoreSplits(subtask int) error

	// SendEventToSourceReader delivers event to subtask's reader, where it
	// arrives in SourceReader.HandleSourceEvent, ordered with the split
	// assignments sent before and after it.
	SendEventToSourceReader(subtask int, event SourceEvent) error

	// CallAsync runs work on a goroutine other than the coordinator's and
	// then runs its continuation on the coordinator goroutine. It returns
	// immediately.
	CallAsync(work AsyncWork)

	// CallAsyncPeriodically runs work like CallAsync, first after
	// initialDelay and then every period, until the enumerator closes. Runs
	// never overlap: the next run starts no earlier than the previous
	// continuation has finished. A period <= 0 runs work once.
	CallAsyncPeriodically(work AsyncWork, initialDelay, period time.Duration)

	// RunInCoordinatorThread queues fn to run on the coordinator goroutine
	// after the current method returns. It is the one method that may be
	// called from any goroutine, which makes it the way for callbacks from
	// a client library to reach the enumerator. An error returned by fn
	// fails the coordinator.
	RunInCoordinatorThread(fn func() error)

	// Context is cancelled when the enumerator's coordinator stops (the
	// job ends, fails or restarts). Blocking work, such as the
	// continuations' work run by CallAsync, should take it. It may be
	// kept for the enumerator's lifetime.
	Context() context.Context
}
