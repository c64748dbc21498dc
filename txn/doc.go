// Package txn holds the Kafka transaction mechanics that exactly-once
// delivery needs, independent of the engine: transactional-id naming
// (prefix-<subtask>-<n>) and a bounded pool of ids per subtask, a
// transactional producer that can prepare a transaction and hand back a
// Committable{TransactionalID, ProducerID, Epoch, CheckpointID}, committing
// or aborting a prepared transaction from a fresh client (resume, with a raw
// EndTxn request), aborting transactions left open under a prefix, and the
// classification of broker errors into retriable ones and data loss.
//
// What the broker allows here is pinned by tests on a real Apache Kafka 4.4
// broker in package integration (TestResume...); DESIGN.md records it.
//
// The package is not built yet: it holds only its documentation.
package txn
