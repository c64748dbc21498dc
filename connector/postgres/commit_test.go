package postgres

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

type event struct {
	ID   int64
	Name string
}

func eventRow(e event, row []any) error {
	row[0], row[1] = e.ID, e.Name
	return nil
}

// prepared writes events with a new writer of subtask and returns the
// committable of checkpoint, through the serializer.
func prepared(t *testing.T, sink *Sink[event], ictx initContext, checkpoint int64, events ...event) Committable {
	t.Helper()
	ictx.committer = true
	w, err := sink.CreateWriter(ictx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	cw := w.(connector.CommittingSinkWriter[event, Committable])
	for _, e := range events {
		if err := cw.Write(e, connector.WriteContext{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cw.Flush(false); err != nil {
		t.Fatal(err)
	}
	cs, err := cw.PrepareCommit(checkpoint)
	if err != nil || len(cs) != 1 {
		t.Fatalf("PrepareCommit: %v, %d committables", err, len(cs))
	}
	return roundTrip(t, cs[0])
}

func signals(reqs []*request) []string {
	var s []string
	for _, r := range reqs {
		s = append(s, r.signal)
	}
	return s
}

// The commit rule on PostgreSQL: rows prepared for a checkpoint are not
// visible before their commit; a commit of a checkpoint not yet recorded
// writes its rows once; a commit replayed after a restart (a new
// committer, the committable back from the checkpoint) of a checkpoint
// the progress row records writes nothing and says so.
func TestReplayedCommitOfARecordedCheckpointWritesNothing(t *testing.T) {
	db := database(t)
	table := tableName("events")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []int64 {
		got := mustInt64s(t, db, "SELECT id FROM "+table)
		slices.Sort(got)
		return got
	}
	c1 := prepared(t, sink, initContext{}, 1, event{1, "a"}, event{2, "b"}, event{3, ""})
	if got := ids(); len(got) != 0 {
		t.Fatalf("rows of a checkpoint not yet committed are visible: %v", got)
	}
	if got := signals(commit(t, sink, c1)); !slices.Equal(got, []string{""}) {
		t.Fatalf("first commit signalled %v, want nothing (committed)", got)
	}
	if got := ids(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("after the commit of checkpoint 1: ids %v, want [1 2 3]", got)
	}
	if got := signals(commit(t, sink, c1)); !slices.Equal(got, []string{"already"}) {
		t.Fatalf("replayed commit signalled %v, want already committed", got)
	}
	if got := ids(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("after the replayed commit of checkpoint 1: ids %v, want [1 2 3] (written once)", got)
	}

	// A restart replays checkpoint 1's committable with checkpoint 2's,
	// in any order: 1 is skipped, 2 is written once.
	c2 := prepared(t, sink, initContext{restored: 1}, 2, event{4, "d"})
	if got := signals(commit(t, sink, c2, c1)); !slices.Equal(got, []string{"", "already"}) {
		t.Fatalf("commit of 2 with 1 replayed signalled %v, want [committed already]", got)
	}
	if got := signals(commit(t, sink, c1, c2)); !slices.Equal(got, []string{"already", "already"}) {
		t.Fatalf("replay of 1 and 2 signalled %v, want both already committed", got)
	}
	if got := ids(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("ids %v, want [1 2 3 4]", got)
	}
	if got := mustInt64s(t, db, "SELECT checkpoint_id FROM "+DefaultProgressTable+" WHERE job = 'test-job' AND subtask = 0"); !slices.Equal(got, []int64{2}) {
		t.Fatalf("progress of subtask 0: %v, want [2]", got)
	}
}

// Upsert mode: the last row of a key within a checkpoint wins, a later
// checkpoint updates it, and a replayed commit changes nothing, not even
// a row a later checkpoint updated since.
func TestUpsertReplayDoesNotUndoALaterCheckpoint(t *testing.T) {
	db := database(t)
	table := tableName("latest")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, name text NOT NULL)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow, WithUpsert("id"))
	if err != nil {
		t.Fatal(err)
	}
	names := func() map[int64]string {
		rows := map[int64]string{}
		for _, id := range mustInt64s(t, db, "SELECT id FROM "+table) {
			var name string
			execQueryRow(t, db, "SELECT name FROM "+table+" WHERE id = $1", []any{id}, &name)
			rows[id] = name
		}
		return rows
	}
	c1 := prepared(t, sink, initContext{}, 1, event{1, "a"}, event{2, "b"}, event{1, "a2"})
	if c1.Count != 2 {
		t.Fatalf("checkpoint 1 holds %d rows, want 2 (the last of key 1 and key 2)", c1.Count)
	}
	c2 := prepared(t, sink, initContext{restored: 1}, 2, event{2, "b2"}, event{3, "c"})
	commit(t, sink, c1)
	commit(t, sink, c2)
	want := map[int64]string{1: "a2", 2: "b2", 3: "c"}
	if got := names(); !maps.Equal(got, want) {
		t.Fatalf("after checkpoints 1 and 2: %v, want %v", got, want)
	}
	if got := signals(commit(t, sink, c1)); !slices.Equal(got, []string{"already"}) {
		t.Fatalf("replayed commit of 1 signalled %v", got)
	}
	if got := names(); !maps.Equal(got, want) {
		t.Fatalf("a replayed commit of checkpoint 1 changed the table: %v, want %v", got, want)
	}
}

// A job started afresh (no checkpoint restored) numbers its checkpoints
// from 1 again: its writers lower their progress to 0, so an earlier
// run's progress never makes its commits look done. A job restored from
// checkpoint R lowers it to R: a rewind writes again what followed R.
func TestFreshStartAndRewindLowerTheProgress(t *testing.T) {
	db := database(t)
	table := tableName("runs")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, sink, prepared(t, sink, initContext{}, 7, event{1, "first run"}))
	// A second run, fresh: its checkpoint 1 must be written.
	commit(t, sink, prepared(t, sink, initContext{}, 1, event{2, "second run"}))
	// A third run rewinds to checkpoint 1 of the second: its checkpoint 2
	// is written, though the second run had gone further.
	commit(t, sink, prepared(t, sink, initContext{restored: 1}, 5, event{3, "second run, later"}))
	commit(t, sink, prepared(t, sink, initContext{restored: 1}, 2, event{4, "third run"}))
	got := mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id")
	if !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("ids %v, want [1 2 3 4]", got)
	}
}

