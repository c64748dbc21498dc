package postgres

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector"
)

// createWriter makes a writer of sink as the engine would, and closes it.
func createWriter[T any](sink *Sink[T]) error {
	w, err := sink.CreateWriter(initContext{committer: true})
	if err == nil {
		_ = w.Close()
	}
	return err
}

// Bad configurations that only the database can tell fail when a writer
// starts, with an error that names the table, column, key or right, and
// that no restart can fix (connector.ErrInvalidConfiguration).
func TestWriterStartNamesWhatIsWrongWithTheTable(t *testing.T) {
	db := database(t)
	table := tableName("cfg")
	execSQL(t, db,
		"CREATE TABLE "+table+" (id bigint NOT NULL, name text, total bigint GENERATED ALWAYS AS (id * 2) STORED)",
		"CREATE TABLE "+table+"_view_base (id bigint)",
		"CREATE VIEW "+table+"_view AS SELECT id FROM "+table+"_view_base",
		"CREATE ROLE "+table+"_reader LOGIN",
		"GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+table+"_reader",
		"GRANT CREATE ON SCHEMA public TO "+table+"_reader",
		"CREATE TABLE "+table+"_progress (job text, other int)",
		"CREATE ROLE "+table+"_nocreate LOGIN", // PostgreSQL 15: no CREATE on public
		"GRANT INSERT ON "+table+" TO "+table+"_nocreate",
	)
	reader, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	readerConn := fmt.Sprintf("host=%s port=%d dbname=%s user=%s_reader sslmode=disable", reader.Host, reader.Port, reader.Database, table)
	noCreateConn := strings.Replace(readerConn, "_reader", "_nocreate", 1)
	for _, tc := range []struct {
		name    string
		conn    string
		table   string
		columns []string
		opts    []Option
		want    []string
	}{
		{"missing table", db, "no_such_table", []string{"id"}, nil,
			[]string{`table no_such_table does not exist`, "schemas searched: public"}},
		{"missing schema", db, "nowhere." + table, []string{"id"}, nil,
			[]string{"table nowhere." + table + " does not exist"}},
		{"missing column", db, table, []string{"id", "nmae"}, nil,
			[]string{`table public.` + table + ` has no column "nmae"`, "its columns: id, name, total"}},
		{"generated column", db, table, []string{"id", "total"}, nil,
			[]string{`column "total" of public.` + table + ` is generated`}},
		{"a view", db, table + "_view", []string{"id"}, nil,
			[]string{"public." + table + "_view is not a table"}},
		{"upsert without a unique key", db, table, []string{"id", "name"}, []Option{WithUpsert("id")},
			[]string{"has no primary key or unique index on exactly (id)", `CREATE UNIQUE INDEX ON "public"."` + table + `" ("id")`}},
		{"no INSERT right", readerConn, table, []string{"id"}, []Option{WithProgressTable(table + "_reader_progress")},
			[]string{`user "` + table + `_reader" lacks INSERT on table public.` + table, "GRANT INSERT"}},
		{"no rights on the progress table", readerConn, table, []string{"id"}, nil,
			[]string{`user "` + table + `_reader" lacks SELECT, INSERT, UPDATE on table ` + DefaultProgressTable}},
		{"no right to create the progress table", noCreateConn, table, []string{"id"}, []Option{WithProgressTable(table + "_new_progress")},
			[]string{"progress table " + table + "_new_progress is missing", `may not create it`, `CREATE TABLE IF NOT EXISTS "` + table + `_new_progress"`}},
		{"progress table of another shape", db, table, []string{"id"}, []Option{WithProgressTable(table + "_progress")},
			[]string{"progress table " + table + "_progress is not the sink's", "checkpoint_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink, err := NewSink(tc.conn, tc.table, tc.columns, func(int64, []any) error { return nil }, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			err = createWriter(sink)
			if err == nil {
				t.Fatal("CreateWriter succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Errorf("error %q does not wrap connector.ErrInvalidConfiguration", err)
			}
		})
	}
}

// An unreachable server: the error names the host and port, database
// and user, never the password.
func TestUnreachableServerErrorNamesTheHostNotThePassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there now
	const password = "s3cret-Pa55word"
	conn := fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/orders?sslmode=disable&connect_timeout=5", password, port)
	sink, err := NewSink(conn, "events", []string{"id"}, func(int64, []any) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = createWriter(sink)
	if err == nil {
		t.Fatal("CreateWriter succeeded with no server")
	}
	for _, w := range []string{fmt.Sprintf("127.0.0.1:%d", port), `database "orders"`, `user "app"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("error %q shows the password", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the connection error took %v", d)
	}
	// A bad connection string does not show the password either.
	_, err = NewSink("postgres://app:"+password+"@127.0.0.1:notaport/db", "t", []string{"id"}, func(int64, []any) error { return nil })
	if err == nil || strings.Contains(err.Error(), password) || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Errorf("bad connection string: %v", err)
	}
}

// What NewSink can tell without a server, all at once.
func TestNewSinkValidatesItsArguments(t *testing.T) {
	row := func(int64, []any) error { return nil }
	_, err := NewSink("postgres://h/db", `bad"name`, []string{"id", "ID", "x y"}, row,
		WithUpsert("other"), WithPoolSize(0), WithStatementTimeout(-time.Second), WithMaxCheckpointBytes(0), WithProgressTable(""))
	if err == nil {
		t.Fatal("NewSink accepted bad arguments")
	}
	for _, w := range []string{"table:", `column "id" given twice`, "x y", `key column "other" is not among`, "pool size 0", "statement timeout", "max checkpoint bytes", "progress table"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Error("not connector.ErrInvalidConfiguration")
	}
	if _, err := NewSink[int64]("postgres://h/db", "t", []string{"id"}, nil); err == nil || !strings.Contains(err.Error(), "no RowFunc") {
		t.Errorf("nil RowFunc: %v", err)
	}
}

// A value the column's type cannot take, or NULL for a NOT NULL column,
// fails the Write and names the column: the row never reaches a
// checkpoint whose commit could only fail.
func TestWriteNamesTheColumnOfABadValue(t *testing.T) {
	db := database(t)
	table := tableName("values")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, at timestamptz)")
	sink, err := NewSink(db, table, []string{"id", "at"}, func(v [2]any, row []any) error {
		row[0], row[1] = v[0], v[1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.CreateWriter(initContext{committer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	for _, tc := range []struct {
		v    [2]any
		want string
	}{
		{[2]any{int64(1), "not a time"}, `column "at" (timestamp with time zone)`},
		{[2]any{nil, time.Now()}, `column "id" of public.` + table + ` is NOT NULL`},
	} {
		err := w.Write(tc.v, connector.WriteContext{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%v): %v, want an error saying %q", tc.v, err, tc.want)
		}
	}
	if err := w.Write([2]any{int64(2), nil}, connector.WriteContext{}); err != nil {
		t.Errorf("NULL into a nullable column: %v", err)
	}
}

// A wrapper that hides TwoPhase makes runtime.SinkTo run the sink as a
// plain one; the writer refuses to run without its committer.
func TestWriterRefusesToRunWithoutItsCommitter(t *testing.T) {
	sink, err := NewSink("postgres://127.0.0.1:1/db", "t", []string{"id"}, func(int64, []any) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	_, err = sink.CreateWriter(initContext{committer: false})
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "TwoPhase") {
		t.Fatalf("CreateWriter without committer: %v", err)
	}
}

func TestParseQualified(t *testing.T) {
	for in, want := range map[string]qualifiedName{
		"Orders":             {name: "orders"},
		`"Orders"`:           {name: "Orders"},
		"sales.orders":       {schema: "sales", name: "orders"},
		`"my.schema"."A""b"`: {schema: "my.schema", name: `A"b`},
	} {
		got, err := parseQualified(in)
		if err != nil || got != want {
			t.Errorf("parseQualified(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a.b.c", `"open`, "a.", ".a", "a b"} {
		if got, err := parseQualified(in); err == nil {
			t.Errorf("parseQualified(%q) = %+v, want an error", in, got)
		}
	}
}

// A writer holds the rows of one checkpoint interval; past
// WithMaxCheckpointBytes it fails, saying what to do.
func TestWriterOverItsCheckpointBytesFailsSayingSo(t *testing.T) {
	db := database(t)
	table := tableName("bounded")
	execSQL(t, db, "CREATE TABLE "+table+" (id bigint NOT NULL, name text)")
	sink, err := NewSink(db, table, []string{"id", "name"}, eventRow, WithMaxCheckpointBytes(200))
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.CreateWriter(initContext{committer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	for i := range int64(100) {
		err = w.Write(event{i, "0123456789"}, connector.WriteContext{})
		if err != nil {
			break
		}
	}
	for _, want := range []string{"over the limit of 200", "WithMaxCheckpointBytes", "runtime.WithCheckpointInterval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Write past the limit: %v, want an error saying %q", err, want)
		}
	}
}

// Options win over the connection string's settings, which win over the
// defaults.
func TestOptionsWinOverTheConnectionString(t *testing.T) {
	row := func(int64, []any) error { return nil }
	for _, tc := range []struct {
		conn        string
		opts        []Option
		maxConns    int32
		timeout     string // "" when none is set
		connTimeout time.Duration
	}{
		{"postgres://h/db", nil, DefaultPoolSize, "60000", DefaultConnectTimeout},
		{"postgres://h/db?pool_max_conns=9&statement_timeout=5000&connect_timeout=3", nil, 9, "5000", 3 * time.Second},
		{"postgres://h/db?pool_max_conns=9&statement_timeout=5000", []Option{WithPoolSize(2), WithStatementTimeout(time.Second)}, 2, "1000", DefaultConnectTimeout},
		{"postgres://h/db?statement_timeout=5000", []Option{WithStatementTimeout(0)}, DefaultPoolSize, "", DefaultConnectTimeout},
	} {
		s, err := NewSink(tc.conn, "t", []string{"id"}, row, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := s.pgCfg.ConnConfig.RuntimeParams["statement_timeout"]
		if s.pgCfg.MaxConns != tc.maxConns || got != tc.timeout || s.pgCfg.ConnConfig.ConnectTimeout != tc.connTimeout {
			t.Errorf("%s with %d options: pool %d, statement_timeout %q, connect timeout %v; want %d, %q, %v",
				tc.conn, len(tc.opts), s.pgCfg.MaxConns, got, s.pgCfg.ConnConfig.ConnectTimeout, tc.maxConns, tc.timeout, tc.connTimeout)
		}
	}
}
