package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/postgres"
	"github.com/splitflow/splitflow/connector/postgres/cdc"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// changeSink writes one row per change, (tbl, op, id, lsn), to table out
// of db through the exactly-once PostgreSQL sink: a change written twice
// is two rows.
func changeSink(t *testing.T, db, out string) *postgres.Sink[cdc.Change] {
	t.Helper()
	execSQL(t, db, "CREATE TABLE "+out+" (tbl text NOT NULL, op text NOT NULL, id bigint NOT NULL, lsn bigint NOT NULL)")
	sink, err := postgres.NewSink(db, out, []string{"tbl", "op", "id", "lsn"}, func(c cdc.Change, row []any) error {
		id, _ := c.KeyValues()["id"].(int64)
		row[0], row[1], row[2], row[3] = c.QualifiedTable(), c.Op.String(), id, int64(c.LSN)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

// checkOnce fails the test unless out holds want rows, none twice.
func checkOnce(t *testing.T, db, out string, want int64) {
	t.Helper()
	if n := queryInt(t, db, "SELECT count(*) FROM "+out); n != want {
		t.Fatalf("%d changes written, want %d", n, want)
	}
	if d := queryInt(t, db, "SELECT count(*) FROM (SELECT 1 FROM "+out+" GROUP BY tbl, op, id, lsn HAVING count(*) > 1) d"); d != 0 {
		t.Fatalf("%d changes written more than once", d)
	}
}

// Exactly once under failures in the runtime: the job fails twice, each
// time after a checkpoint completed in the middle of a transaction of 5000
// rows; the restored source skips what its checkpoint holds (the
// transactions before it and the changes of the partly emitted one) and
// every change is written once.
func TestExactlyOnceUnderInjectedFailures(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	execSQL(t, db,
		"CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO items SELECT g, 0 FROM generate_series(1, 100) g")
	slot := slotName("eo")
	env := runtime.NewEnvironment(quiet,
		runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithRestartStrategy(restart.FixedDelay(5, 20*time.Millisecond)))
	var seen, failures atomic.Int64
	var armedAt atomic.Int64 // records seen when the failure was armed
	var completed atomic.Int64
	in := runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("items"), cdc.WithBatchSize(200)), "cdc").UID("cdc")
	mapped := runtime.Map(in, func(c cdc.Change) (cdc.Change, error) {
		n := seen.Add(1)
		// Past the snapshot, in the large transactions: arm at one record,
		// fail 700 records later, with checkpoints every 10ms between.
		if c.Op == cdc.OpCreate && failures.Load() < 2 {
			if a := armedAt.Load(); a == 0 {
				armedAt.Store(n)
			} else if n-a > 700 && completed.Load() > 0 {
				failures.Add(1)
				armedAt.Store(0)
				return c, errors.New("injected failure")
			}
		}
		if n%50 == 0 {
			time.Sleep(time.Millisecond) // let checkpoints fall inside the transaction
		}
		return c, nil
	}).UID("map")
	runtime.SinkTo(mapped, changeSink(t, db, "changes")).UID("out")
	stop := runJob(t, env, "exactly-once")
	waitFor(t, "the snapshot", func() bool { return queryInt(t, db, "SELECT count(*) FROM changes") >= 100 })
	completed.Store(1)
	execSQL(t, db, "INSERT INTO items SELECT g, 1 FROM generate_series(101, 5100) g")
	execSQL(t, db, "UPDATE items SET v = 2 WHERE id <= 50", "DELETE FROM items WHERE id > 5050")
	execSQL(t, db, "INSERT INTO items SELECT g, 3 FROM generate_series(6001, 8000) g")
	const want = 100 + 5000 + 50 + 50 + 2000
	waitFor(t, fmt.Sprintf("%d changes written", want), func() bool { return queryInt(t, db, "SELECT count(*) FROM changes") >= want })
	time.Sleep(100 * time.Millisecond) // a duplicate would follow
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if failures.Load() == 0 {
		t.Fatal("no failure was injected; the test proves nothing")
	}
	checkOnce(t, db, "changes", want)
	t.Logf("%d records through the map for %d changes, %d failures", seen.Load(), want, failures.Load())
}

// A slot dropped while the job was away is an error naming the slot when
// the job is restored; the source never takes a new snapshot on its own.
func TestDroppedSlotIsAnErrorNamingIt(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	slot, dir := snapshotThenStop(t, db, "dropped")
	execSQL(t, db, "SELECT pg_drop_replication_slot('"+slot+"')")

	env := runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 10*time.Millisecond)))
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](&collectSink{})).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.Execute(ctx, "dropped")
	if !errors.Is(err, cdc.ErrSlotLost) || !strings.Contains(err.Error(), `"`+slot+`"`) {
		t.Fatalf("restored job over a dropped slot: %v; want an error naming slot %q and wrapping ErrSlotLost", err, slot)
	}
	if n := queryInt(t, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot); n != 0 {
		t.Fatal("the restored job made the slot anew")
	}
}

