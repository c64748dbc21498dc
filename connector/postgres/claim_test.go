package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector"
)

// In a distributed job a slot's owner may be paused (SIGSTOP, a long GC,
// a frozen VM) past the takeover of its slot, and go on when it wakes:
// its committer still holds committables of checkpoints it was told
// completed. The progress row records the claim epoch of the last owner
// of the key that started or committed; a commit, or a writer start,
// under an older claim is refused with ErrStaleClaim and writes nothing,
// whatever checkpoint it carries: the same id as the newer owner's (its
// rows may differ: the newer owner restored an older checkpoint and
// wrote its own interval), or a later one, which the key's checkpoint
// alone would have let through.
func TestOlderClaimOfASlotNeverCommitsAfterANewerClaim(t *testing.T) {
	db := database(t)
	table := tableName("claims")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []int64 { return mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id") }
	a := initContext{claim: 1, subtask: 3, parallelism: 4}
	a5 := prepared(t, sink, a, 5, event{5, "A, checkpoint 5"})
	if _, err := commitAs(t, sink, a, a5); err != nil {
		t.Fatal(err)
	}
	// A prepares checkpoints 6 and 7, then stops before committing them.
	a.restored = 5
	a6 := prepared(t, sink, a, 6, event{6, "A, checkpoint 6"})
	a7 := prepared(t, sink, a, 7, event{7, "A, checkpoint 7"})

	// B claims the slot (epoch 2), restores checkpoint 5 and commits its
	// own checkpoint 6.
	b := initContext{claim: 2, subtask: 3, parallelism: 4, restored: 5}
	b6 := prepared(t, sink, b, 6, event{60, "B, checkpoint 6"})
	if _, err := commitAs(t, sink, b, b6); err != nil {
		t.Fatal(err)
	}

	// A wakes up.
	for _, c := range []Committable{a6, a7} {
		reqs, err := commitAs(t, sink, initContext{claim: 1, subtask: 3, parallelism: 4}, c)
		if !errors.Is(err, ErrStaleClaim) {
			t.Fatalf("commit of checkpoint %d under claim 1 after claim 2 committed: %v (signals %v), want ErrStaleClaim", c.Checkpoint, err, signals(reqs))
		}
		for _, want := range []string{"claim 1", "claim 2", "newer owner", "subtask 3", table} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	if got := ids(); !slices.Equal(got, []int64{5, 60}) {
		t.Fatalf("ids %v, want [5 60]: the stale claim's rows were written", got)
	}
	// Its writer, restarted within its stale claim, must not rewind the
	// newer owner's progress either.
	if _, err := sink.CreateWriter(initContext{claim: 1, subtask: 3, parallelism: 4, restored: 5, committer: true}); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("writer start under claim 1 after claim 2: %v, want ErrStaleClaim", err)
	}
	if got := mustInt64s(t, db, "SELECT checkpoint_id FROM "+DefaultProgressTable+" WHERE job = 'test-job' AND subtask = 3"); !slices.Equal(got, []int64{6}) {
		t.Fatalf("progress of subtask 3: %v, want [6]", got)
	}

	// A newer claim fences the older ones from its writer's start, before
	// it commits anything: C (epoch 3) starts, then B's checkpoint 7 is
	// refused.
	b7 := prepared(t, sink, initContext{claim: 2, subtask: 3, parallelism: 4, restored: 6}, 7, event{70, "B, checkpoint 7"})
	prepared(t, sink, initContext{claim: 3, subtask: 3, parallelism: 4, restored: 6}, 7, event{700, "C, never committed"})
	if _, err := commitAs(t, sink, initContext{claim: 2, subtask: 3, parallelism: 4}, b7); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("commit under claim 2 after claim 3's writer started: %v, want ErrStaleClaim", err)
	}
	// The newer owner commits what it restored, prepared under an older
	// claim: the committer's claim is what counts.
	if reqs, err := commitAs(t, sink, initContext{claim: 3, subtask: 3, parallelism: 4}, b6, b7); err != nil || !slices.Equal(signals(reqs), []string{"already", ""}) {
		t.Fatalf("claim 3 committing checkpoints 6 and 7 of claim 2: %v, signals %v, want [already committed]", err, signals(reqs))
	}
	if got := ids(); !slices.Equal(got, []int64{5, 60, 70}) {
		t.Fatalf("ids %v, want [5 60 70]", got)
	}
}

// Epochs are a slot log's, and a job started afresh under a new
// checkpoint root numbers its claims from 1 again; so does a job run
// without a distributed setup (claim 0). A writer that restores no
// checkpoint starts the key's claims again, as it starts its checkpoints
// again; one outside a distributed job is never fenced.
func TestFreshStartAndOneProcessJobsResetTheClaim(t *testing.T) {
	db := database(t)
	table := tableName("claimreset")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	old := initContext{claim: 7}
	if _, err := commitAs(t, sink, old, prepared(t, sink, old, 40, event{1, "earlier run, claim 7"})); err != nil {
		t.Fatal(err)
	}
	fresh := initContext{claim: 1}
	if _, err := commitAs(t, sink, fresh, prepared(t, sink, fresh, 1, event{2, "fresh run, claim 1"})); err != nil {
		t.Fatalf("fresh run under claim 1 after an earlier run's claim 7: %v", err)
	}
	commit(t, sink, prepared(t, sink, initContext{restored: 1}, 2, event{3, "one process"}))
	if got := mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("ids %v, want [1 2 3]", got)
	}
}

