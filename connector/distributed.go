package connector

import "context"

// The contracts below are between the engine's distributed jobs
// (runtime.WithDistributed) and the connectors that take part in one: a
// source that every slot can run on its own, and the Shuffle that carries
// the edges cut between processes (connector/kafka implements both).

// SlotPartitionedSource is implemented by a source whose enumerator gives
// every split to a subtask fixed by the split and the parallelism alone,
// whatever order readers register in (the Kafka source: a partition's
// owner rule), and answers true. In a distributed job every slot runs an
// enumerator of its own over all the splits and only its own reader
// registers, so only such a source has each split read by one slot; a
// distributed job refuses the others.
type SlotPartitionedSource interface {
	SplitsOwnedBySubtask() bool
}

// SlotEnumeratorStateMerger is an optional capability of a
// SlotPartitionedSource whose enumerator state is C: it makes the state
// the enumerator of a job in one process would have from the states of
// a distributed job's slots, so that the job's savepoint (taken by
// splitflow savepoint trigger|stop --job) restores like one of a job at
// parallelism len(states) whose reader i held slot i's splits. states[i]
// is slot i's enumerator's, each over all the splits (every slot runs an
// enumerator of its own; only its own reader registers). Called once per
// savepoint, never concurrently with the enumerator. A distributed job
// whose source lacks it takes no savepoint; the error names the source.
type SlotEnumeratorStateMerger[C any] interface {
	MergeSlotEnumeratorStates(states []C) (C, error)
}

// ShuffleRecord is one record of a shuffle's channel: a batch of the
// stream's records that belong to one partition of the channel (for a
// keyed edge, the partition of the slot that owns their key groups),
// encoded by the engine, and that partition.
type ShuffleRecord struct {
	// Partition is the channel's partition, in [0, partitions).
	Partition int32
	// Value is a batch (records encoded with the stream type's
	// DefaultSerde, each with its timestamp) or a watermark marker of
	// the upstream subtask that wrote it, in formats of the engine's. A
	// Shuffle carries it as it is, and hands it back once, in its
	// partition's order.
	Value []byte
}

// ShuffleEnds is an optional capability of a distributed job's Shuffle
// (runtime.Shuffle): where its channels end now. The first process of a
// distributed job to settle the job's start record asks it before
// recording the start, and a slot whose reading side restores no position
// of its own starts there (ShuffleStarts): a job started afresh (a new
// checkpoint root) under a name an earlier run used then reads none of
// that run's records, which stay in the channels for as long as that run
// might have been resumed. A Shuffle without it is read from each
// partition's start.
type ShuffleEnds interface {
	// Ends returns, for each channel given with its partition count, the
	// position after the last record of each partition, by partition
	// (the reading side's offsets: what a reader started there reads
	// next); a channel that does not exist yet is left out. Called once
	// per process start, before any slot runs.
	Ends(ctx context.Context, channels map[string]int) (map[string][]int64, error)
}

// ShuffleStarts is a capability of the SplitEnumeratorContext that the
// reading side of a shuffle channel gets in a slot of a distributed job
// whose Shuffle is a ShuffleEnds: where a reader that restores no position
// of its own starts. The enumerator of a fresh slot (no checkpoint yet, or
// restored before its first assignment) resolves its splits' starting
// positions from it, every time it is created: a slot that starts again
// before its first checkpoint reads again what this run wrote, from the
// same positions, never from the channel's latest.
type ShuffleStarts interface {
	// ShuffleStart returns the position each partition of channel
	// starts at, by partition; nil when the channel was missing at the
	// job's start (read it from the start) or the job's start record
	// holds no positions (an earlier splitflow's). Called on the
	// coordinator goroutine.
	ShuffleStart(channel string) []int64
}

// Cluster is the message system the processes of a distributed job share
// (runtime.Distributed's Cluster): its consumer group gives the job's
// slots to the processes, and its id is recorded with the job's name as
// the owner of the job's checkpoint root. connector/kafka's Conn is one.
//
// The engine's membership speaks Kafka's group protocol through franz-go,
// which this package does not import: a Cluster also has the method
// ClientOpts() ([]kgo.Opt, error), the options of the membership's
// clients, which the engine finds by type assertion; a Cluster without it
// is refused when the job starts.
type Cluster interface {
	// ClusterID returns the cluster's id, "" when the cluster gives none.
	// Called once per process start, before the process joins the group.
	ClusterID(ctx context.Context) (string, error)
}
