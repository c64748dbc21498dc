package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector/postgres"
	"github.com/splitflow/splitflow/connector/postgres/cdc"
	"github.com/splitflow/splitflow/internal/pgtest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// keyText is a change's primary key as one string ("1", "a|3"), from
// row; "" when row lacks it.
func keyText(c cdc.Change, row map[string]any) string {
	var parts []string
	for _, k := range c.Key {
		v, ok := row[k]
		if !ok {
			return ""
		}
		parts = append(parts, fmt.Sprint(v))
	}
	return strings.Join(parts, "|")
}

// replaySink writes one row per change to out, in the order emitted,
// through the exactly-once PostgreSQL sink: the table, the op, the key
// (the old key too for an update that changed it), v and the LSN.
func replaySink(t *testing.T, db, out string) *postgres.Sink[cdc.Change] {
	t.Helper()
	execSQL(t, db, "CREATE TABLE "+out+" (seq bigserial, tbl text NOT NULL, op text NOT NULL, k text NOT NULL, before_k text, v int, lsn bigint NOT NULL)")
	sink, err := postgres.NewSink(db, out, []string{"tbl", "op", "k", "before_k", "v", "lsn"}, func(c cdc.Change, row []any) error {
		k := keyText(c, c.After)
		if c.Op == cdc.OpDelete {
			k = keyText(c, c.Before)
		}
		var before, v any
		if c.Op == cdc.OpUpdate && c.Before != nil {
			before = keyText(c, c.Before)
		}
		if c.After != nil {
			v = c.After["v"]
		}
		row[0], row[1], row[2], row[3], row[4], row[5] = c.QualifiedTable(), c.Op.String(), k, before, v, int64(c.LSN)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

// replay applies the changes of out in their order and returns each
// table's rows (key -> v); it fails the test on a row read twice by the
// snapshot, a snapshot row after a change, or a change written twice.
func replay(t *testing.T, db, out string) map[string]map[string]int32 {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, db)
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, "SELECT seq, tbl, op, k, before_k, v, lsn FROM "+out+" ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	state := map[string]map[string]int32{}
	read := map[string]bool{}
	changes := map[string]bool{}
	changed := false
	for rows.Next() {
		var seq, lsn int64
		var tbl, op, k string
		var before *string
		var v *int32
		if err := rows.Scan(&seq, &tbl, &op, &k, &before, &v, &lsn); err != nil {
			t.Fatal(err)
		}
		if state[tbl] == nil {
			state[tbl] = map[string]int32{}
		}
		switch op {
		case "r":
			if read[tbl+" "+k] {
				t.Fatalf("row %s of %s read twice by the snapshot (output row %d)", k, tbl, seq)
			}
			if changed {
				t.Fatalf("snapshot row %s of %s after a change (output row %d)", k, tbl, seq)
			}
			read[tbl+" "+k] = true
			state[tbl][k] = *v
			continue
		case "c":
			state[tbl][k] = *v
		case "u":
			if before != nil {
				delete(state[tbl], *before)
			}
			state[tbl][k] = *v
		case "d":
			delete(state[tbl], k)
		}
		changed = true
		id := fmt.Sprintf("%s %s %s %d", tbl, op, k, lsn)
		if changes[id] {
			t.Fatalf("change %s written twice (output row %d)", id, seq)
		}
		changes[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return state
}

// tableState is what the tables hold now, as replay gives it.
func tableState(t *testing.T, db string) map[string]map[string]int32 {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, db)
	defer func() { _ = conn.Close(ctx) }()
	state := map[string]map[string]int32{"public.items": {}, "public.pairs": {}}
	for tbl, q := range map[string]string{
		"public.items": "SELECT id::text, v FROM items",
		"public.pairs": "SELECT a || '|' || b, v FROM pairs",
	} {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			var v int32
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			state[tbl][k] = v
		}
		rows.Close()
	}
	return state
}

func connect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// A snapshot interrupted by a failure after a completed checkpoint held
// some of its rows resumes after the last row that checkpoint holds, in
// a snapshot of its own, and the stream starts at the slot's consistent
// point: each change that committed between the two snapshots is
// emitted only if the snapshot read of its row came before it (an
// update that moved a row's key across the resume point becomes the
// delete of the old key, or the insert of the new one). The output,
// replayed, is the tables' contents: every row once as r, all of them
// before the first change, no change twice. The failure comes in a
// table with a bigint key, then in one with a composite text key, whose
// rows the server orders and compares.
func TestSnapshotResumesAfterAFailureExactly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failAt int64 // the snapshot row past which the job fails
	}{{"in items", 700}, {"in pairs", 3150}} {
		t.Run(tc.name, func(t *testing.T) { snapshotResumesExactly(t, tc.failAt) })
	}
}

