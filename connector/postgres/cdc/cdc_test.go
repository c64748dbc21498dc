package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/postgres/cdc"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/splitflow/splitflow/runtime"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var seq atomic.Int64

// slotName returns a slot name no other test of the binary uses: slots
// are the server's, not a database's.
func slotName(prefix string) string { return fmt.Sprintf("%s_%d", prefix, seq.Add(1)) }

func execSQL(t testing.TB, connString string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func queryInt(t testing.TB, connString, query string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int64
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

var quiet = runtime.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// collectSink keeps every change written, duplicates included.
type collectSink struct {
	mu  sync.Mutex
	got []cdc.Change
}

func (s *collectSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[cdc.Change], error) {
	return s, nil
}
func (s *collectSink) Write(v cdc.Change, _ connector.WriteContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, v)
	return nil
}
func (s *collectSink) Flush(bool) error { return nil }
func (s *collectSink) Close() error     { return nil }

func (s *collectSink) changes() []cdc.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cdc.Change(nil), s.got...)
}

// waitFor polls cond every 20ms until it holds or 30s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runJob runs source -> sink in the background; stop cancels it and
// returns Execute's error.
func runJob(t *testing.T, env *runtime.Environment, name string) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, name) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("the job did not stop within 30s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newSource(t *testing.T, db, slot string, opts ...cdc.Option) *cdc.Source {
	t.Helper()
	src, err := cdc.NewSource(db, append([]cdc.Option{cdc.WithSlot(slot), cdc.WithPublication(slot)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func idOf(row map[string]any) any { return row["id"] }

// The snapshot's rows come as op r, then inserts, updates (of a value and
// of the key), deletes and a large transaction come as c, u and d with
// their before and after images and the transaction's id and commit LSN;
// a table added to the publication while the job runs is captured from
// then on.
func TestSnapshotThenStream(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	execSQL(t, db,
		"CREATE TABLE orders (id bigint PRIMARY KEY, amount int NOT NULL, note text)",
		"INSERT INTO orders VALUES (1, 10, 'a'), (2, 20, NULL), (3, 30, 'c')")
	slot := slotName("stream")
	src := newSource(t, db, slot, cdc.WithTables("public.orders"))
	env := runtime.NewEnvironment(quiet, runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()))
	sink := &collectSink{}
	runtime.SinkTo(runtime.FromSource(env, src, "cdc").UID("cdc"), connector.Sink[cdc.Change](sink)).UID("out")
	stop := runJob(t, env, "snapshot-then-stream")
	waitFor(t, "the snapshot", func() bool { return len(sink.changes()) >= 3 })

	const big = 20000
	execSQL(t, db,
		"INSERT INTO orders VALUES (4, 40, 'd')",
		"UPDATE orders SET amount = 11 WHERE id = 1",
		"UPDATE orders SET id = 20 WHERE id = 2",
		"DELETE FROM orders WHERE id = 3",
		fmt.Sprintf("INSERT INTO orders SELECT 1000 + g, g, NULL FROM generate_series(1, %d) g", big),
		"CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL)",
		"ALTER PUBLICATION "+slot+" ADD TABLE customers",
		"INSERT INTO customers VALUES (7, 'ada')")
	want := 3 + 4 + big + 1
	waitFor(t, fmt.Sprintf("%d changes", want), func() bool { return len(sink.changes()) >= want })
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	got := sink.changes()
	if len(got) != want {
		t.Fatalf("%d changes, want %d", len(got), want)
	}
	for i, c := range got[:3] {
		if c.Op != cdc.OpRead || c.After["id"] != int64(i+1) || c.Before != nil || c.QualifiedTable() != "public.orders" {
			t.Fatalf("snapshot row %d: %+v", i, c)
		}
	}
	if got[1].After["note"] != nil || got[0].After["amount"] != int32(10) || got[0].After["note"] != "a" {
		t.Fatalf("snapshot row values: %+v %+v", got[0].After, got[1].After)
	}
	ins, upd, key, del := got[3], got[4], got[5], got[6]
	if ins.Op != cdc.OpCreate || ins.After["id"] != int64(4) || ins.After["amount"] != int32(40) || ins.TxID == 0 || ins.CommitLSN == 0 {
		t.Fatalf("insert: %+v", ins)
	}
	if upd.Op != cdc.OpUpdate || upd.After["amount"] != int32(11) || upd.Before != nil {
		t.Fatalf("update of a value (default replica identity: no before image): %+v", upd)
	}
	if key.Op != cdc.OpUpdate || key.Before["id"] != int64(2) || key.After["id"] != int64(20) || len(key.Before) != 1 {
		t.Fatalf("update of the key (the old key in before): %+v", key)
	}
	if del.Op != cdc.OpDelete || del.Before["id"] != int64(3) || del.After != nil {
		t.Fatalf("delete: %+v", del)
	}
	if k, _ := cdc.MarshalKey(del); string(k) != `{"id":3}` {
		t.Fatalf("key of the delete: %s", k)
	}
	tx := got[7].TxID
	for i, c := range got[7 : 7+big] {
		if c.Op != cdc.OpCreate || c.TxID != tx || c.After["id"] != int64(1001+i) {
			t.Fatalf("change %d of the large transaction: %+v", i, c)
		}
		if i > 0 && c.LSN <= got[7+i-1].LSN {
			t.Fatalf("change %d of the large transaction at %v, after %v", i, c.LSN, got[7+i-1].LSN)
		}
	}
	last := got[len(got)-1]
	if last.QualifiedTable() != "public.customers" || last.Op != cdc.OpCreate || last.After["name"] != "ada" {
		t.Fatalf("change of the table added to the publication: %+v", last)
	}
}

// The slot is confirmed only when a checkpoint completes: a job without
// checkpoints reads changes but leaves the slot before them; with
// checkpoints the slot moves past them.
func TestSlotIsConfirmedOnlyWhenACheckpointCompletes(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)")
	slot := slotName("confirm")
	confirmed := func() int64 {
		return queryInt(t, db, "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1", slot)
	}
	run := func(want int, opts ...runtime.Option) (lastCommit int64, stop func() error) {
		env := runtime.NewEnvironment(append([]runtime.Option{quiet}, opts...)...)
		sink := &collectSink{}
		runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t"), cdc.WithStatusInterval(50*time.Millisecond)), "cdc").UID("cdc"),
			connector.Sink[cdc.Change](sink)).UID("out")
		stop = runJob(t, env, "confirm")
		waitFor(t, "the slot", func() bool {
			return queryInt(t, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot) == 1
		})
		execSQL(t, db, fmt.Sprintf("INSERT INTO t SELECT generate_series(%d, %d)", want*10, want*10+9))
		waitFor(t, fmt.Sprintf("%d changes", want), func() bool { return len(sink.changes()) >= want })
		got := sink.changes()
		return int64(got[len(got)-1].CommitLSN), stop
	}
	commit, stop := run(10)
	time.Sleep(300 * time.Millisecond) // several status intervals
	if c := confirmed(); c >= commit {
		t.Fatalf("slot confirmed at %d, past the commit at %d, by a job without checkpoints", c, commit)
	}
	_ = stop()

	commit, stop = run(20, runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()))
	waitFor(t, "the slot confirmed past the commit after a checkpoint", func() bool { return confirmed() > commit })
	_ = stop()
}

// At parallelism 2 the one split is read by subtask 0; the other reader
// has nothing to read, and checkpoints still complete and confirm the
// slot.
func TestOneSplitAtParallelismTwo(t *testing.T) {
	db := pgtest.Get(t).Database(t)
	execSQL(t, db, "CREATE TABLE t (id bigint PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	slot := slotName("par2")
	env := runtime.NewEnvironment(quiet, runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()))
	sink := &collectSink{}
	runtime.SinkTo(runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("t")), "cdc").UID("cdc"), connector.Sink[cdc.Change](sink)).UID("out")
	stop := runJob(t, env, "parallelism-2")
	waitFor(t, "the snapshot", func() bool { return len(sink.changes()) == 1 })
	execSQL(t, db, "INSERT INTO t VALUES (2)")
	waitFor(t, "the insert", func() bool { return len(sink.changes()) == 2 })
	commit := int64(sink.changes()[1].CommitLSN)
	waitFor(t, "the slot confirmed past the insert", func() bool {
		return queryInt(t, db, "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1", slot) > commit
	})
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
