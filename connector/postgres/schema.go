package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/splitflow/splitflow/connector"
)

// column is a column of the sink as the table has it.
type column struct {
	name    string
	oid     uint32
	typ     string // format_type: "bigint", "character varying(20)"
	typname string // schema.type, unquoted, as pgx's LoadTypes takes it
	notNull bool
}

// tableInfo is the target table as a writer found it.
type tableInfo struct {
	oid  uint32
	name qualifiedName // with its schema
	cols []column      // in the sink's order
	// extraTypes are the columns' types pgx does not know by itself
	// (enums, domains, composites, arrays of those), loaded from the
	// server.
	extraTypes []*pgtype.Type
}

// progressDDL is the statement that makes the progress table; the docs
// show it for a database user without CREATE on the schema.
func progressDDL(table qualifiedName) string {
	return "CREATE TABLE IF NOT EXISTS " + table.sql() + ` (
  job text NOT NULL,
  sink text NOT NULL,
  subtask integer NOT NULL,
  checkpoint_id bigint NOT NULL,
  committed_at timestamptz NOT NULL DEFAULT now(),
  claim_epoch bigint NOT NULL DEFAULT 0,
  claim_incarnation text NOT NULL DEFAULT '',
  PRIMARY KEY (job, sink, subtask)
)`
}

// claimEpochDDL adds the claim_epoch and claim_incarnation columns to a
// progress table made before the sink recorded claims. A constant
// default makes it a change of the catalog alone (PostgreSQL 11 and
// later): no rewrite, the existing rows read 0, a claim every owner is at
// or above, of incarnation "", which a writer of another incarnation
// resets.
func claimEpochDDL(table qualifiedName) string {
	return "ALTER TABLE " + table.sql() + " ADD COLUMN IF NOT EXISTS claim_epoch bigint NOT NULL DEFAULT 0, " +
		"ADD COLUMN IF NOT EXISTS claim_incarnation text NOT NULL DEFAULT ''"
}

// pgCode returns the SQLSTATE of a server error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// ensureProgressTable makes the progress table when it is missing and
// checks that it is the sink's and that the sink may use it. The first
// writer of a pool does it; concurrent writers of several processes may
// race to create it, and the loser sees it made.
func (s *Sink[T]) ensureProgressTable(ctx context.Context, conn *pgxpool.Conn) error {
	s.mu.Lock()
	done := s.progressMade
	s.mu.Unlock()
	if done {
		return nil
	}
	p := s.progress
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1)::oid", p.sql()).Scan(&oid); err != nil {
		return fmt.Errorf("postgres sink: look up progress table %s: %w", p, err)
	}
	if oid == nil {
		_, err := conn.Exec(ctx, progressDDL(p))
		switch code := pgCode(err); {
		case err == nil, code == "42P07", code == "23505":
			// Made, by us or by a writer that raced us.
		case code == "42501":
			return fmt.Errorf("postgres sink: progress table %s is missing and user %q may not create it (%v): create it as a user who may, and grant this one SELECT, INSERT, UPDATE on it:\n%s;\n%w",
				p, conn.Conn().Config().User, err, progressDDL(p), connector.ErrInvalidConfiguration)
		default:
			return fmt.Errorf("postgres sink: create progress table %s: %w", p, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1)::oid", p.sql()).Scan(&oid); err != nil || oid == nil {
			return fmt.Errorf("postgres sink: progress table %s still missing after CREATE TABLE: %v", p, err)
		}
	}
	if err := checkRights(ctx, conn, *oid, p, "SELECT", "INSERT", "UPDATE"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT job, sink, subtask, checkpoint_id FROM "+p.sql()+" LIMIT 0"); err != nil {
		if pgCode(err) != "42703" { // undefined_column
			return fmt.Errorf("postgres sink: read progress table %s: %w", p, err)
		}
		return fmt.Errorf("postgres sink: progress table %s is not the sink's (%v); its columns must be those of\n%s;\nor name another table with postgres.WithProgressTable: %w",
			p, err, progressDDL(p), connector.ErrInvalidConfiguration)
	}
	if err := checkUniqueKey(ctx, conn, *oid, p, []string{"job", "sink", "subtask"}); err != nil {
		return err
	}
	if err := ensureClaimEpoch(ctx, conn, p); err != nil {
		return err
	}
	s.mu.Lock()
	s.progressMade = true
	s.mu.Unlock()
	return nil
}

