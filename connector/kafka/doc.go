// Package kafka is splitflow's Kafka connector, built on franz-go.
//
// KafkaSource reads topic-partitions as splits: a partition-discovering
// enumerator runs on the coordinator goroutine and pushes each partition to a
// stable owner; the split reader, on connector/base, uses direct partition
// assignment with read_committed isolation, keeps offsets in checkpointed
// split state and commits them to the consumer group, for monitoring and
// for new jobs that start from them, only once the sinks have committed
// the checkpoint's output. A bounded split that finished keeps its stopping
// offset in later commits, and a reader's Close waits (WithCloseCommitTimeout,
// default 5s) for the commit under way, so a finished or drained job
// leaves the group at its last checkpoint's offsets. A bounded split ends
// at its stopping offset even when the offsets before it hold nothing to
// read (a compacted partition's removed tail, aborted transactions): one
// quiet for a second is checked with a fetch of the reader's own.
//
// Deserializers turn records into the source's type; TableUpdates reads a
// changelog, such as a compacted topic, as the table of runtime.TableJoin,
// a tombstone as a deletion.
//
// KafkaSink writes with the delivery guarantee one option chooses:
// WithAtLeastOnce, the default (flush at every checkpoint),
// WithExactlyOnce(prefix) (one Kafka transaction per checkpoint per
// subtask, its id under prefix, prepared at the barrier and committed,
// through package txn, only after the checkpoint completes), or
// WithNoGuarantee (flush at the end of input). An exactly-once committer
// also checks that every partition got the commit markers of the
// transactions it committed, and writes one a broker lost (hanging.go).
//
// A job names its cluster once: Connect makes a Conn of WithBrokers,
// WithSecurity, WithClientOpts and WithLogger (conn.go), which every
// source, sink and shuffle takes with WithConnection, and Distributed
// (distributed.go) builds a distributed job's whole setup from it (its
// membership, whose clients the engine makes from the Conn, a
// connector.Cluster, and its Shuffle).
//
// Both connect as WithSecurity says (security.go: TLS, SASL) and check,
// before the first record is read or written, that their principal has
// the rights they need (authz.go); a missing right fails the job at once
// with an *AuthorizationError naming the principal, the resource and the
// operation, which no restart can fix.
//
// NewShuffle (shuffle.go) carries runtime.Shuffle, the keyed edges of a
// distributed job, over Kafka: channel c is the topic c.shuffle, created
// by whichever side starts first with one partition per shuffle
// partition (another count fails the job), written by the exactly-once
// KafkaSink with c as transactional id prefix and each record's partition
// as the Kafka partition, and read read_committed from the earliest
// offsets by a KafkaSource whose enumerator gives partition p to the
// subtask the runtime's owner rule names.
//
// Both export metrics (metrics.go) on the job's registry when the engine's
// context provides a metric group: lag per partition (and the reader's sum,
// LagRecords, which the engine adds into the job's lag gauge), bytes read and
// written, partitions discovered, transactions committed and aborted,
// commit latency, and franz-go's client metrics through kprom.
package kafka
