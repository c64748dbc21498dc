// Package datagen is a source of generated records, splitflow's
// counterpart of Flink's DataGeneratorSource: a function maps an index to a
// record, and the source emits the records of the indexes [0, count), or
// of every index for an unbounded source.
//
//	src, err := datagen.NewSource(func(i int64, r *rand.Rand) Order {
//		return Order{ID: i, Amount: r.IntN(1000)}
//	}, datagen.WithCount(1_000_000), datagen.WithSeed(42), datagen.WithRecordsPerSecond(5000))
//
// # Guarantees
//
//   - Deterministic: the record of an index depends only on the index and
//     the seed (WithSeed): the *rand.Rand handed to the function is seeded
//     from both for every index. So a job emits the same records at any
//     parallelism and after any failover, as long as the function uses only
//     its arguments.
//   - Exactly once: the index space is cut into ranges, one split each
//     (WithSplits), assigned to readers up front, split k to subtask k mod
//     parallelism (so a distributed job reads each in one slot). A split's
//     state is the next index to emit, advanced on the task goroutine as
//     records are emitted, so a restored split resumes at the first index
//     not yet emitted: across failovers an exactly-once job's output holds
//     every index once, with no gap.
//   - Rate limited (WithRecordsPerSecond): the rate is shared by the
//     readers, each emitting at most rate/parallelism records per second,
//     with bursts of at most a tenth of a second's worth.
//
// The source is built on connector/base: a split, a SplitReader and an emit
// function, with base's StaticEnumerator and simple reader.
package datagen
