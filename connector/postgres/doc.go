// Package postgres is a sink that writes a job's records as rows of one
// PostgreSQL table, exactly once, on pgx v5.
//
//	sink, err := postgres.NewSink(connString, "word_counts", []string{"word", "count"},
//		func(wc WordCount, row []any) error {
//			row[0], row[1] = wc.Word, wc.Count
//			return nil
//		},
//		postgres.WithUpsert("word"))
//	...
//	runtime.SinkTo(counts, sink)
//
// It is a connector.TwoPhaseCommittingSink that is always
// connector.TwoPhaseCapable, so runtime.SinkTo runs it with its
// committer, as it runs the Kafka sink in exactly-once mode.
//
// # Modes
//
// Insert mode (the default) appends every row with one binary COPY per
// commit. Upsert mode (WithUpsert) writes each row with INSERT ... ON
// CONFLICT (keys) DO UPDATE SET the other columns; within the rows one
// writer subtask holds for one checkpoint only the last row of each key is
// kept.
//
// # Exactly once
//
// A writer never writes to the table. It encodes each row at Write into
// PostgreSQL's binary format for the column's type (an error names the
// column) and holds the rows until the checkpoint barrier; PrepareCommit
// hands them over as one Committable, which carries the rows themselves,
// the target and its column types, and the progress key (job, sink,
// writer subtask). The committable travels in the checkpoint. When the
// checkpoint is complete, the committer writes the committable in ONE
// transaction that
//
//  1. locks the key's row of the progress table (made if missing) and
//     reads the last checkpoint recorded for the key;
//  2. if that is the committable's checkpoint or a later one, ends and
//     reports the committable as already committed: this is a commit
//     retried or replayed from a restored checkpoint after a failure;
//  3. otherwise writes the rows (COPY, or the upserts) and sets the
//     progress row to the committable's checkpoint;
//  4. commits.
//
// The rows and the record of their checkpoint become visible together or
// not at all, so a commit interrupted anywhere (even during COMMIT, whose
// outcome the client may never learn) is decided by the next attempt
// reading the progress row. Rows of a checkpoint that never completes
// are in no completed checkpoint and never reach the database; the
// restored source reads their records again.
//
// Holding the rows in the committable is what makes a commit redoable
// after a crash between the barrier and the commit: the checkpoint, not
// the dead process, keeps them. Its limit is size: a writer holds the
// rows of one checkpoint interval in memory and the checkpoint stores
// them until they are committed, so WithMaxCheckpointBytes (64 MiB per
// subtask by default) fails a writer that would hold more; checkpoint
// more often for more throughput. The alternatives were a transaction
// opened by the writer and committed later, which a crash loses with its
// rows, and PREPARE TRANSACTION, which is not used: the default server
// allows none (max_prepared_transactions = 0), and a prepared transaction
// that a job never comes back to commit or roll back keeps its locks and
// holds back VACUUM until an operator ends it by hand.
//
// # Progress
//
// The progress table (WithProgressTable, default splitflow_sink_progress)
// holds one row per (job, sink, subtask): the last checkpoint committed
// for the rows that subtask's writer prepared. The job defaults to the
// name the job runs under (WithJobName), the sink to the table's
// schema-qualified name (WithSinkName). The key a committable carries is
// its writer's, not its committer's: after a rescale, another subtask's
// committer may commit it, and its replay is recognised all the same.
//
// The engine commits the committables of one writer in checkpoint order,
// and the committer keeps that order and stops at the first failure
// (Commit returns the error; the engine restarts the job and commits
// again), so a key's recorded checkpoint never passes one whose rows are
// not committed. Checkpoint ids grow across restores, but start again at
// 1 in a job started without a checkpoint; so each writer, when it
// starts, lowers its key's recorded checkpoint to the one the job
// restored (0 when none), and subtask 0 does the same for the subtasks at
// or beyond the parallelism. After a normal failover this changes
// nothing (nothing after the latest completed checkpoint was committed);
// a job started afresh, or restored from an older checkpoint or a
// savepoint, writes again what follows the checkpoint it starts from, as
// the Kafka sink does. Lowering never goes below the restored checkpoint,
// so the restored committables are still recognised.
//
// # Fencing
//
// In a distributed job (runtime.WithDistributed) each subtask runs in a
// slot that one process at a time owns, under a claim whose epoch rises
// with every new owner (connector.ClaimInfo on the writer's and the
// committer's context). A process paused past its slot's takeover
// (SIGSTOP, a frozen VM) may wake up still holding committables it was
// told to commit, and a writer restarted within its stale claim would
// lower the key's progress under the new owner's feet. So the progress
// row also records the claim that last wrote it (column claim_epoch): a
// writer records its claim when it starts, a commit when it writes, and
// both first compare. A commit under a claim older than the recorded one
// writes nothing and fails with an error wrapping ErrStaleClaim, whatever
// its checkpoint (its id may be one the new owner wrote with other rows,
// or one the new owner has not reached); a writer's start fails the same
// way and changes nothing. The check and the write are one transaction
// under the row's lock, so a stale owner and the new one queue on the
// row and the second reads the first's claim. The committer's claim
// counts, not the claim that prepared the committable: the new owner
// commits the checkpoint it restored. Claims are a slot log's, which a
// job started afresh under a new checkpoint root begins again at 1, so a
// writer that restores no checkpoint records its claim whatever the row
// held, as it lowers the row's checkpoint to 0; a job outside a
// distributed setup (claim 0) is never fenced and clears the claim. A job
// started from a savepoint into a new checkpoint root restores a
// checkpoint yet numbers its claims from 1 again too: the row records
// the claim's incarnation beside its epoch (column claim_incarnation,
// connector.ClaimIncarnation: one per start record of the job's
// checkpoint root), epochs are compared only within one incarnation, and
// a writer or commit of another incarnation records its own as a fresh
// start does.
//
// A progress table made before claims were recorded gets the columns
// when a writer starts (ALTER TABLE ... ADD COLUMN IF NOT EXISTS, with
// constant defaults, 0 and the empty string: a change of the catalog
// alone); a user who is not the table's owner is told that statement to
// run, and the writer fails.
//
// # At start
//
// A writer connects (an error names the host, port, database and user,
// never the password), makes the progress table if it is missing (or
// checks it), and checks the table: that it exists, that each column
// exists and can be written (not generated), that the user may INSERT
// (and UPDATE, upserting), and for an upsert that a primary key or unique
// index covers exactly the keys. Each of these errors names the table or
// column and wraps connector.ErrInvalidConfiguration, which fails the job
// at once.
//
// A commit that fails (the server is gone, a constraint rejects a row,
// the table changed since the rows were encoded) fails the job with the
// server's error, naming the checkpoint, subtask and table; the job
// restarts per its restart strategy and commits again. The rows stay in
// the checkpoint until they are committed: a row the table will never
// accept (a unique violation in insert mode, say) must be dealt with in
// the database before the job can go on.
package postgres
