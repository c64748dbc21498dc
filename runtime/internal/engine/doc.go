// Package engine is the part of splitflow's runtime that moves data and
// control between tasks, under the user's API in package runtime: the
// elements that cross a channel (records in batches, watermarks, idleness,
// checkpoint barriers, end of partition), the bounded channels and the
// writers and input gates on their two ends, each input's watermark valve,
// the mailbox through which everything that must happen on a task's
// goroutine reaches it, a source reader's watermark multiplexer (the
// minimum over its splits' outputs, with idleness), and the state a task
// restores from a checkpoint (each operator's and coordinator's bytes,
// redistributed when the parallelism changed).
//
// Nothing here knows about jobs, operators or state: package runtime builds
// tasks out of these parts. The package is internal so that the engine's
// shape can change without changing anything a user writes.
package engine