// ensureClaimEpoch adds the claim_epoch and claim_incarnation columns to
// a progress table that lacks them (made by an earlier version of the sink), which takes the
// table's owner; a user who is not is told the statement to run.
func ensureClaimEpoch(ctx context.Context, conn *pgxpool.Conn, p qualifiedName) error {
	_, err := conn.Exec(ctx, "SELECT claim_epoch, claim_incarnation FROM "+p.sql()+" LIMIT 0")
	if pgCode(err) != "42703" { // undefined_column
		if err != nil {
			return fmt.Errorf("postgres sink: read progress table %s: %w", p, err)
		}
		return nil
	}
	_, err = conn.Exec(ctx, claimEpochDDL(p))
	switch pgCode(err) {
	case "":
		if err != nil {
			return fmt.Errorf("postgres sink: add columns claim_epoch and claim_incarnation to progress table %s: %w", p, err)
		}
		return nil
	case "42501": // insufficient_privilege: must be the owner
		return fmt.Errorf("postgres sink: progress table %s lacks column claim_epoch or claim_incarnation, which record the claim of a distributed job's slot that last wrote each row, and user %q may not add it (%v): run as its owner\n%s;\n%w",
			p, conn.Conn().Config().User, err, claimEpochDDL(p), connector.ErrInvalidConfiguration)
	default:
		return fmt.Errorf("postgres sink: add columns claim_epoch and claim_incarnation to progress table %s: %w", p, err)
	}
}

