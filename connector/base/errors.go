package base

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrClosed is returned by a SourceReaderBase or SplitFetcherManager
	// used after Close.
	ErrClosed = errors.New("source reader closed")

	// ErrPauseNotSupported is returned by PauseOrResumeSplits when the
	// SplitReader does not implement PausableSplitReader.
	ErrPauseNotSupported = errors.New("split reader does not support pausing splits")

	// ErrUnknownSplit is wrapped when a batch holds records of a split the
	// reader does not hold, or lists such a split as finished (splits being
	// removed with SourceReaderBase.RemoveSplits excepted). Either way a
	// split is in two places or none (the one-place rule), so reading on
	// would lose or duplicate records.
	ErrUnknownSplit = errors.New("split not assigned to this reader")
)

// FetchError reports the failure of a split fetcher: the SplitReader
// returned an error from Fetch, from HandleSplitsChanges, or from a task run
// on the fetcher. The first FetchError of a reader is returned by every
// later PollNext.
type FetchError struct {
	// FetcherID identifies the fetcher within its manager.
	FetcherID int
	// Op is what the fetcher was doing: "fetch", "add splits", "remove
	// splits", "pause or resume splits" or "run task".
	Op string
	// SplitIDs are the splits assigned to the fetcher when it failed,
	// sorted.
	SplitIDs []string
	// Err is the SplitReader's error.
	Err error
}

// Error says which fetcher failed, doing what, on which splits, and why.
func (e *FetchError) Error() string {
	return fmt.Sprintf("split fetcher %d: %s (splits [%s]): %v",
		e.FetcherID, e.Op, strings.Join(e.SplitIDs, " "), e.Err)
}

// Unwrap returns the SplitReader's error, so errors.Is and errors.As reach
// the client's own error values.
func (e *FetchError) Unwrap() error { return e.Err }
