package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/splitflow/splitflow/connector/postgres"
	"github.com/twmb/franz-go/pkg/kgo"
)

// countsColumns are the columns of --table: one row per count update.
var countsColumns = []string{"word", "n"}

// countsSink appends each count update as a row (word, n) of o.table
// through the PostgreSQL sink in insert mode: the rows of a checkpoint
// are committed in one transaction with the sink's progress row, so each
// update is in the table once.
func countsSink(o options) (*postgres.Sink[wordCount], error) {
	return postgres.NewSink(o.postgres, o.table, countsColumns, func(wc wordCount, row []any) error {
		row[0], row[1] = wc.Key, wc.Value
		return nil
	})
}

// ensureCountsTable creates o.table (word text, n bigint) when it is
// missing. The name is split and folded by the server (parse_ident), as
// the sink and any SQL statement read it, and quoted part by part, so a
// name is never spliced into SQL as it was typed.
func ensureCountsTable(ctx context.Context, o options) error {
	conn, err := connectCounts(ctx, o)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	name, err := countsTableSQL(ctx, conn, o.table)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+name+" (word text NOT NULL, n bigint NOT NULL)"); err != nil {
		return fmt.Errorf("--table %s: create it: %w", o.table, err)
	}
	return nil
}

// verifyTable reads every row of o.table and judges them as verify judges
// the output topic's records: every word's n exactly 1..count, each once.
func verifyTable(ctx context.Context, o options, want map[string]int64, partial bool) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := connectCounts(ctx, o)
	if err != nil {
		return report{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	name, err := countsTableSQL(ctx, conn, o.table)
	if err != nil {
		return report{}, err
	}
	rows, err := conn.Query(ctx, "SELECT word, n FROM "+name)
	if err != nil {
		return report{}, fmt.Errorf("read --table %s: %w", o.table, err)
	}
	var records []*kgo.Record
	for rows.Next() {
		var w string
		var n int64
		if err := rows.Scan(&w, &n); err != nil {
			rows.Close()
			return report{}, fmt.Errorf("read --table %s: %w", o.table, err)
		}
		records = append(records, &kgo.Record{Key: []byte(w), Value: strconv.AppendInt(nil, n, 10)})
	}
	if err := rows.Err(); err != nil {
		return report{}, fmt.Errorf("read --table %s: %w", o.table, err)
	}
	return check(records, want, partial), nil
}

func connectCounts(ctx context.Context, o options) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(o.postgres)
	if err != nil {
		return nil, fmt.Errorf("--postgres: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = postgres.DefaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--postgres: connect to %s:%d database %q as %q: %w", cfg.Host, cfg.Port, cfg.Database, cfg.User, err)
	}
	return conn, nil
}

// countsTableSQL is table ("name" or "schema.name", quoted parts kept,
// unquoted ones folded) quoted for a statement.
func countsTableSQL(ctx context.Context, conn *pgx.Conn, table string) (string, error) {
	var parts []string
	if err := conn.QueryRow(ctx, "SELECT parse_ident($1)", table).Scan(&parts); err != nil {
		return "", fmt.Errorf("--table %q is not a table name (name or schema.name): %w", table, err)
	}
	if len(parts) > 2 {
		return "", fmt.Errorf("--table %q: expected name or schema.name", table)
	}
	return pgx.Identifier(parts).Sanitize(), nil
}
