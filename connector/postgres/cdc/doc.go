// Package cdc is a change data capture source: the rows of PostgreSQL
// tables, then every insert, update and delete committed to them, as
// Change values, exactly once, through a logical replication slot
// (pgoutput, read with jackc/pglogrepl on pgx v5).
//
//	src, err := cdc.NewSource(connString,
//		cdc.WithTables("public.orders", "public.customers"), // for a missing publication
//		cdc.WithPublication("shop_cdc"), cdc.WithSlot("shop_cdc"))
//	...
//	changes := runtime.FromSource(env, src, "orders-cdc")
//
// It is a package of its own, beside the sink of connector/postgres,
// because the two share nothing but pgx: the source speaks the
// replication protocol on a connection of its own, and a job that writes
// to PostgreSQL need not link the replication client.
//
// # One split
//
// A replication slot gives one ordered stream, and its position is one
// LSN, so the source has one split, read by subtask 0 whatever the
// parallelism (the other readers have nothing to read; fan the changes out
// with a keyed stream after the source). The split is its own state
// (Split): its phase, the slot's consistent point, the snapshot rows
// emitted and where the snapshot is (its reads and the last row
// emitted), and the resume point (FlushLSN, plus the commit LSN and count
// of a transaction partly emitted).
//
// # Snapshot, then stream
//
// A new split makes the publication if it is missing (WithTables,
// WithCreatePublication), drops a slot of its name if there is one (a job
// started without a checkpoint starts over), and creates the slot with
// EXPORT_SNAPSHOT. In that snapshot, imported into a REPEATABLE READ READ
// ONLY transaction on a second connection, it reads every table of the
// publication (SELECT *) and emits each row as op r; then it streams the
// slot from the slot's consistent point, the exact position of the
// snapshot: a transaction committed before it is in the snapshot, one
// committed after it in the stream, none in both.
//
// # Resuming a snapshot
//
// The exported snapshot lives only as long as the connection that made
// the slot, so after a failure the same snapshot cannot be read again.
// The split therefore records where the snapshot is: tables are read in
// order (schema, then name), a table with a primary key in the key's
// order, and the split holds the table and key (as text) of the last row
// emitted. A restored split whose completed checkpoint holds snapshot
// rows resumes after that row, in a new snapshot exported by a
// temporary slot made for it (its consistent point C1), and records
// that read as a segment: rows from this position on were read at C1,
// those before it at the slot's consistent point C0 (several failures
// make several segments). The stream still starts at C0, where the slot
// stands: it was never confirmed during the snapshot. A transaction
// that committed before C0 is in every read and never streamed; one at
// or after the last segment's point is in no read and streamed as
// usual. Between the two, a change is emitted only if it committed at
// or after the point of the read that gave its row: an insert by its
// new row's key, a delete by its old row's, an update by both (an update
// that moved a row's key across a segment boundary becomes the delete
// of the old key, or the insert of the new one, whichever read came
// before it). Keys are placed by the server's own comparison of the
// key's types and collations, the order the snapshot read them in. So
// each row's image comes from exactly one read, and each change after
// that read follows it once: every row once as op r, every change to it
// after its read once, none before. Tables follow the same rule without
// a key when the failure came between them; a table without a primary
// key cut in the middle cannot be resumed: the job fails with an error
// naming the slot and the table, unless
// WithSnapshotRestartAfterFailure(true) lets it take the whole snapshot
// again (a new slot; the rows before the failure come twice). A
// snapshot whose checkpoint holds none of its rows is taken again from
// the start (the slot anew).
//
// # Exactly once
//
// The stream carries whole transactions in commit order (pgoutput proto
// 1 sends a transaction when it commits). The emitter moves the split past
// each change, and past each transaction's end at its commit, on the task
// goroutine, so a checkpoint's state is exactly what was emitted before its
// barrier. The slot is confirmed (a standby status update whose flushed
// position is the split's FlushLSN) ONLY when a checkpoint completes:
// Reader.NotifyCheckpointComplete, after the sinks committed the
// checkpoint's output, as the Kafka source commits group offsets. It is
// never confirmed on read, so the server keeps every change after the
// latest completed checkpoint. A restore streams from the checkpoint's
// FlushLSN and skips what the server sends again: transactions that
// committed before it, and the changes of the partly emitted transaction
// that the checkpoint holds. Until a checkpoint completes, status updates
// (every WithStatusInterval, and when the server asks) confirm the position
// the stream started from, which the restored checkpoint already covers.
// Keepalives between transactions move the resume point to the server's
// position too, so a slot whose tables are idle does not hold back WAL
// that other databases write.
//
// A restored split checks its slot first: a slot that is gone (dropped, or
// not on a server the database failed over to), whose WAL was removed
// (wal_status lost), or that is confirmed past the checkpoint's position
// (a restore from an older checkpoint, or another job on the slot) fails
// the job at once with an error naming the slot and wrapping ErrSlotLost:
// changes may be missing, and the source never takes a new snapshot on its
// own. A slot that another connection still holds (the walsender of the
// failed attempt, not yet exited; the connection of a process that died,
// until the server finds it dead) is waited for, up to WithSlotWait,
// before the source fails with PostgreSQL's error naming the process.
//
// # Changes
//
// A Change has the operation (r, c, u, d), the table, the before and
// after images as maps of column to value decoded through pgx's type map,
// the table's primary key columns, the change's LSN, the transaction's
// commit LSN, id and commit time. The before image depends on the table's
// REPLICA IDENTITY: with the default, a delete carries the key columns and
// an update carries them only when it changed the key; with REPLICA
// IDENTITY FULL both carry the whole old row. A table without a primary
// key needs REPLICA IDENTITY FULL (or USING INDEX) for the server to
// accept its updates and deletes at all. MarshalDebezium and MarshalKey
// encode a change as a Debezium-style JSON event and its key. Each change
// is emitted with its commit time (a snapshot row with the snapshot's
// time) as its timestamp, for event-time windows downstream.
//
// TRUNCATE is not captured. A table added to the publication while the job
// runs is captured from the ALTER PUBLICATION on, without a snapshot of
// its earlier rows. An update of a row's key is one change, keyed by the
// new key, with the old key in Before.
package cdc