// checkRights fails when the session's user lacks one of privileges on
// the table.
func checkRights(ctx context.Context, conn *pgxpool.Conn, oid uint32, table qualifiedName, privileges ...string) error {
	var missing []string
	for _, priv := range privileges {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.has_table_privilege($1::oid, $2)", oid, priv).Scan(&ok); err != nil {
			return fmt.Errorf("postgres sink: check %s on %s: %w", priv, table, err)
		}
		if !ok {
			missing = append(missing, priv)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	user := conn.Conn().Config().User
	return fmt.Errorf("postgres sink: user %q lacks %s on table %s: GRANT %s ON %s TO %s: %w",
		user, strings.Join(missing, ", "), table, strings.Join(missing, ", "), table.sql(), pgx.Identifier{user}.Sanitize(), connector.ErrInvalidConfiguration)
}

// checkUniqueKey fails unless the table has a primary key or a unique
// index (immediate, without predicate or expressions) on exactly keys:
// what INSERT ... ON CONFLICT (keys) needs.
func checkUniqueKey(ctx context.Context, conn *pgxpool.Conn, oid uint32, table qualifiedName, keys []string) error {
	rows, err := conn.Query(ctx, `
SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) k
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
FROM pg_catalog.pg_index i
WHERE i.indrelid = $1::oid AND i.indisunique AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL`, oid)
	if err != nil {
		return fmt.Errorf("postgres sink: list the unique indexes of %s: %w", table, err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return fmt.Errorf("postgres sink: list the unique indexes of %s: %w", table, err)
	}
	want := slices.Sorted(slices.Values(keys))
	for _, cols := range indexes {
		slices.Sort(cols)
		if slices.Equal(cols, want) {
			return nil
		}
	}
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = pgx.Identifier{k}.Sanitize()
	}
	return fmt.Errorf("postgres sink: table %s has no primary key or unique index on exactly (%s), which an upsert by these columns needs (ON CONFLICT): CREATE UNIQUE INDEX ON %s (%s), or upsert by the columns of an existing one: %w",
		table, strings.Join(keys, ", "), table.sql(), strings.Join(quoted, ", "), connector.ErrInvalidConfiguration)
}

// describeTable finds the target table and the sink's columns in it, and
// checks the rights and, for an upsert, the key.
func (s *Sink[T]) describeTable(ctx context.Context, conn *pgxpool.Conn) (tableInfo, error) {
	var info tableInfo
	var kind string
	err := conn.QueryRow(ctx, `
SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.to_regclass($1)`, s.table.sql()).Scan(&info.oid, &info.name.schema, &info.name.name, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		var path string
		_ = conn.QueryRow(ctx, "SELECT pg_catalog.array_to_string(pg_catalog.current_schemas(false), ', ')").Scan(&path)
		return info, fmt.Errorf("postgres sink: table %s does not exist in %s (schemas searched: %s): create it, or name it as schema.table: %w",
			s.table, s.where(), path, connector.ErrInvalidConfiguration)
	}
	if err != nil {
		return info, fmt.Errorf("postgres sink: look up table %s: %w", s.table, err)
	}
	if kind != "r" && kind != "p" {
		return info, fmt.Errorf("postgres sink: %s is not a table (pg_class.relkind %q); the sink writes into a table: %w", info.name, kind, connector.ErrInvalidConfiguration)
	}
	rows, err := conn.Query(ctx, `
SELECT a.attname::text, a.atttypid::int8, pg_catalog.format_type(a.atttypid, a.atttypmod),
       tn.nspname::text || '.' || t.typname::text,
       a.attnotnull, a.attgenerated::text, a.attidentity::text
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace
WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, info.oid)
	if err != nil {
		return info, fmt.Errorf("postgres sink: list the columns of %s: %w", info.name, err)
	}
	type attr struct {
		column
		generated, identity string
	}
	byName := map[string]attr{}
	var names []string
	for rows.Next() {
		var a attr
		var oid int64
		if err := rows.Scan(&a.name, &oid, &a.typ, &a.typname, &a.notNull, &a.generated, &a.identity); err != nil {
			rows.Close()
			return info, fmt.Errorf("postgres sink: list the columns of %s: %w", info.name, err)
		}
		a.oid = uint32(oid)
		byName[a.name] = a
		names = append(names, a.name)
	}
	if err := rows.Err(); err != nil {
		return info, fmt.Errorf("postgres sink: list the columns of %s: %w", info.name, err)
	}
	var errs []error
	for _, name := range s.columns {
		a, ok := byName[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("postgres sink: table %s has no column %q (its columns: %s): %w", info.name, name, strings.Join(names, ", "), connector.ErrInvalidConfiguration))
		case a.generated != "":
			errs = append(errs, fmt.Errorf("postgres sink: column %q of %s is generated, it cannot be written: leave it out of the sink's columns: %w", name, info.name, connector.ErrInvalidConfiguration))
		case a.identity == "a":
			errs = append(errs, fmt.Errorf("postgres sink: column %q of %s is GENERATED ALWAYS AS IDENTITY, it cannot be written: leave it out of the sink's columns: %w", name, info.name, connector.ErrInvalidConfiguration))
		default:
			info.cols = append(info.cols, a.column)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return info, err
	}
	var unknown []string
	known := pgtype.NewMap()
	for _, c := range info.cols {
		if _, ok := known.TypeForOID(c.oid); !ok && !slices.Contains(unknown, c.typname) {
			unknown = append(unknown, c.typname)
		}
	}
	if len(unknown) > 0 {
		if info.extraTypes, err = conn.Conn().LoadTypes(ctx, unknown); err != nil {
			return info, fmt.Errorf("postgres sink: load the column types %s of %s: %w", strings.Join(unknown, ", "), info.name, err)
		}
	}
	privileges := []string{"INSERT"}
	if s.cfg.upsertKeys != nil {
		privileges = append(privileges, "UPDATE")
	}
	if err := checkRights(ctx, conn, info.oid, info.name, privileges...); err != nil {
		return info, err
	}
	if s.cfg.upsertKeys != nil {
		if err := checkUniqueKey(ctx, conn, info.oid, info.name, s.cfg.upsertKeys); err != nil {
			return info, err
		}
	}
	return info, nil
}

// lowerProgress lowers the recorded progress of the writer's subtask to
// the checkpoint the job starts from (0 for a fresh start) and records
// the writer's claim on it; subtask 0 lowers the progress of the
// subtasks at or beyond the parallelism too, leaving their claims alone
// (they are other slots'). See the package doc, "Progress", for why this
// is safe and needed, and "Fencing" for the claim: a writer under a claim
// older than the one recorded changes nothing and fails with
// ErrStaleClaim, unless it starts without a checkpoint (a job started
// afresh numbers its claims from 1 again), under another incarnation
// than the recorded claim's (a job started from a savepoint into a new
// checkpoint root numbers its claims from 1 again too), or outside a
// distributed job (claim 0).
func lowerProgress(ctx context.Context, conn *pgxpool.Conn, table qualifiedName, key progressKey, restored int64, fresh bool, parallelism int) error {
	var recorded int64
	err := conn.QueryRow(ctx, "INSERT INTO "+table.sql()+` AS progress (job, sink, subtask, checkpoint_id, claim_epoch, claim_incarnation) VALUES ($1, $2, $3, 0, $4, $7)
ON CONFLICT (job, sink, subtask) DO UPDATE SET checkpoint_id = LEAST(progress.checkpoint_id, $5), claim_epoch = $4, claim_incarnation = $7,
  committed_at = CASE WHEN progress.checkpoint_id > $5 THEN now() ELSE progress.committed_at END
WHERE progress.claim_epoch <= $4 OR $4 = 0 OR $6 OR progress.claim_incarnation <> $7
RETURNING claim_epoch`, key.job, key.sink, key.subtask, key.claim, restored, fresh, key.incarnation).Scan(&recorded)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row holds a newer claim: nothing was changed.
		if err := conn.QueryRow(ctx, "SELECT claim_epoch FROM "+table.sql()+" WHERE job = $1 AND sink = $2 AND subtask = $3",
			key.job, key.sink, key.subtask).Scan(&recorded); err != nil {
			return err
		}
		return staleClaim(table, key, recorded)
	}
	if err != nil || key.subtask != 0 {
		return err
	}
	_, err = conn.Exec(ctx, "UPDATE "+table.sql()+` SET checkpoint_id = $3, committed_at = now()
WHERE job = $1 AND sink = $2 AND checkpoint_id > $3 AND subtask >= $4`,
		key.job, key.sink, restored, parallelism)
	return err
}

// staleClaim is the error of a writer or committer under key.claim when
// the key's progress row records the newer claim recorded.
func staleClaim(table qualifiedName, key progressKey, recorded int64) error {
	return fmt.Errorf("the progress row of job %q, sink %q, subtask %d in %s records claim %d of the slot and this process runs under claim %d: %w; "+
		"it was paused or cut off past its slot's takeover and writes nothing more (the newer owner restored the slot and commits its checkpoints)",
		key.job, key.sink, key.subtask, table, recorded, key.claim, ErrStaleClaim)
}