// A progress table made before claims were recorded (no claim_epoch
// column) gets the column when a writer starts, its rows kept; a user
// who may not alter it is told the ALTER TABLE to run.
func TestProgressTableWithoutClaimEpochGetsTheColumnAtStart(t *testing.T) {
	db := database(t)
	table := tableName("migrate")
	progress := table + "_progress"
	execSQL(t, db,
		"CREATE TABLE "+table+" (id bigint NOT NULL, name text)",
		"CREATE TABLE "+progress+` (
  job text NOT NULL,
  sink text NOT NULL,
  subtask integer NOT NULL,
  checkpoint_id bigint NOT NULL,
  committed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job, sink, subtask)
)`,
		"INSERT INTO "+progress+" VALUES ('test-job', 'public."+table+"', 0, 3, now())",
		"CREATE ROLE "+table+"_app LOGIN",
		"GRANT SELECT, INSERT, UPDATE ON "+table+", "+progress+" TO "+table+"_app",
	)
	// Another user, not the table's owner, cannot add the column.
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	appConn := fmt.Sprintf("host=%s port=%d dbname=%s user=%s_app sslmode=disable", cfg.Host, cfg.Port, cfg.Database, table)
	appSink, err := NewSink(appConn, table, []string{"id", "name"}, eventRow, WithProgressTable(progress))
	if err != nil {
		t.Fatal(err)
	}
	_, err = appSink.CreateWriter(initContext{committer: true, restored: 3})
	want := `ALTER TABLE "` + progress + `" ADD COLUMN IF NOT EXISTS claim_epoch bigint NOT NULL DEFAULT 0`
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("writer of a user who may not alter the old progress table: %v, want the statement %q", err, want)
	}

	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow, WithProgressTable(progress))
	if err != nil {
		t.Fatal(err)
	}
	c := prepared(t, sink, initContext{restored: 3, claim: 1}, 4, event{4, "after the migration"})
	if got := signals(commit(t, sink, c)); !slices.Equal(got, []string{""}) {
		t.Fatalf("commit after the migration signalled %v", got)
	}
	if got := mustInt64s(t, db, "SELECT checkpoint_id FROM "+progress+" WHERE subtask = 0"); !slices.Equal(got, []int64{4}) {
		t.Fatalf("progress %v, want [4]", got)
	}
	// The first sink's writer, now that the column is there, starts.
	w, err := appSink.CreateWriter(initContext{committer: true, restored: 4})
	if err != nil {
		t.Fatalf("writer after the migration: %v", err)
	}
	_ = w.Close()
}

// A distributed job started from a savepoint into a new checkpoint root
// is a new incarnation: its slot logs number claims from 1 again, yet its
// writers restore a checkpoint. Claims are compared only within one
// incarnation, so its writers are not refused for the old root's higher
// claims; the first writer start of the new incarnation records its
// claim as a fresh start does, and from then on the fence holds within
// the new incarnation as it did within the old.
func TestSavepointStartInANewRootIsNotFencedByTheOldRootsClaims(t *testing.T) {
	db := database(t)
	table := tableName("incarnation")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow)
	if err != nil {
		t.Fatal(err)
	}
	old := initContext{claim: 5, subtask: 1, parallelism: 2, restored: 39, incarnation: "root-a"}
	if _, err := commitAs(t, sink, old, prepared(t, sink, old, 40, event{1, "old root, claim 5"})); err != nil {
		t.Fatal(err)
	}
	// The savepoint taken at checkpoint 40 starts the job under root-b.
	b1 := initContext{claim: 1, subtask: 1, parallelism: 2, restored: 40, incarnation: "root-b"}
	c41 := prepared(t, sink, b1, 41, event{2, "new root, claim 1"})
	if _, err := commitAs(t, sink, b1, c41); err != nil {
		t.Fatalf("commit under claim 1 of a new incarnation after the old one's claim 5: %v", err)
	}
	if got := mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("ids %v, want [1 2]", got)
	}
	// Within the new incarnation the fence holds: claim 2 starts, and
	// claim 1 neither commits nor restarts its writer.
	b1.restored = 41
	c42 := prepared(t, sink, b1, 42, event{3, "claim 1, stale"})
	b2 := initContext{claim: 2, subtask: 1, parallelism: 2, restored: 41, incarnation: "root-b"}
	prepared(t, sink, b2, 42, event{30, "claim 2, never committed"})
	if _, err := commitAs(t, sink, b1, c42); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("commit under claim 1 after claim 2 of the same incarnation started: %v, want ErrStaleClaim", err)
	}
	if _, err := sink.CreateWriter(initContext{claim: 1, subtask: 1, parallelism: 2, restored: 41, incarnation: "root-b", committer: true}); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("writer start under claim 1 after claim 2 of the same incarnation: %v, want ErrStaleClaim", err)
	}
	if got := mustInt64s(t, db, "SELECT id FROM "+table+" ORDER BY id"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("ids %v, want [1 2]: the stale claim's rows were written", got)
	}
}
