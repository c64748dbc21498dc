package runtime

import "github.com/splitflow/splitflow/connector"

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
// A Shuffle may also be a connector.ShuffleEnds, and its reading side
// then starts where connector.ShuffleStarts says. connector/kafka's
// NewShuffle carries them through Kafka topics.
type Shuffle interface {
	// Sink adds the writing side of channel to ds, a stream of records
	// whose Partition is in [0, partitions).
	Sink(ds DataStream[connector.ShuffleRecord], channel string, partitions int) DataStreamSink
	// Source adds the reading side of channel to env.
	Source(env *Environment, channel string, partitions int, owner func(partition, parallelism int) int) DataStream[connector.ShuffleRecord]
}
