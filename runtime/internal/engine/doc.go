// Package engine is the part of splitflow's runtime that moves data and
// control between tasks, under the user's API in package runtime: the
// elements that cross a channel (records in batches, watermarks, idleness,
// checkpoint barriers, end of partition), the bounded channels and the
// writers and input gates on their two ends, each input's watermark valve,
// the mailbox through which everything that must happen on a task's
// goroutine reaches it, a source reader's watermark multiplexer (the
// minimum over its splits' outputs, with idleness), and the state a task
// restores from a checkpoint (each operator's and coordinator's bytes,
// redistributed when the parallelism changed), and the operator contract
// (operator.go): what a task drives the operators of its chain through
// (Lifecycle, Output, OpInfo), the optional capabilities it finds on them
// by type assertion (Preparer, Snapshotter, AsyncSnapshotter,
// CheckpointNotified, Committing, OutputCommitter, NewFileBytes), what an
// operator may use of its task (Task), and a task's default action
// (Input, input.go: a source operator's reader polls, or runtime's gate
// input). An operator in a package of its own under runtime/internal
// (runtime/internal/shuffleop, runtime/internal/sinkop,
// runtime/internal/sourceop) implements that contract, since it cannot
// import runtime; OpInfo.Wrap still makes runtime's OperatorError, through
// the attribution runtime installs (SetOperatorErrors).
//
// Nothing here knows about jobs or state: package runtime builds tasks out
// of these parts. The package is internal so that the engine's shape can
// change without changing anything a user writes.
package engine
