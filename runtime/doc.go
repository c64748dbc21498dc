// Package runtime is the engine that runs splitflow jobs in one process: it
// makes data flow from connector sources through operators to connector
// sinks, fast and with bounded memory. It is modelled on Apache Flink's
// streaming runtime and knows connectors only through package connector.
//
// # Building and running a job
//
// An Environment collects a job; generic functions add operators to it (Go
// methods cannot take type parameters, so it is Map(ds, fn), not ds.Map(fn)):
//
//	env := runtime.NewEnvironment(runtime.WithParallelism(4))
//	lines := runtime.FromSource(env, src, "lines", runtime.NoWatermarks[string]())
//	words := runtime.FlatMap(lines, splitWords)
//	counts := runtime.ProcessPerSubtask(runtime.KeyBy(words, byWord), newCounter).UID("counts")
//	runtime.SinkTo(counts, sink)
//	err := env.Execute(ctx, "wordcount")
//
// Execute runs until every bounded source has ended and its records have
// reached the sinks (it returns nil), or until ctx is cancelled, which
// drains the job gracefully: sources stop at their next poll, in-flight
// records flow to the sinks, sinks are flushed with Flush(true) and closed,
// and Execute returns nil (ErrDrainTimeout if draining outlasts
// WithDrainTimeout). The first operator failure stops everything and is
// returned as an *OperatorError naming the operator and subtask. Invalid
// graphs are refused before anything runs, with ErrInvalidGraph.
//
// # Files
//
//   - environment.go: options (one validation point, config.validate),
//     Environment, Execute and the execution that owns every goroutine.
//   - datastream.go: DataStream, KeyedStream and the functions that build
//     the stream graph (FromSource, Map, FlatMap, Filter, KeyBy, Process,
//     Union, Rebalance, Broadcast, Forward, SinkTo).
//   - graph.go: the stream graph, pruning, validation, chaining
//     (isChainable) and instantiation of tasks, gates and writers.
//   - task.go: the task, one goroutine per subtask of a chain, with its
//     mailbox loop; the gate input that feeds a chain from other tasks.
//   - mailbox.go: the task mailbox (urgent and default mails).
//   - network.go: input gates with bounded per-producer channels, record
//     writers that batch and partition (forward, rebalance, hash,
//     broadcast).
//   - element.go: records, watermarks, stream status, end of partition and
//     CheckpointBarrier as they travel in batches.
//   - keygroup.go: stable key hashing (murmur3) and key groups.
//   - valve.go: the watermark valve over a task's input channels.
//   - watermark.go: watermark strategies and generators, and the mux that
//     combines a reader's per-split watermarks.
//   - source.go: the source operator driving a SourceReader, and its
//     ReaderOutput with per-split outputs.
//   - coordinator.go: the source coordinator running the SplitEnumerator,
//     and the operator-coordinator seam for checkpoints.
//   - operators.go, process.go: map, flatMap, filter, sink, and the keyed
//     process operator with ValueState, MapState and timers.
//   - errors.go: OperatorError and the sentinels.
//
// # How data flows
//
// Operators connected by a forward edge, with equal parallelism, where the
// consumer has no other input and neither side refuses (DisableChaining,
// StartNewChain, WithChaining(false)), are chained: they run in one task
// and call each other directly, with no copy and no allocation. Every other
// edge crosses tasks: the producer's record writer appends records to a
// buffer per target subtask and hands the buffer to the target's input
// gate when it is full (WithBufferSize), when the flush timeout expires
// (WithFlushTimeout) and before any event (watermark, status, barrier, end
// of partition) is appended, so events stay in order with records. A hash
// edge routes a key to murmur3(key bytes) mod max-parallelism (its key
// group) and the key group to keyGroup*parallelism/maxParallelism, as
// Flink's KeyGroupRangeAssignment does; the hash is the same in every
// process and release. Consumed buffers go back to their producer for
// reuse.
//
// # Tasks and the mailbox
//
// Each subtask of a chain is one goroutine, the only one that touches the
// chain's operators, their keyed state, the source reader and the sink
// writer (invariant 6 of DESIGN.md). Other goroutines reach it through its
// mailbox: the source coordinator's split assignments and events, timers,
// stop requests, and next the checkpoint triggers (urgent mails). The loop
// runs mails first, then one step of the default action: one PollNext of
// the source reader, or one batch from the input gate. When the output is
// backpressured (a target channel is full) or no input is available, the
// default action is suspended and the task waits on its mailbox or on the
// availability it lacks, so a mail is never stuck behind backpressure.
//
// # Bounded memory (invariant 7)
//
// An input channel queues at most WithBuffersPerChannel buffers. A writer
// whose target channel is full keeps the buffer pending and its task stops
// polling its source or reading its input until the channel has room, so a
// slow sink slows the sources: records in flight between two tasks are
// bounded by channels x (buffers per channel + 2) x buffer size plus what
// one step emits, whatever the input size. A source reader that is not
// polled stops fetching once its own queue is full (connector/base), and
// the lag stays in the external system.
//
// # Event time
//
// Sources assign timestamps and generate watermarks per split (each split
// output has its own WatermarkGenerator); a reader's watermark is the
// minimum over its active splits. Idle splits (WithIdleness, MarkIdle) do
// not hold time back; a reader with no active split is idle. A task with
// several input channels takes the minimum over active, aligned channels
// (valve.go). Event-time timers fire when the watermark passes them; a
// bounded source emits MaxWatermark when it ends, which fires the rest. A
// graceful cancel does not emit it: the job did not reach the end of event
// time.
//
// # Sources
//
// Each source has a coordinator that runs its SplitEnumerator on one
// goroutine of its own (invariant 2): enumerator methods and CallAsync
// continuations run there one at a time, and readers' registrations, split
// requests and events are queued to it. Assignments and events go into the
// reader task's mailbox and run there between two polls.
//
// # Not built yet
//
// Checkpoints and failover are the next piece of work, and the engine
// leaves seams for them rather than imitations: CheckpointBarrier is
// defined and carried through channels (a task forwards a barrier once it
// arrived on every open channel, but does not yet block a channel while it
// waits, nor snapshot state); operatorCoordinator has snapshot and
// notify-complete hooks that nothing calls yet; assignments go straight to
// the reader without a SplitAssignmentTracker or a gated gateway
// (invariants 3 and 5); keyed state lives in maps per state name, to be
// snapshotted by key group; sinks get Flush(true) at the end but no
// PrepareCommit; there is no restart strategy. A failure fails the job.
package runtime
