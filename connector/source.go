package connector

// Boundedness says whether a source ever finishes.
type Boundedness int

const (
	// Bounded sources read a finite input: every reader eventually returns
	// EndOfInput, and the job finishes when all of them have.
	Bounded Boundedness = iota + 1
	// ContinuousUnbounded sources keep producing records until the job is
	// cancelled; new splits may be discovered at any time.
	ContinuousUnbounded
)

// String returns the name used in logs and errors.
func (b Boundedness) String() string {
	switch b {
	case Bounded:
		return "bounded"
	case ContinuousUnbounded:
		return "continuous-unbounded"
	default:
		return "unknown-boundedness"
	}
}

// Split is a portion of a source's input that one reader reads from start to
// finish: a file or a byte range of one, a Kafka topic-partition. A split
// value also records how far it has been read, so the same type serves as
// the assignment unit and as the reader's checkpoint.
type Split interface {
	// SplitID identifies the split among all splits of its source. It is
	// stable for the life of the split: the reader keys its state by it,
	// and the engine uses it for per-split watermarks and pause/resume.
	// It may be called from any goroutine and often, so it should return a
	// stored string rather than format one.
	SplitID() string
}

// SourceEvent is a message a source's enumerator and its readers exchange
// for their own purposes (the engine never inspects it). It is any Go
// value; events travel inside the process without being copied, so the
// sender must not modify an event after sending it.
type SourceEvent = any

// ReaderInfo describes a registered reader as seen by the enumerator.
type ReaderInfo struct {
	// SubtaskIndex is the reader's subtask, in [0, parallelism).
	SubtaskIndex int
	// Location is a free-form description of where the reader runs (host,
	// process), for locality-aware assignment and logs. It may be empty.
	Location string
}

// SplitsAssignment maps subtask indexes to the splits to add to each.
type SplitsAssignment[S Split] struct {
	Assignment map[int][]S
}

// Source creates the enumerator and readers of one logical source, and the
// serializers for their checkpointed state.
//
// T is the record type the readers emit, S the split type and C the type of
// the enumerator's checkpoint.
//
// A Source is a description, not a running thing: its methods may be called
// from any goroutine, several times, and must not start work.
type Source[T any, S Split, C any] interface {
	// Boundedness reports whether the source finishes.
	Boundedness() Boundedness

	// CreateEnumerator returns a fresh enumerator for a job that starts
	// without a checkpoint. ctx stays valid until the enumerator is closed.
	// Called on the coordinator goroutine.
	CreateEnumerator(ctx SplitEnumeratorContext[S]) (SplitEnumerator[S, C], error)

	// RestoreEnumerator returns an enumerator that continues from a
	// checkpoint previously returned by SplitEnumerator.SnapshotState.
	// Splits that were assigned to readers after that checkpoint are
	// returned later through AddSplitsBack. Called on the coordinator
	// goroutine.
	RestoreEnumerator(ctx SplitEnumeratorContext[S], checkpoint C) (SplitEnumerator[S, C], error)

	// CreateReader returns a reader for one subtask. The engine then adds
	// the splits restored from that subtask's checkpoint (if any) with
	// AddSplits and only then calls Start. Called on the subtask's task
	// goroutine.
	CreateReader(ctx SourceReaderContext) (SourceReader[T, S], error)

	// SplitSerializer encodes splits for reader checkpoints and for the
	// coordinator's record of assignments.
	SplitSerializer() VersionedSerializer[S]

	// EnumeratorStateSerializer encodes the enumerator's checkpoint.
	EnumeratorStateSerializer() VersionedSerializer[C]
}