// A slot that lost the WAL it holds while the job was away (past
// max_slot_wal_keep_size, PostgreSQL invalidates it at a checkpoint:
// wal_status "lost") is an error naming the slot when the job is restored:
// the changes in the removed WAL are gone, so the source neither streams
// from the slot nor takes a new snapshot on its own.
func TestSlotThatLostItsWALIsAnErrorNamingIt(t *testing.T) {
	cluster := pgtest.Start(t)
	if cluster.External() {
		t.Skip("the test changes max_slot_wal_keep_size, which is not done to an external server")
	}
	db := cluster.Database(t)
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	slot := slotName("walgone")
	dir := t.TempDir()
	var completed atomic.Int64
	env := runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }}))
	sink := &collectSink{}
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](sink)).UID("out")
	stop := runJob(t, env, "wal-gone")
	waitFor(t, "the snapshot", func() bool { return len(sink.changes()) == 1 })
	c := completed.Load()
	waitFor(t, "a checkpoint after the snapshot", func() bool { return completed.Load() > c+1 })
	_ = stop()

	// With the keep size under one segment, a checkpoint keeps the
	// current segment alone: the slot's restart_lsn falls behind it once
	// the WAL was switched and written past, and the checkpoint
	// invalidates the slot.
	execSQL(t, db, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()",
		"CREATE TABLE filler (id bigint, pad text)")
	deadline := time.Now().Add(10 * time.Second)
	for queryInt(t, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND wal_status = 'lost'", slot) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot %q not lost 10s after max_slot_wal_keep_size = 1MB and WAL written past it", slot)
		}
		execSQL(t, db, "SELECT pg_switch_wal()",
			"INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g", // about 3 MB of WAL
			"SELECT pg_switch_wal()", "CHECKPOINT")
	}

	env = runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 10*time.Millisecond)))
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](&collectSink{})).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.Execute(ctx, "wal-gone")
	if !errors.Is(err, cdc.ErrSlotLost) || !strings.Contains(err.Error(), `"`+slot+`"`) || !strings.Contains(err.Error(), "max_slot_wal_keep_size") {
		t.Fatalf("restored job over a slot that lost its WAL: %v; want an error naming slot %q and max_slot_wal_keep_size, wrapping ErrSlotLost", err, slot)
	}
}

// After the server itself restarted (a fast shutdown ends the replication
// connection), the job restarts from its latest checkpoint, the slot
// resends from its confirmed position, and every change is written once.
func TestRestartAfterTheServerRestarted(t *testing.T) {
	cluster := pgtest.Start(t)
	if cluster.External() {
		t.Skip("an external server is not restarted by the tests")
	}
	db := cluster.Database(t)
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)", "INSERT INTO t SELECT generate_series(1, 10)")
	slot := slotName("restart")
	env := runtime.NewEnvironment(quiet,
		runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithRestartStrategy(restart.FixedDelay(100, 100*time.Millisecond)))
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), changeSink(t, db, "changes")).UID("out")
	stop := runJob(t, env, "server-restart")
	count := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			return -1
		}
		defer func() { _ = conn.Close(ctx) }()
		var n int64
		if conn.QueryRow(ctx, "SELECT count(*) FROM changes").Scan(&n) != nil {
			return -1
		}
		return n
	}
	waitFor(t, "the snapshot", func() bool { return count() >= 10 })
	execSQL(t, db, "INSERT INTO t SELECT generate_series(11, 1010)")
	if err := cluster.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	execSQL(t, db, "INSERT INTO t SELECT generate_series(1011, 1510)", "DELETE FROM t WHERE id <= 5")
	waitFor(t, "1515 changes written", func() bool { return count() >= 1515 })
	time.Sleep(100 * time.Millisecond)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	checkOnce(t, db, "changes", 1515)
}

// A failure during the snapshot of a table without a primary key, after
// a completed checkpoint held some of its rows: the snapshot cannot be
// resumed from a key, so by default the restored job fails at once with
// an error naming the slot and the table; with
// WithSnapshotRestartAfterFailure it takes the snapshot again and every
// row is emitted, those before the failure twice.
func TestFailureDuringTheSnapshotOfATableWithoutAPrimaryKey(t *testing.T) {
	for _, again := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", again), func(t *testing.T) {
			db := pgtest.Get(t).Database(t)
			execSQL(t, db, "CREATE TABLE t (id bigint NOT NULL)", "INSERT INTO t SELECT generate_series(1, 300)")
			slot := slotName("snapfail")
			var completed, seen atomic.Int64
			var failed atomic.Bool
			env := runtime.NewEnvironment(quiet,
				runtime.WithCheckpointInterval(5*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()),
				runtime.WithRestartStrategy(restart.FixedDelay(3, 10*time.Millisecond)),
				runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }}))
			in := runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t"), cdc.WithBatchSize(10),
				cdc.WithSnapshotRestartAfterFailure(again)), "cdc").UID("cdc")
			var armed atomic.Int64
			mapped := runtime.Map(in, func(c cdc.Change) (cdc.Change, error) {
				n := seen.Add(1)
				if n == 20 {
					armed.Store(completed.Load())
				}
				if n > 20 && !failed.Load() && completed.Load() > armed.Load()+1 {
					failed.Store(true)
					return c, errors.New("injected failure in the snapshot")
				}
				time.Sleep(time.Millisecond)
				return c, nil
			}).UID("map")
			sink := &collectSink{}
			runtime.SinkTo(mapped, connector.Sink[cdc.Change](sink)).UID("out")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- env.Execute(ctx, "snapshot-failure") }()
			if !again {
				err := <-done
				if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), `"`+slot+`"`) ||
					!strings.Contains(err.Error(), "table public.t has no primary key") {
					t.Fatalf("failure in the snapshot: %v; want an error naming slot %q and table public.t without a primary key", err, slot)
				}
				return
			}
			waitFor(t, "every row", func() bool {
				ids := map[any]bool{}
				for _, c := range sink.changes() {
					ids[c.After["id"]] = true
				}
				return len(ids) == 300
			})
			cancel()
			<-done
			if !failed.Load() {
				t.Fatal("no failure was injected")
			}
		})
	}
}

