package base

import "github.com/splitflow/splitflow/connector"

// RecordEmitter turns one fetched element E into output records T and
// advances the state SS of the split the element came from.
//
// Emit is called on the task goroutine from within PollNext, once per
// element, in fetch order per split. It is the only code that changes split
// state while reading (the task-goroutine rule of DESIGN.md), which is why
// SnapshotState can convert states to splits without synchronizing with any
// fetcher: after Emit returns, state must describe the position just past
// element, so that a checkpoint taken now resumes with the next element.
//
// out is the split's own output (see connector.ReaderOutput), so timestamps
// and watermarks emitted here are per split. Emit may emit zero, one or
// several records. It must not keep element past the call if the
// SplitReader recycles its batches; see RecordsWithSplitIDs.Recycle. An
// error fails the task.
type RecordEmitter[E, T, SS any] interface {
	// Emit emits element to out and advances state past it. It runs on
	// the task goroutine, inside PollNext.
	Emit(element E, out connector.SourceOutput[T], state *SS) error
}

// RecordEmitterFunc adapts a function to RecordEmitter.
type RecordEmitterFunc[E, T, SS any] func(element E, out connector.SourceOutput[T], state *SS) error

// Emit calls f.
func (f RecordEmitterFunc[E, T, SS]) Emit(element E, out connector.SourceOutput[T], state *SS) error {
	return f(element, out, state)
}
