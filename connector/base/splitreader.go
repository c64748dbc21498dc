package base

import (
	"context"

	"github.com/splitflow/splitflow/connector"
)

// SplitsChange tells a SplitReader which splits to start or stop reading.
// One change carries either additions or removals.
type SplitsChange[S connector.Split] struct {
	// Added are splits to start reading, from the position each carries.
	Added []S
	// Removed are splits to stop reading. Records already returned for them
	// are dropped by the reader. After the change the SplitReader must not
	// return records of them nor list them in FinishedSplits: the fetcher
	// reports their end itself.
	Removed []S
}

// SplitReader reads records of its assigned splits from an external system
// with a blocking client. It is the one thing a connector must write to get
// fetcher goroutines, the bounded queue, backpressure and checkpointing from
// SourceReaderBase.
//
// A SplitReader is owned by one splitFetcher. Every method except WakeUp is
// called on that fetcher's goroutine, one at a time, so the reader's own
// state needs no lock unless WakeUp touches it.
type SplitReader[E any, S connector.Split] interface {
	// Fetch blocks until it has records or finished splits to report, and
	// returns them as one batch. It is called repeatedly while the reader
	// has splits; a split is dropped from the reader's assignment once a
	// batch listing it in FinishedSplits has been accepted by the queue.
	//
	// Fetch must return promptly after WakeUp, or when ctx is done (the
	// fetcher is shutting down); returning a nil or empty batch then is
	// fine. A non-nil error fails the fetcher and, through PollNext, the
	// task; it is reported together with the reader's assigned splits.
	//
	// The batch belongs to the task goroutine once Fetch returns it. To
	// allocate nothing in steady state, draw batches from a
	// RecordsBySplitsPool.
	Fetch(ctx context.Context) (RecordsWithSplitIDs[E], error)

	// HandleSplitsChanges starts or stops reading splits. It must not block:
	// a reader that needs I/O to start a split does it in the next Fetch.
	// It is called between Fetch calls, never during one.
	HandleSplitsChanges(change SplitsChange[S]) error

	// WakeUp makes a blocked Fetch return promptly. It is called from other
	// goroutines (the task goroutine, or a closing manager), possibly while
	// no Fetch is running; then the next Fetch must return promptly
	// instead. A Fetch that returns early because of a stale wake-up is
	// harmless: the fetcher just calls it again.
	//
	// WakeUp must not block: it runs on the task goroutine, inside
	// AddSplits, PauseOrResumeSplits and the like, which must not wait for
	// the external system. Set a flag or cancel a context, and return.
	WakeUp()

	// Close releases the reader's resources. It is called once, on the
	// fetcher goroutine, when the fetcher exits.
	Close() error
}

// PausableSplitReader is the optional capability of a SplitReader that can
// stop returning records of some splits while keeping them assigned, for
// watermark alignment. SplitFetcherManager.PauseOrResumeSplits fails with
// ErrPauseNotSupported for readers without it.
type PausableSplitReader[S connector.Split] interface {
	// PauseOrResumeSplits stops fetching from pause and resumes resume. It
	// is called on the fetcher goroutine between Fetch calls and must not
	// block.
	PauseOrResumeSplits(pause, resume []S) error
}
