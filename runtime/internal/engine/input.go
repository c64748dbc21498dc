package engine

import "time"

// InputStatus is what one step of a task's default action reports.
type InputStatus uint8

const (
	// InputMore: step again right away (after the mailbox).
	InputMore InputStatus = iota
	// InputNothing: wait for the input's availability or a mail.
	InputNothing
	// InputEnd: all input has been processed.
	InputEnd
)

// Input is a task's default action: poll the source reader (a source
// operator), or process one batch from the input gate (package runtime's
// gate input). The task calls it on its goroutine, between mails.
type Input interface {
	Step() (InputStatus, error)
	// Ready returns the channel to wait on after Step reported
	// InputNothing. It is asked for again after every wait.
	Ready() <-chan struct{}
	// Stop asks the input to end gracefully at its next step: a source
	// stops reading; a gate input ignores it (it ends when its upstream
	// tasks have ended).
	Stop()
	// Stopped reports, once the input ended, that it ended because of a
	// stop (its own, or one upstream) rather than at the end of the
	// input: event time did not reach its end, and the task's end of
	// partition says so, so that downstream moves no watermark for it.
	Stopped() bool
}

// SourceSettings are what a source operator, a task's input, follows of
// its job's configuration and of the slot its task runs in
// (Task.SourceSettings).
type SourceSettings struct {
	// WatermarkInterval is how often a reader's watermark generators are
	// asked for a periodic watermark (OnPeriodicEmit); 0: never.
	WatermarkInterval time.Duration
	// RescaledToEnumerator: when the job restores with another
	// parallelism, the readers' checkpointed splits go to the split
	// enumerator (the source coordinator gives them back to it), not to
	// the readers.
	RescaledToEnumerator bool
	// ClaimEpoch is the epoch of the process's claim on the slot the task
	// runs in (connector.ClaimInfo); 0 outside a distributed job.
	ClaimEpoch int64
}
