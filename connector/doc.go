// Package connector is the contract between the splitflow engine and the
// connectors that read from and write to external systems. It holds
// interfaces and small value types only; it imports neither the engine nor
// any client library, so a connector depends on this package and nothing
// else of splitflow.
//
// The shapes follow Apache Flink's FLIP-27 sources and Sink V2, expressed
// with Go generics.
//
// # Sources
//
// A [Source] is a factory for two cooperating halves:
//
//   - one [SplitEnumerator] per source, run by the engine's source
//     coordinator on a single goroutine. It discovers [Split]s and assigns
//     them to readers, either eagerly (push) or when a reader asks for one
//     (pull, see [SourceReaderContext.SendSplitRequest]).
//   - one [SourceReader] per parallel subtask, run on that subtask's task
//     goroutine. It reads the splits assigned to it and emits records to a
//     [ReaderOutput] without ever blocking the task goroutine.
//
// A split is also its own checkpoint: [SourceReader.SnapshotState] returns
// the splits the reader owns, each carrying the position reading resumes
// from, and [SplitEnumerator.SnapshotState] returns whatever the enumerator
// still holds. The engine keeps every split in exactly one of the two in
// every checkpoint (the one-place rule of DESIGN.md); splits assigned after
// the last checkpoint a failed reader took come back to the enumerator
// through [SplitEnumerator.AddSplitsBack].
//
// Few sources implement these interfaces by hand. Package connector/base
// turns a blocking SplitReader into a SourceReader, and for splits known
// when the job starts its NewSource is the whole Source from a split type,
// a SplitReader and an emit function; connector/datagen generates records
// from a function of their index.
//
// # Sinks
//
// A [Sink] creates one [SinkWriter] per subtask, and runtime.SinkTo, the one
// way to add a sink to a job, takes every sink. Everything beyond writing
// is an optional capability, declared by implementing one more interface
// (Flink's Sink V2 mix-ins SupportsCommitter and SupportsWriterState):
//
//   - [TwoPhaseCommittingSink]: the writer also implements
//     [CommittingSinkWriter] and hands out committables at each checkpoint;
//     a [Committer] commits them once the checkpoint is complete (invariant
//     8 of DESIGN.md).
//   - [StatefulSink]: the writer also implements [StatefulSinkWriter] and
//     its state is checkpointed and handed back on restore; the engine
//     runs it as a [StatefulTwoPhaseSink], beside a committer.
//   - [TwoPhaseCapable]: how a two-phase sink reaches the engine. It says
//     whether, as configured, it commits in two phases, and hands itself
//     over with its committable type hidden ([HideCommittable]), and its
//     writer state type too ([HideCommittableAndWriterState]), so that
//     runtime.SinkTo runs it with its committer and its writer state.
//
// Half a contract is refused by runtime.SinkTo when the job is built: a
// sink with CreateCommitter or CommittableSerializer that is not
// TwoPhaseCapable, or that lacks the other; writer state (RestoreWriter,
// WriterStateSerializer) without a committer, or not hidden with the
// committable. A two-phase sink's writer that is not a
// [CommittingSinkWriter] fails the job when it is created.
//
// # Capabilities and generics
//
// The engine discovers capabilities by type assertion, the way a Go program
// asks an io.Writer whether it is also an io.ReaderFrom. Go cannot assert to
// a generic interface whose type arguments it does not know
// (x.(TwoPhaseCommittingSink[T, ?]) has no spelling), and runtime.SinkTo
// knows T alone. So a two-phase sink reaches the engine through
// [TwoPhaseCapable], whose type argument is T alone: the sink, which knows
// its committable (and writer state) type, hides it behind any
// ([HideCommittable], [HideCommittableAndWriterState]), and the engine
// asserts the hidden sink and its writers with type arguments it knows:
// w.(CommittingSinkWriter[T, any]). The sink's own serializers still write
// the bytes, and the engine names the hidden types in the job's
// fingerprint. Interfaces here are written so that such a generic function
// accepts any implementation: no method uses a type parameter that the
// interface does not declare.
//
// # Goroutines
//
// Every method documents which goroutine calls it and when. Two rules cover
// most of them: enumerator methods run only on the coordinator goroutine, and
// reader and writer methods run only on the owning task goroutine, never
// concurrently with each other. Implementations therefore need no locks for
// state those methods touch; state shared with goroutines of their own (a
// fetcher, a client's callbacks) is theirs to guard.
//
// Every context the engine hands a connector (SinkInitContext,
// SourceReaderContext, SplitEnumeratorContext) has a Context that the
// engine cancels when the task or coordinator is cancelled, on a failover
// or a hard stop; blocking calls to the external system take it, so that a
// connector stuck on an unreachable system never holds up a failover.
package connector