// A slot another connection still holds when the source starts (the
// walsender of the attempt before, not yet exited, or of a process the
// server has not yet found dead) is waited for: the source streams once
// the slot is free, and the job does not fail.
func TestASlotStillHeldWhenTheSourceStartsIsWaitedFor(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	slot, dir := snapshotThenStop(t, db, "held")
	// Another connection streams the slot while the job starts again.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := holdSlot(ctx, t, db, slot, false)

	env := runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithRestartStrategy(restart.None()))
	again := &collectSink{}
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](again)).UID("out")
	jctx, jcancel := context.WithCancel(context.Background())
	defer jcancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(jctx, "held") }()
	time.Sleep(time.Second)
	holder.Close(ctx)
	execSQL(t, db, "INSERT INTO t VALUES (2)")
	for deadline := time.Now().Add(30 * time.Second); len(again.changes()) == 0; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the job ended before the slot was let go: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no change read within 30s after the slot was let go")
		}
	}
	if got := again.changes(); len(got) != 1 || got[0].After["id"] != int64(2) {
		t.Fatalf("read %+v, want the insert of id 2 alone", got)
	}
	jcancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A slot held for longer than WithSlotWait fails the source with an error
// that says the slot is held and how long the source waited.
func TestASlotHeldLongerThanTheSlotWaitIsAnErrorSayingSo(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	slot := slotName("busy")
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)", "CREATE PUBLICATION "+slot+" FOR TABLE t")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holdSlot(ctx, t, db, slot, true)

	env := runtime.NewEnvironment(quiet, runtime.WithRestartStrategy(restart.None()))
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithSlotWait(300*time.Millisecond)), "cdc").UID("cdc"),
		connector.Sink[cdc.Change](&collectSink{})).UID("out")
	began := time.Now()
	err := env.Execute(ctx, "busy")
	if err == nil || !strings.Contains(err.Error(), "55006") || !strings.Contains(err.Error(), "WithSlotWait") {
		t.Fatalf("a slot held throughout: %v; want PostgreSQL's error and the wait named", err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("failed after %v, before the slot wait of 300ms", took)
	}
	if _, err := cdc.NewSource(db, cdc.WithSlotWait(-time.Second)); err == nil || !strings.Contains(err.Error(), "slot wait") {
		t.Fatalf("a negative slot wait: %v; want an error naming it", err)
	}
}

// snapshotThenStop makes table t with one row, runs a job that captures
// it through a new slot until a checkpoint after the snapshot completed,
// and stops the job. It returns the slot and the checkpoint directory,
// once the server has let the slot go (when the job's walsender process
// has exited, a moment after the job closed its connection; only then can
// the slot be dropped or streamed by another connection).
func snapshotThenStop(t *testing.T, db, name string) (slot, dir string) {
	t.Helper()
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	slot, dir = slotName(name), t.TempDir()
	var completed atomic.Int64
	env := runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }}))
	sink := &collectSink{}
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](sink)).UID("out")
	stop := runJob(t, env, name)
	waitFor(t, "the snapshot", func() bool { return len(sink.changes()) == 1 })
	c := completed.Load()
	waitFor(t, "a checkpoint after the snapshot", func() bool { return completed.Load() > c+1 })
	_ = stop()
	waitFor(t, "the slot let go", func() bool {
		return queryInt(t, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot) == 0
	})
	return slot, dir
}

// holdSlot streams slot (of publication slot) on a replication connection
// of its own, creating the slot first when create is set, until the
// returned connection is closed.
func holdSlot(ctx context.Context, t *testing.T, db, slot string, create bool) *pgconn.PgConn {
	t.Helper()
	cfg, err := pgconn.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	holder, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	if create {
		if _, err := pglogrepl.CreateReplicationSlot(ctx, holder, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pglogrepl.StartReplication(ctx, holder, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names '" + slot + "'"},
	}); err != nil {
		t.Fatal(err)
	}
	return holder
}
