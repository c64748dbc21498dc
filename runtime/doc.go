// Package runtime is the engine that runs splitflow jobs in one process: the
// Environment and the generic DataStream API, the job graph and operator
// chaining, one goroutine per task with a mailbox, bounded channels and
// partitioners between tasks (forward, hash by key group, rebalance,
// broadcast), watermarks and idleness, the checkpoint coordinator with
// in-band barriers and alignment, keyed and operator state, checkpoint
// storage, restart strategies with region and global failover, operator
// coordinators with gated gateways (the SourceCoordinator and its
// SplitAssignmentTracker), and the generic two-phase-commit sink operators.
//
// It knows connectors only through package connector; it never imports a
// concrete connector such as connector/kafka.
//
// The engine is not built yet: this package holds only its documentation.
package runtime