// After a rescale a committable is committed by another subtask than the
// one that prepared it: it carries its writer's key, so its replay is
// recognised whoever commits it, and subtask 0 of a narrower job lowers
// the progress of the subtasks it no longer has.
func TestCommittableKeepsItsWritersKeyAcrossRescale(t *testing.T) {
	db := database(t)
	table := tableName("rescale")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	c := prepared(t, sink, initContext{subtask: 2, parallelism: 3}, 4, event{1, "from subtask 2"})
	if c.Subtask != 2 || c.Job != "test-job" || c.Sink != "public."+table {
		t.Fatalf("committable key (%q, %q, %d), want (test-job, public.%s, 2)", c.Job, c.Sink, c.Subtask, table)
	}
	commit(t, sink, c)
	// The job restarts from checkpoint 4 at parallelism 1; subtask 0's
	// committer gets old subtask 2's committable back.
	if got := signals(commit(t, sink, c)); !slices.Equal(got, []string{"already"}) {
		t.Fatalf("replay by another subtask signalled %v", got)
	}
	// Lowering to the restored checkpoint keeps it recognised.
	prepared(t, sink, initContext{subtask: 0, parallelism: 1, restored: 4}, 5, event{9, "unused"})
	if got := signals(commit(t, sink, c)); !slices.Equal(got, []string{"already"}) {
		t.Fatalf("replay after subtask 0 of the narrower job started signalled %v", got)
	}
	if got := mustInt64s(t, db, "SELECT count(*) FROM "+table); !slices.Equal(got, []int64{1}) {
		t.Fatalf("%v rows, want 1", got)
	}
}

func execQueryRow(t *testing.T, db, query string, args []any, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, db)
	defer func() { _ = conn.Close(ctx) }()
	if err := conn.QueryRow(ctx, query, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// A process that dies between the barrier and the commit loses nothing:
// the checkpoint holds the committable with its rows, and a sink made
// anew (another process restoring the checkpoint) commits them, once.
func TestRowsOfACompletedCheckpointSurviveTheProcessThatPreparedThem(t *testing.T) {
	db := database(t)
	table := tableName("survive")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	first, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	ser := CommittableSerializer{}
	stored, err := ser.Serialize(prepared(t, first, initContext{}, 3, event{1, "a"}, event{2, "b"}))
	if err != nil {
		t.Fatal(err)
	}
	// The first process is gone; nothing of its reached the table.
	if got := mustInt64s(t, db, "SELECT count(*) FROM "+table); got[0] != 0 {
		t.Fatalf("%d rows before any commit", got[0])
	}
	second, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := ser.Deserialize(ser.Version(), stored)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, second, restored)
	commit(t, second, restored)
	if got := mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("ids %v, want [1 2]", got)
	}
	// A damaged committable is refused, not half-read.
	if _, err := ser.Deserialize(ser.Version(), stored[:len(stored)-3]); err == nil {
		t.Error("a truncated committable was decoded")
	}
}
