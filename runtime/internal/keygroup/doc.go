// Package keygroup routes keys the way Flink's KeyGroupRangeAssignment
// does, in two steps:
//
//	key -> hash (murmur3 of the key's bytes) -> key group (hash mod max parallelism)
//	key group -> subtask (keyGroup * parallelism / maxParallelism)
//
// The key group is the unit of keyed state: it depends only on the key and
// the max parallelism, never on the parallelism, so state is redistributed
// to another parallelism by moving whole key groups. The engine routes hash
// edges, places keyed state and cuts a distributed job's keyed edges into
// slots with these functions, and nothing else decides where a key goes.
//
// # Invariants kept here
//
//   - A key's hash is the same in every process and release: it is
//     computed from the key's bytes (MurmurHash3_x86_32, seed 0), never
//     from Go's randomly seeded map hash. Checkpoints store state by key
//     group, so a changed hash would restore keys where no record of
//     theirs arrives (TestMurmur3MatchesReferenceVectors,
//     TestKeyGroupAssignmentIsPinned).
//   - Each subtask owns one contiguous range of key groups, and the
//     ranges cover [0, maxParallelism) with sizes differing by at most
//     one (TestKeyGroupRangesAreContiguous).
package keygroup
