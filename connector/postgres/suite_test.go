package postgres

import (
	"strconv"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/connectortest"
)

// The suite's jobs (memory source -> failure injector -> this sink, at
// parallelism 1 to 3, checkpoints every 10ms, failures in the reader, the
// writer, at the barrier after PrepareCommit and after a commit that
// succeeded, restores at another parallelism) count the ids in the table
// after each job: every id exactly once. The table has no unique key, so
// a row written twice would be counted twice.
func TestSuiteInsertModeExactlyOnce(t *testing.T) {
	db := database(t)
	connectortest.Run(t, connectortest.Pair[int64]{
		Sink: connectortest.NewSink(func(t *testing.T) (connector.Sink[int64], connectortest.ReadBack[int64]) {
			table := tableName("suite_insert")
			execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, label text NOT NULL)")
			sink, err := NewSink(db, table, []string{"id", "label"}, func(id int64, row []any) error {
				row[0], row[1] = id, "id-"+strconv.FormatInt(id, 10)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return sink, func() ([]int64, error) { return queryInt64s(db, "SELECT id FROM "+table) }
		}),
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}

// Upsert mode, where writing a row twice leaves the table as it was: a
// trigger records every row the sink inserts or updates in an audit
// table, and the suite counts the ids there, so a commit replayed would
// show as an id counted twice.
func TestSuiteUpsertModeExactlyOnce(t *testing.T) {
	db := database(t)
	connectortest.Run(t, connectortest.Pair[int64]{
		Sink: connectortest.NewSink(func(t *testing.T) (connector.Sink[int64], connectortest.ReadBack[int64]) {
			table := tableName("suite_upsert")
			audit := table + "_audit"
			execSQL(t, db,
				"CREATE TABLE "+table+" (id bigint PRIMARY KEY, label text NOT NULL)",
				"CREATE TABLE "+audit+" (id bigint NOT NULL)",
				"CREATE FUNCTION "+audit+"_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+audit+" VALUES (NEW.id); RETURN NEW; END $$",
				"CREATE TRIGGER "+audit+"_trg AFTER INSERT OR UPDATE ON "+table+" FOR EACH ROW EXECUTE FUNCTION "+audit+"_fn()",
			)
			sink, err := NewSink(db, table, []string{"id", "label"}, func(id int64, row []any) error {
				row[0], row[1] = id, "id-"+strconv.FormatInt(id, 10)
				return nil
			}, WithUpsert("id"))
			if err != nil {
				t.Fatal(err)
			}
			return sink, func() ([]int64, error) { return queryInt64s(db, "SELECT id FROM "+audit) }
		}),
		Guarantee: connectortest.ExactlyOnce,
		Seeds:     2,
	})
}
