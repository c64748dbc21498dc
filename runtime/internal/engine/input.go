package engine

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
