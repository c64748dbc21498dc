// Package runtime is the engine that runs splitflow jobs in one process: it
// makes data flow from connector sources through operators to connector
// sinks, fast and with bounded memory. It is modelled on Apache Flink's
// streaming runtime and knows connectors only through package connector.
//
// # Building a job
//
// An Environment collects a job; generic functions add operators to it (Go
// methods cannot take type parameters, so it is Map(ds, fn), not ds.Map(fn)):
//
//	env := runtime.NewEnvironment(runtime.WithParallelism(4))
//	lines := runtime.FromSource(env, src, "lines")
//	words := runtime.FlatMap(lines, splitWords)
//	counts := runtime.KeyedProcess(runtime.KeyBy(words, byWord), countWord).UID("counts")
//	runtime.SinkTo(counts, sink)
//	err := env.Execute(ctx, "wordcount")
//
// The runnable examples (FromSource, Count, Reduce, Aggregate, KeyedProcess,
// Window, SideOutput, KeyedCoProcess, IntervalJoin, WindowJoin,
// LeftTableJoin, SinkTo, Environment.Execute, WithHTTP,
// Environment.StopWithSavepoint, Environment.TriggerSavepoint) build
// whole jobs; docs/datastream.md in the
// repository walks through the API.
//
// # Side outputs
//
// A function with a context (KeyedProcess, KeyedProcessPerSubtask, Process)
// may emit records of another type beside its main output: to a side
// output named by an OutputTag, which its operator declares, and which
// SideOutput turns into a stream of its own:
//
//	var late = runtime.NewOutputTag[Click]("late")
//
//	clicks := runtime.KeyedProcess(keyed, func(ctx *runtime.KeyedContext[string, Click], c Click) error {
//		if c.TS < ctx.CurrentWatermark() {
//			runtime.Output(ctx, late, c)
//			return nil
//		}
//		ctx.Collect(c)
//		return nil
//	}).DeclareSideOutputs(late)
//	runtime.SinkTo(runtime.SideOutput(clicks, late), lateSink)
//
// The side stream runs in its operator's task, with its parallelism; it
// carries the operator's watermarks, stream status and checkpoint
// barriers, so it is exactly-once like the main output. Misuse is
// refused when the job is built: a tag id with two types, an id declared
// twice, side outputs declared on an operator without a context, a
// SideOutput of a tag its operator does not declare.
//
// # Two inputs
//
// Connect pairs two keyed streams of one key type; KeyedCoProcess runs a
// function per input with the key's state and timers shared by both
// (Flink's KeyedCoProcessFunction), KeyedCoProcessPerSubtask a
// KeyedCoProcessFunction made per subtask:
//
//	status := runtime.KeyedCoProcess(runtime.Connect(orders, payments),
//		func(ctx *runtime.KeyedContext[int64, string], o Order) error { ... },
//		func(ctx *runtime.KeyedContext[int64, string], p Payment) error { ... },
//		runtime.OnTimer(onDeadline))
//
// IntervalJoin(orders, payments, lower, upper, fn) emits fn(o, p) for
// every pair of one key with p's timestamp in [o's + lower, o's + upper]
// (event time, bounds inclusive), at the larger timestamp, keeping each
// side in keyed state only until the watermark passes what can still
// match it; records at or behind the watermark are dropped and counted.
// WindowJoin(orders, payments, assigner, fn) emits fn(o, p) for every
// pair of one key in one window when the window fires. Each input's
// records are tagged by a map chained to their producer and both reach
// one keyed operator hash-partitioned by key, so the operator aligns
// barriers over both inputs, takes the minimum of their watermarks, and
// checkpoints, restores and rescales like any keyed operator. Both inputs
// must be keyed with KeyBy, or both with KeyByHashed and one hash.
//
// TableJoin(stream, table, fn) enriches a keyed stream with a table kept
// from a changelog of TableUpdates (a compacted topic read from the
// beginning, tombstones as deletions: the Kafka source's
// kafka.TableUpdates deserializer makes them): a record at time t joins its
// key's value as of t and is emitted once the watermark reaches t, so
// the result does not depend on which input is read first;
// LeftTableJoin also emits the records without a value. A quiet table
// source needs WithIdleness, or it holds the watermark back.
//
// # Running a job
//
// Execute runs until every bounded source has ended and its records have
// reached the sinks (it returns nil), or until ctx is cancelled, which
// drains the job gracefully: sources stop at their next poll, in-flight
// records flow to the sinks, sinks are flushed with Flush(true) and closed,
// and Execute returns nil (ErrDrainTimeout if draining outlasts
// WithDrainTimeout). A job stopped while it runs (StopWithSavepoint, or
// POST /api/v1/job/stop of the status server) drains the same way, and
// Execute returns ErrStopped, so that a stop is told from the end of the
// input; a program that stops its own job treats it as success. A
// failure restarts the job (or only the failed pipeline) from its latest
// checkpoint as the restart strategy allows; otherwise it stops everything
// and is returned as an *OperatorError naming the operator and subtask. Invalid graphs are refused before
// anything runs, with ErrInvalidGraph.
//
// Exactly-once output takes checkpoints and a sink configured exactly-once
// (a Kafka sink with kafka.WithExactlyOnce, a file sink by default); SinkTo
// runs it with its committer:
//
//	env := runtime.NewEnvironment(runtime.WithCheckpointInterval(time.Second),
//		runtime.WithCheckpointDir("/var/lib/job"))
//	...
//	runtime.SinkTo(counts, kafkaSink)
//
// # Rolling aggregations
//
// Count, Reduce and Aggregate keep a running value per key in keyed state
// and emit it after every record, or, with EmitLatest, each changed key's
// latest value once per checkpoint: before the barrier leaves the
// operator (the operator's pre-barrier step, as a sink writer flushes
// there), so the values belong to the checkpoint whose state holds them,
// and at the end of input; MaxPendingKeys (default 100_000) and
// MaxPendingTime (default none) emit earlier. The pending set holds keys
// only, never checkpointed: it is empty whenever state is taken.
//
// # Keyed state
//
// A keyed function's state is declared by a descriptor of package
// runtime/state, in a package variable, and used with the function's
// *KeyedContext:
//
//	var count = state.NewValueState[int64]("count")
//
//	func countWord(ctx *runtime.KeyedContext[string, wordCount], w string) error {
//		n, _, err := count.Get(ctx)
//		ctx.Collect(wordCount{w, n + 1})
//		return errors.Join(err, count.Set(ctx, n+1))
//	}
//
// KeyedProcess runs a plain function on a keyed stream (OnTimer adds the
// function timers fire); KeyedProcessPerSubtask runs a
// KeyedProcessFunction made per subtask, for a function with fields of
// its own (a descriptor's Handle, taken in Open). Package state says how
// state is encoded, evolves and expires; WithStateBackend says where it
// lives.
//
// # State
//
//   - Source readers: their splits, as operator list state serialized with
//     the source's versioned SplitSerializer, one blob per subtask. When
//     the parallelism changed, every checkpointed split is dealt out
//     round-robin over the new subtasks, or handed to the enumerator with
//     WithRescaledSplitsToEnumerator. Splits handed to a reader are
//     copies (through the serializer), as if they had crossed a network.
//   - Enumerators: their state, with the source's versioned serializer.
//   - Keyed process operators: ValueState, MapState and pending
//     event-time and processing-time timers, by key group. Keys and
//     values are encoded by their type: strings, byte slices, integers of
//     every width, floats and bools, and named types over them, have a
//     compact binary encoding of their own; other types, and a basic type
//     that marshals itself, go through encoding/gob, unless a descriptor
//     gives a state.Serde (JSON, or the job's own, recorded by name). The layout is
//     versioned: snapshots written before the built-in encodings (all
//     gob) restore as they were, and those written before timers were
//     checkpointed restore with none; a state whose type changed to one
//     encoded otherwise fails the restore naming the state and both
//     encodings. Key, value and map types are checked when a state is
//     described (state.NewValueState and the others panic), the
//     key type when a state is first used, and when the first timer is
//     registered: a type gob cannot encode, or would encode only in part
//     (an unexported, func or chan field at any depth, unless the type
//     marshals itself), fails the job at once with a *state.TypeError. Restored by
//     operator UID into whichever subtask owns each key group now: a
//     timer moves with its key. A restored event-time timer fires when the
//     watermark passes it; a restored processing-time timer whose time
//     passed while the job was down fires as soon as its subtask runs.
//   - Two-phase sinks: the committables not yet committed, and the
//     writer's state of a connector.StatefulTwoPhaseSink.
//
// Every blob is stored under its operator's UID, so UIDs must be stable
// across versions of a job. An operator without .UID gets its name and its
// position among operators of the same name ("KeyedProcess#1"), which
// survives operators added elsewhere but not a rename; Execute logs a
// warning for every stateful operator without an explicit UID. (Earlier
// versions numbered operators in the order they were added, "3-KeyedProcess";
// their checkpoints restore only into operators given those UIDs, and the
// refusal says so.) The checkpoint metadata records the job's fingerprint:
// for each stateful operator its UID, kind and state types, and for keyed
// operators the max parallelism (graph.go). Before restoring, Execute
// refuses (ErrIncompatibleCheckpoint, naming the checkpoint, its directory
// and the operators) when
//   - a UID with state in the checkpoint now names another kind of
//     operator or another state type;
//   - keyed state was written with another max parallelism (its key
//     groups would land on subtasks that no longer receive their keys). A
//     checkpoint of an earlier version, which did not record it, restores
//     with the job's max parallelism and a logged warning, unless its key
//     groups prove another;
//   - state in the checkpoint is claimed by no operator of the job (its
//     UID is gone or changed): restoring would drop it while the sources
//     resume. WithAllowNonRestoredState drops it instead, with a warning.
//
// Another parallelism, added operators and changes to stateless operators
// restore, as in Flink.
//
// # Event time
//
// Sources assign timestamps and generate watermarks per split (each split
// output has its own watermark.Generator); a reader's watermark is the
// minimum over its active splits. Idle splits (WithIdleness, MarkIdle) do
// not hold time back; a reader with no active split is idle and keeps its
// watermark (it does not jump to its fastest split's, whose lead would make
// a lagging split's records late when it comes back). The idleness
// timeout runs on the source task's activity clock, which stands still
// while the task's output is full: a backpressured source is not idle. A task with
// several input channels takes the minimum over active, aligned channels
// (valve.go). Event-time timers fire when the watermark passes them, in
// timestamp order, and the watermark goes downstream after their output
// (with a stream status that arrived meanwhile after it); a watermark that
// does not advance an operator's is ignored, so watermarks never go back.
// A deleted timer leaves the timer heap at once. A bounded source emits
// maxWatermark when it ends, which fires the rest, and the timers those
// register; a timer registered by one of the latter is dropped (logged), so
// that a timer registering itself again cannot keep the input from ending.
// A graceful cancel does
// not emit it, and moves no watermark at all: the job did not reach the
// end of event time. A stopped source's end of partition says it was
// stopped, and a channel that ends so keeps holding the valve's minimum
// where it stood (so channels at 100 and 500 stay at 100 when the one at
// 100 stops first); a task whose input ended by a stop passes the same
// end downstream. A source whose
// input ended or that was stopped stops its periodic-watermark timer, and
// mails queued before (a periodic emit, split assignments, no-more-splits,
// source events) are no-ops: nothing follows maxWatermark or the end of
// the partition.
//
// # Checkpoints (coordinators before barriers, the gate, atomic checkpoints)
//
// With WithCheckpointInterval > 0 the master triggers checkpoints through
// the deterministic core of package checkpoint (interval, timeout, min
// pause, one at a time, tolerable failures) and performs its actions in
// order. For checkpoint N: every source coordinator snapshots its
// enumerator on the enumerator's goroutine, files its assignments under N
// in the split assignment tracker and closes its gate to every subtask; the
// master waits until every event sent before the close has run on its
// subtask; only then is barrier N put into each source task's mailbox as
// an urgent mail (coordinators before barriers). A source task snapshots its
// reader's splits, reopens its gate (held events then run after the snapshot:
// the gate), snapshots the rest of its chain, forwards the barrier behind the
// records before it and acknowledges with its state. Keyed state is
// snapshotted asynchronously: at the barrier the task only freezes it (a
// pause that follows the number of key groups and timers, not of keys),
// the barrier goes on, an encoder goroutine encodes the frozen state while
// the task keeps processing (a write to a frozen part copies that part
// first: one slot of a key group, a sixteenth of it), and the
// acknowledgement is sent once the encoder is done; a task that ends
// meanwhile stops its encoder and waits for it. A task with several
// input channels aligns: a channel that delivered barrier N is blocked until
// N arrived on every open channel; a channel that ends meanwhile counts as
// aligned, so its end of partition can complete the alignment. A task whose
// input has ended gets barriers straight from the master and stays alive
// until the final checkpoint. When every acknowledgement is in, the metadata
// is committed durably (package checkpoint: CRC-32C, temp file, fsync,
// rename), and only then are tasks and coordinators notified: readers, sink
// writers that are connector.CheckpointListener, and committers, which commit
// (atomic checkpoints, the commit rule). Declines and timeouts abort the
// checkpoint; past WithTolerableCheckpointFailures the job fails over. A sink
// writer that cannot flush or prepare at a barrier fails its task instead of
// declining: its transaction may be gone, and a later checkpoint would
// complete past the lost records. A bounded job ends with a final checkpoint
// once every task's input has ended, so the last transactions commit before
// Execute returns.
//
// Completion is told in two phases (notify.go). Coordinators and sink
// operators hear first; a sink task reports back once none of its commits
// of that checkpoint is left to retry. Source readers (and any other
// operator) hear only when every sink task of their failover region has
// reported that checkpoint or a later one, and then of the newest such
// checkpoint: a reader that records its position elsewhere (the Kafka
// source's consumer group) never runs ahead of the committed output, even
// with source and sink in different tasks. A commit that retries holds
// them back; a failed one fails its task, so they never hear of it.
//
// Storage is in memory by default, or a directory (WithCheckpointDir),
// keeping WithCheckpointsRetained checkpoints. A job whose storage holds
// checkpoints starts from the newest valid one, so a killed process
// restarted on the same directory goes on where its last checkpoint left
// it. A newest checkpoint that cannot be read, or is damaged and may have
// been reported complete to the sinks, fails Execute with an error naming
// it and saying how to proceed, instead of resuming from an older one and
// writing output again (package checkpoint, Latest). A checkpoint
// directory is locked (flock on DIR/_lock) while a job runs from it, so a
// second job on it fails at start with the path and the holder's pid; a
// second job given the same *checkpoint.DirStorage (which shares its
// lock) is refused at start too, with a *checkpoint.LockedError naming
// the running job. WithCheckpointDir("s3://bucket/prefix") keeps
// checkpoints in S3 or an S3-compatible server (checkpoint.S3Storage),
// with the same rules of completion and restore. A checkpoint root, a
// directory or a prefix, belongs to the first job that ran on it (its
// name; for a distributed job, also its Kafka cluster's id), recorded in
// its owner record (checkpoint.ClaimOwner): a job of another name is
// refused at start with a *checkpoint.OwnedError, whenever it starts;
// WithRenamedFrom hands the root to the job under a new name.
//
// # Two-phase commit sinks
//
// SinkTo is the one way to add a sink; the engine finds out from the sink
// what it can do, as Flink's sinkTo does from a Sink V2 and its mix-ins. A
// sink that is connector.TwoPhaseCapable and says it commits in two
// phases runs as a connector.TwoPhaseCommittingSink (see its doc), with
// the committable type hidden (connector.HideCommittable): committer
// first, restored committables committed before the writer is created;
// PrepareCommit at each barrier; commits when the checkpoint completes;
// RetryLater with backoff; a known-reason failure fails the job. When it
// hides writer state too (connector.HideCommittableAndWriterState, for a
// connector.StatefulTwoPhaseSink), the writers' state is checkpointed
// with the committables. Every other sink runs as a plain one, whose
// writer is flushed at each barrier, which makes it at-least-once. Half a
// contract (a committer the sink does not hand over through TwoPhase,
// writer state without a committer, a two-phase sink's writer without
// PrepareCommit) is refused with ErrInvalidGraph, never run as a plain
// sink. The state signature names the committable and writer state types,
// so a checkpoint restores into a sink whose types did not change. Without
// checkpoints a two-phase sink commits
// once, at the end of input; one whose writes need the committer, fed by
// an unbounded source, is refused by Execute (ErrInvalidGraph and
// connector.ErrInvalidConfiguration).
//
// # Failover
//
// A failed task, coordinator or checkpoint (past the tolerable count)
// hands the job to the restart strategy (WithRestartStrategy: none, fixed
// delay, exponential delay; none by default without checkpoints, fixed
// delay without limit with them, as in Flink). A job of independent
// pipelines (every edge forward, every chain of the same parallelism)
// restarts only the failed subtask's region: its tasks are stopped and
// rebuilt from the latest checkpoint, each source coordinator drops the
// events held for and in flight to that subtask and, on its goroutine,
// gives the splits assigned to it after that checkpoint back to the
// enumerator (AddSplitsBack) before the new reader registers (AddReader).
// A failure after the attempt's final checkpoint completed restarts such a
// job globally too: the other regions' tasks finish once their sinks
// committed it, and a region restart's own final checkpoint would wait
// for them. Any other job restarts globally: every task and coordinator is rebuilt
// from the latest checkpoint, enumerators through RestoreEnumerator (this
// replaces Flink's resetToCheckpoint on a live coordinator). Pending
// checkpoints are aborted on every restart. A failure that no restart can
// mend fails the job at once: a commit that failed with a known reason, a
// connector's invalid configuration (connector.ErrInvalidConfiguration),
// a state type that cannot be checkpointed, state that cannot be decoded
// from the checkpoint being restored.
//
// A restart waits for every cancelled task to exit, and Execute for every
// task; a task whose code ignores cancellation would hold either forever.
// The cancellation watchdog (WithTaskCancellationTimeout, default 180s,
// Flink's task.cancellation.timeout) gives up on a task still live that
// long after its cancellation: the job fails with a *TaskCancellationError
// naming the task and subtask and holding its goroutine's stack (found by
// the goroutine id the task noted at start), and that goroutine is left
// running (watchdog.go).
//
// A job that never got going (since Execute began, no checkpoint
// completed, no source emitted a record, and the failing attempt did not
// run WithStartupFailureTimeout without failing: it cannot reach its
// external systems) is not restarted without end: its first failure after
// WithStartupFailureTimeout (default 2m) fails it with ErrNeverStarted
// and the failure.
//
// A cancel of Execute's context while the job waits to restart does not
// just stop: the last completed checkpoint's transactions may be prepared
// and not yet committed (the failure may have come between completion and
// commit), pinning read_committed consumers until the broker aborts them.
// The restart runs at once as a drain instead: committers commit the
// restored committables, sources stop at their first step, the final
// checkpoint ends the job, and Execute returns ErrCancelledWhileRestarting
// wrapping the failure. If that drain fails, the error says the restored
// transactions may still be open and that running the job again on the
// same checkpoint storage commits them. Without a completed checkpoint
// nothing can be prepared: the job stops and Execute returns
// ErrCancelledWhileRestarting with the failure.
//
// # Observing a job
//
// WithHTTP serves the job's status while Execute runs: Prometheus metrics
// at /metrics (WithMetricsRegistry to use a registry of your own),
// /healthz, /readyz (ready once a checkpoint completed since the newest
// restart), the job as JSON at /api/v1/job (the same status.Job that
// Environment.Status returns from any goroutine) and a live page of the
// job graph at /. The server, its options and its JSON types are package
// runtime/status's. What only reads is open to whoever reaches the
// address; POST /api/v1/job/stop, a graceful stop, and POST
// /api/v1/savepoints need the token of status.WithToken, and
// status.WithTLS serves HTTPS. The job logs on WithLogger
// (default slog.Default()) where each run resumed, every completed
// checkpoint, split assignments and restarts; WithJobListener calls
// functions of the program at the same points.
//
// # Distributed jobs
//
// WithDistributed runs one job over every process started with the same
// Distributed.Job, the same job code and the same checkpoint root
// (WithCheckpointDir: a directory all of them reach, or an s3:// URL).
// The job is cut into Distributed.Slots slots (default 16): every
// operator runs one subtask per slot, and slot i is subtask i of every
// operator. Kafka's group protocol gives each process a share of the
// slots (a consumer group named after the job over the topic
// <job>.slots); each process runs the slots it owns, each with
// checkpoints of its own under <root>/<job>/slots/<i>. Every keyed edge
// (KeyBy, the keyed inputs of joins) goes through Distributed.Shuffle
// (connector/kafka's NewShuffle: an internal topic written exactly-once
// and read read_committed), so a slot never needs another process's
// memory. The group's clients reach Distributed.Cluster, a
// connector.Cluster (connector/kafka's Conn); connector/kafka's
// Distributed builds the whole Distributed value from one connection.
// A process that stops (Execute's context cancelled) drains its
// slots with a final checkpoint and leaves the group; one that dies or
// stops answering for the session timeout loses its slots, which the
// others restore from their last recorded checkpoints. Every claim and
// every completed checkpoint of a slot is recorded in an ownership log in
// the slot's storage, and a checkpoint is committed only once recorded
// under its owner's claim, so a paused process that lost its slots
// commits nothing more and is never restored from. Environment.Status
// shows the slots a process runs (status.Job's Distributed). Event time
// crosses a shuffle: each slot writes its watermark, or its idleness, to
// the shuffle as markers, and the operator after it sees the minimum over
// the slots that feed it, so windows and event-time timers work as in one
// process (a slot whose source has no split holds event time back unless
// the watermark strategy has WithIdleness). Rebalance and Broadcast edges
// go through the Shuffle too, in channels of one partition per slot. A
// process whose job differs from the one the group's members run
// (another stateful graph, slot count or max parallelism) is refused
// before it gets a slot (ErrDifferentJob); upgrade a distributed job by
// stopping all its processes first. A job started fresh under a name an
// earlier run used reads none of that run's shuffle records: the first
// process records where the shuffles end (connector.ShuffleEnds) and
// fresh slots start reading there. A savepoint of a distributed job
// (TriggerSavepoint, StopWithSavepoint, or `splitflow savepoint
// trigger|stop --job`) is one of every slot: each slot drains (its sources
// stop, the shuffles carry what was written to their readers, which stop
// once every upstream slot's stop marker is read), and the slots' final
// checkpoints are written as a savepoint of the job in one process at
// parallelism = slots, which WithRestoreFrom takes in one process or
// distributed, at any parallelism or slot count.
//
// # Inside the engine
//
// How a job runs, for the curious and for tuning: the sections below
// describe what the engine does between the calls above.
//
// # How data flows
//
// Operators connected by a forward edge, with equal parallelism, where the
// consumer has no other input and neither side refuses (DisableChaining,
// StartNewChain, WithoutChaining()), are chained: they run in one task
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
// writer (the task-goroutine rule of DESIGN.md). Other goroutines reach it
// through its mailbox: the source coordinator's split assignments and events,
// timers, stop requests, checkpoint triggers (urgent mails). The loop runs
// mails first, then one step of the default action: one PollNext of the
// source reader, or one batch from the input gate. When the output is
// backpressured (a target channel is full) or no input is available, the
// default action is suspended and the task waits on its mailbox or on the
// availability it lacks, so a mail is never stuck behind backpressure. Work
// an operator starts inside one step or mail but that can emit without limit
// (the timers a watermark makes due) is resumable: it stops when the output
// becomes unavailable and the task resumes it, once the output has room,
// before it reads more input.
//
// # Bounded memory (the backpressure rule)
//
// An input channel queues at most WithBuffersPerChannel buffers. A writer
// whose target channel is full keeps the buffer pending and its task stops
// polling its source or reading its input until the channel has room, so a
// slow sink slows the sources: records in flight between two tasks are
// bounded by channels x (buffers per channel + 2) x buffer size plus what
// one step emits, whatever the input size; a burst of timers (the final
// maxWatermark firing a timer per key) counts one timer per step. A source reader that is not
// polled stops fetching once its own queue is full (connector/base), and
// the lag stays in the external system.
//
// # Sources
//
// Each source has a coordinator that runs its SplitEnumerator on one
// goroutine of its own (the single-threaded enumerator): enumerator methods
// and CallAsync continuations run there one at a time, and readers'
// registrations, split requests and events are queued to it. Assignments and
// events go into the reader task's mailbox and run there between two polls. A
// panic in the enumerator, in CallAsync work (which runs on a goroutine of
// its own) or in the enumerator's Close fails the coordinator (an
// *OperatorError with subtask -1, carrying the panic and its stack), not the
// process.
//
// # Not built yet
//
// Unaligned checkpoints, savepoints, and more than one concurrent
// checkpoint.
package runtime
