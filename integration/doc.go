// Package integration holds the tests that run against a real Apache Kafka
// broker: the broker-level primitives the exactly-once sink stands on, and
// (as the engine grows) whole pipelines under injected failures, process
// kills, broker restarts, lingering and timed-out transactions and bad
// input. Exactly-once is shown on output: records carry ids, the output is
// drained with read_committed, and tests count total, distinct and
// duplicate ids against what was fed in.
//
// The broker comes from package kafkatest; under CI a missing broker fails
// these tests instead of skipping them.
package integration
