// Package srccoord is the job-wide half of a FLIP-27 source: the source
// coordinator that runs a connector.Source's SplitEnumerator on one
// goroutine of its own and is the enumerator's SplitEnumeratorContext
// (Source, made by New), the gateways through which its answers reach
// each reader subtask's task mailbox (Gateway), and the split assignment
// tracker that books its assignments per subtask and checkpoint. Package
// runtime drives a Coordinator from its checkpoint driver and failover,
// and the source operator (runtime/internal/sourceop) is the Reader the
// gateways deliver to; srccoord imports nothing of runtime. It is the engine's, not a user's: the
// contracts a connector implements are package connector's.
//
// # Invariants kept here
//
//   - The single-threaded enumerator: every enumerator method and every
//     CallAsync continuation runs on the coordinator goroutine, one at a
//     time; a panic in asynchronous work fails the coordinator, not the
//     process.
//   - The booking rule: an assignment is booked as uncheckpointed, filed
//     under N by the coordinator snapshot for N, forgotten when N
//     completes; a subtask reset to N gets everything assigned to it after
//     N back through AddSplitsBack. A job that cannot restart books
//     nothing.
//   - The gate: right after the coordinator snapshotted N its gateways
//     hold later events back, and Checkpoint returns only once the events
//     sent before have run on their subtasks, so that barrier N never
//     overtakes an assignment the enumerator's snapshot no longer holds.
//     A gateway opens after its subtask's snapshot of N (or when N is
//     aborted); a failed subtask's events are dropped until the
//     restarted task's binding is activated.
//
// These are invariants 2, 3 and 5 of DESIGN.md; the design is in
// docs/design/source-model.md.
package srccoord
