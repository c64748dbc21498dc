package runtime

import "context"

// ShuffleRecord is one record of a shuffle's channel: a batch of the
// stream's records that belong to one partition of the channel (for a
// keyed edge, the partition of the slot that owns their key groups),
// encoded by the runtime, and that partition.
type ShuffleRecord struct {
	// Partition is the channel's partition, in [0, partitions).
	Partition int32
	// Value is a batch (records encoded with the stream type's
	// DefaultSerde, each with its timestamp) or a watermark marker of
	// the upstream subtask that wrote it, in formats of the runtime's. A
	// Shuffle carries it as it is, and hands it back once, in its
	// partition's order.
	Value []byte
}

// Shuffle carries the edges that a distributed job (WithDistributed)
// cuts between processes: every keyed (hash), rebalance and broadcast
// edge becomes a durable channel that the upstream operator's subtasks
// write and the downstream operator's subtasks read. A Shuffle is a transport only; what the
// records mean and which partition each goes to is the runtime's.
//
// The rules an implementation keeps, on which exactly-once rests:
//   - the writing side is a two-phase-commit sink: what a subtask wrote
//     becomes visible to readers only when the checkpoint it belongs to
//     completes, and is never visible otherwise;
//   - the reading side is a source that reads only what was committed, in
//     each partition's order, from the partition's start, and keeps its
//     position in checkpoints; subtask i of parallelism p reads exactly
//     the partitions for which owner(partition, p) == i, for as long as
//     the job runs;
//   - both sides name what they keep outside the job (topics,
//     transactional ids) after the channel, which is unique among the
//     jobs sharing the Shuffle's system.
//
// connector/kafka's NewShuffle carries them through Kafka topics.
type Shuffle interface {
	// Sink adds the writing side of channel to ds, a stream of records
	// whose Partition is in [0, partitions).
	Sink(ds DataStream[ShuffleRecord], channel string, partitions int) DataStreamSink
	// Source adds the reading side of channel to env.
	Source(env *Environment, channel string, partitions int, owner func(partition, parallelism int) int) DataStream[ShuffleRecord]
}

// ShuffleEnds is an optional capability of a Shuffle: where its channels
// end now. The first process of a distributed job to settle the job's
// start record asks it before recording the start, and a slot whose
// reading side restores no position of its own starts there
// (ShuffleStarts): a job started afresh (a new checkpoint root) under a
// name an earlier run used then reads none of that run's records, which
// stay in the channels for as long as that run might have been resumed.
// A Shuffle without it is read from each partition's start.
type ShuffleEnds interface {
	// Ends returns, for each channel given with its partition count, the
	// position after the last record of each partition, by partition
	// (the reading side's offsets: what a reader started there reads
	// next); a channel that does not exist yet is left out. Called once
	// per process start, before any slot runs.
	Ends(ctx context.Context, channels map[string]int) (map[string][]int64, error)
}

// ShuffleStarts is a capability of the connector.SplitEnumeratorContext
// that the reading side of a shuffle channel gets in a slot of a
// distributed job whose Shuffle is a ShuffleEnds: where a reader that
// restores no position of its own starts. The enumerator of a fresh slot
// (no checkpoint yet, or restored before its first assignment) resolves
// its splits' starting positions from it, every time it is created: a
// slot that starts again before its first checkpoint reads again what
// this run wrote, from the same positions, never from the channel's
// latest.
type ShuffleStarts interface {
	// ShuffleStart returns the position each partition of channel
	// starts at, by partition; nil when the channel was missing at the
	// job's start (read it from the start) or the job's start record
	// holds no positions (an earlier splitflow's).
	ShuffleStart(channel string) []int64
}
