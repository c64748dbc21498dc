package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// The server runs with logical decoding on, and each test's database is
// its own: what one test creates, another does not see.
func TestDatabasesAreSeparateAndLogicalDecodingIsOn(t *testing.T) {
	c := Get(t)
	ctx := context.Background()
	a, b := c.Database(t), c.Database(t)
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ca.Close(ctx) }()
	var level string
	if err := ca.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" && !c.External() {
		t.Errorf("wal_level = %s, want logical", level)
	}
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cb.Close(ctx) }()
	var found bool
	if err := cb.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Error("a table created in one test database is visible in another")
	}
}

// A server of a test's own stops when the test ends: its port refuses
// connections afterwards.
func TestStartedServerStopsWithItsTest(t *testing.T) {
	var conn string
	t.Run("own", func(t *testing.T) {
		c := Start(t)
		if c.External() {
			t.Skip("an external server is not stopped")
		}
		conn = c.ConnString()
		cn, err := pgx.Connect(context.Background(), conn)
		if err != nil {
			t.Fatal(err)
		}
		_ = cn.Close(context.Background())
	})
	if conn == "" {
		return
	}
	if cn, err := pgx.Connect(context.Background(), conn); err == nil {
		_ = cn.Close(context.Background())
		t.Errorf("the server of a finished test still answers at %s", conn)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5/postgres?sslmode=disable": "postgres://u@h:5/x?sslmode=disable",
		"host=h port=5 dbname=postgres user=u":      "host=h port=5 user=u dbname=x",
	} {
		if got := withDatabase(in, "x"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// An external server (SPLITFLOW_POSTGRES_URL) is used as it is: Database
// makes the test's databases in it, Stop leaves it running.
func TestExternalServerIsUsedAndLeftRunning(t *testing.T) {
	own := Start(t)
	t.Setenv(EnvURL, own.ConnString())
	ext, err := Launch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !ext.External() || ext.Addr() != own.Addr() {
		t.Fatalf("Launch with %s gave %s (external %v), want the external %s", EnvURL, ext.Addr(), ext.External(), own.Addr())
	}
	db := ext.Database(t)
	if err := ext.Stop(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatalf("the external server's test database after Stop: %v", err)
	}
	_ = conn.Close(context.Background())
}

// Restart stops the server and starts it again on the same data and
// port: a table made before is there after, and a session of before is
// ended.
func TestRestartKeepsTheDataAndPort(t *testing.T) {
	c := Start(t)
	db := c.Database(t)
	ctx := context.Background()
	before, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = before.Close(ctx) }()
	if _, err := before.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := before.Ping(ctx); err == nil {
		t.Error("a session of before the restart still answers")
	}
	after, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatalf("connect after the restart: %v", err)
	}
	defer func() { _ = after.Close(ctx) }()
	var v int
	if err := after.QueryRow(ctx, "SELECT id FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("the table of before the restart: %v, %d", err, v)
	}
}