func snapshotResumesExactly(t *testing.T, failAt int64) {
	db := pgtest.Get(t).Database(t)
	execSQL(t, db,
		"CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO items SELECT g, 0 FROM generate_series(1, 3000) g",
		"CREATE TABLE pairs (a text, b int, v int NOT NULL, PRIMARY KEY (a, b))",
		"INSERT INTO pairs SELECT chr(65 + g % 26) || chr(97 + g % 7), g, 0 FROM generate_series(1, 400) g")
	slot := slotName("resume")
	var completed, seen, armedAt atomic.Int64
	var failed atomic.Bool
	paused, goOn := make(chan struct{}), make(chan struct{})
	env := runtime.NewEnvironment(quiet,
		runtime.WithCheckpointInterval(10*time.Millisecond), runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 20*time.Millisecond)),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }}))
	in := runtime.FromSource(env, newSource(t, db, slot, cdc.WithTables("items", "pairs"), cdc.WithBatchSize(50)), "cdc").UID("cdc")
	mapped := runtime.Map(in, func(c cdc.Change) (cdc.Change, error) {
		n := seen.Add(1)
		if n == failAt {
			armedAt.Store(completed.Load())
		}
		if c.Op == cdc.OpRead && n > failAt && !failed.Load() && completed.Load() > armedAt.Load()+1 {
			// A checkpoint after row failAt completed: change the tables
			// while the job stands here, then fail it.
			failed.Store(true)
			close(paused)
			<-goOn
			return c, errors.New("injected failure in the snapshot")
		}
		switch {
		case n > failAt && !failed.Load():
			// Armed, waiting for two checkpoints to complete: the rows
			// left in the snapshot (250 past row 3150) must outlast
			// them on a loaded machine too, where a checkpoint takes
			// far longer than the 10 ms interval. Blocking here instead
			// would hold back the barriers behind this row.
			time.Sleep(20 * time.Millisecond)
		case n%10 == 0:
			time.Sleep(time.Millisecond)
		}
		return c, nil
	}).UID("map")
	runtime.SinkTo(mapped, replaySink(t, db, "out")).UID("out")
	stop := runJob(t, env, "snapshot-resume")
	select {
	case <-paused:
	case <-time.After(60 * time.Second):
		t.Fatal("the snapshot never reached the failure point")
	}
	if n := queryInt(t, db, "SELECT count(*) FROM out WHERE op = 'r'"); n == 0 || n >= 3400 {
		t.Fatalf("%d snapshot rows committed before the failure, want some and not all", n)
	}
	execSQL(t, db,
		"UPDATE items SET v = v + 1 WHERE id % 100 = 0",
		"DELETE FROM items WHERE id % 100 = 1",
		"INSERT INTO items SELECT g, 7 FROM generate_series(3001, 3050) g",
		"INSERT INTO items VALUES (0, 7)",
		"UPDATE items SET id = 10050, v = 8 WHERE id = 50",   // from before the resume point to after it
		"UPDATE items SET id = -2500, v = 9 WHERE id = 2500", // from after it to before it
		"UPDATE pairs SET v = 3 WHERE b % 10 = 0",
		"UPDATE pairs SET a = 'Zz', v = 5 WHERE b = 1",   // Bb: early in pairs, to its end
		"UPDATE pairs SET a = 'Aa', v = 6 WHERE b = 399", // Ja: to the start
		"DELETE FROM pairs WHERE b % 10 = 5",
		"INSERT INTO pairs VALUES ('Zz', 1000, 4), ('Aa', -1, 4)")
	close(goOn)
	// Row 6000, inserted while the job restarts, comes as r or as c
	// depending on when the resumed read begins: either way it is
	// written once the snapshot ended.
	execSQL(t, db, "INSERT INTO items VALUES (6000, 6)")
	waitFor(t, "the snapshot to end", func() bool {
		return queryInt(t, db, "SELECT count(*) FROM out WHERE tbl = 'public.items' AND k = '6000'") > 0
	})
	execSQL(t, db, "UPDATE items SET v = 100 WHERE id IN (1, 10050, -2500)", "INSERT INTO items VALUES (5000, 5)")
	want := tableState(t, db)
	deadline := time.Now().Add(60 * time.Second)
	for got := replay(t, db, "out"); !maps.EqualFunc(got, want, maps.Equal); got = replay(t, db, "out") {
		if time.Now().After(deadline) {
			for tbl := range want {
				for k, v := range want[tbl] {
					if g, ok := got[tbl][k]; !ok || g != v {
						t.Errorf("%s row %s: replayed %v (present %v), table holds %d", tbl, k, g, ok, v)
					}
				}
				for k, g := range got[tbl] {
					if _, ok := want[tbl][k]; !ok {
						t.Errorf("%s row %s: replayed %d, not in the table", tbl, k, g)
					}
				}
			}
			t.Fatal("the replayed output never matched the tables")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a duplicate would follow
	replay(t, db, "out")
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if !failed.Load() {
		t.Fatal("no failure was injected")
	}
	if n := queryInt(t, db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1", slot+"_resume%"); n != 0 {
		t.Fatalf("%d temporary slots of the resumed snapshot left", n)
	}
	t.Logf("%d snapshot rows, %d changes", queryInt(t, db, "SELECT count(*) FROM out WHERE op = 'r'"), queryInt(t, db, "SELECT count(*) FROM out WHERE op <> 'r'"))
}
