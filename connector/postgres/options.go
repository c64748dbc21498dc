package postgres

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector"
)

// Defaults of the sink's options.
const (
	// DefaultProgressTable is the table that records, per job, sink and
	// writer subtask, the last checkpoint whose rows were committed.
	DefaultProgressTable = "splitflow_sink_progress"
	// DefaultPoolSize is the most connections one sink holds in one
	// process.
	DefaultPoolSize = 4
	// DefaultStatementTimeout bounds each statement of the sink's
	// sessions (PostgreSQL's statement_timeout).
	DefaultStatementTimeout = time.Minute
	// DefaultConnectTimeout bounds each connection attempt when the
	// connection string sets no connect_timeout.
	DefaultConnectTimeout = 30 * time.Second
	// DefaultMaxCheckpointBytes bounds the encoded rows one writer
	// subtask holds for one checkpoint.
	DefaultMaxCheckpointBytes = 64 << 20
)

type config struct {
	upsertKeys       []string // nil: insert mode
	poolSize         int
	statementTimeout time.Duration
	// poolSizeSet and timeoutSet: given as options, which then win over
	// the connection string's pool_max_conns and statement_timeout.
	poolSizeSet, timeoutSet bool
	progressTable           string
	jobName                 string
	sinkName                string
	maxBytes                int64
}

func defaultConfig() config {
	return config{
		poolSize:         DefaultPoolSize,
		statementTimeout: DefaultStatementTimeout,
		progressTable:    DefaultProgressTable,
		maxBytes:         DefaultMaxCheckpointBytes,
	}
}

// Option configures a Sink.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithUpsert makes the sink upsert by the key columns instead of
// inserting: each row is written with INSERT ... ON CONFLICT (keys) DO
// UPDATE SET every other column (DO NOTHING when every column is a key).
// The keys must be among the sink's columns, and the table must have a
// primary key or a unique index on exactly these columns (checked when a
// writer starts). Within one checkpoint of one subtask, only the last row
// of each key is written. The default is insert mode: rows are appended
// with COPY (Flink's JDBC sink: an upsert dialect statement vs a plain
// INSERT).
func WithUpsert(keyColumns ...string) Option {
	keys := append([]string{}, keyColumns...)
	return optionFunc(func(c *config) { c.upsertKeys = keys })
}

// WithPoolSize sets the most connections the sink holds in one process,
// shared by its writers (which connect only when they start) and its
// committers (one connection per commit under way); default 4, or the
// connection string's pool_max_conns when it has one and this option is
// not given.
func WithPoolSize(n int) Option {
	return optionFunc(func(c *config) { c.poolSize, c.poolSizeSet = n, true })
}

// WithStatementTimeout sets PostgreSQL's statement_timeout for the sink's
// sessions, default 1 minute (or the connection string's
// statement_timeout when it has one and this option is not given); 0
// keeps the server's setting. A commit of
// many rows is one COPY (insert mode) or one statement per row (upsert
// mode): the timeout must cover the COPY of the largest checkpoint.
func WithStatementTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.statementTimeout, c.timeoutSet = d, true })
}

// WithProgressTable names the table that records the committed
// checkpoints, "table" or "schema.table", default
// "splitflow_sink_progress" in the first schema of the search_path. The
// sink creates it when it is missing (see the package doc for its DDL
// and the rights that needs). Sinks of several jobs may share it.
func WithProgressTable(name string) Option {
	return optionFunc(func(c *config) { c.progressTable = name })
}

// WithJobName sets the job part of the sink's progress key, by default
// the name the job runs under (runtime Execute's name, or the
// distributed job's). Two jobs writing through one progress table must
// have different names; a job renamed between runs still commits the
// checkpoints it restores under its old name, since each committable
// carries its key.
func WithJobName(name string) Option {
	return optionFunc(func(c *config) { c.jobName = name })
}

// WithSinkName sets the sink part of the progress key, by default the
// target table's schema-qualified name ("public.orders"). Two sinks of
// one job into one table need different names.
func WithSinkName(name string) Option {
	return optionFunc(func(c *config) { c.sinkName = name })
}

// WithMaxCheckpointBytes bounds the encoded rows one writer subtask holds
// between two checkpoints, default 64 MiB. The rows of a checkpoint are
// written to PostgreSQL only when it completes, and until then they are
// in the writer's memory and then in the checkpoint itself (see the
// package doc); a writer that would hold more fails its task with an
// error that says so. Without checkpoints the whole output of a subtask
// must fit.
func WithMaxCheckpointBytes(n int64) Option {
	return optionFunc(func(c *config) { c.maxBytes = n })
}

// validate checks the options; every problem at once.
func (c config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("postgres sink: "+format+": %w", append(args, connector.ErrInvalidConfiguration)...))
	}
	if c.upsertKeys != nil && len(c.upsertKeys) == 0 {
		bad("WithUpsert needs at least one key column")
	}
	if c.poolSize < 1 {
		bad("pool size %d must be at least 1 (the default is %d)", c.poolSize, DefaultPoolSize)
	}
	if c.statementTimeout < 0 {
		bad("statement timeout %v must be 0 (the server's) or positive (the default is %v)", c.statementTimeout, DefaultStatementTimeout)
	}
	if _, err := parseQualified(c.progressTable); err != nil {
		bad("progress table: %v", err)
	}
	if c.maxBytes <= 0 {
		bad("max checkpoint bytes %d must be positive (the default is %d)", c.maxBytes, DefaultMaxCheckpointBytes)
	}
	return errors.Join(errs...)
}

// parseIdentifier reads one SQL identifier: a double-quoted one is taken
// as it is (with "" for a quote), an unquoted one is folded to lower
// case, as PostgreSQL does.
func parseIdentifier(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty name")
	}
	if strings.HasPrefix(s, `"`) {
		if len(s) < 3 || !strings.HasSuffix(s, `"`) {
			return "", fmt.Errorf("%s: unterminated quoted name", s)
		}
		inner := s[1 : len(s)-1]
		if strings.Count(strings.ReplaceAll(inner, `""`, ""), `"`) > 0 {
			return "", fmt.Errorf("%s: a quote inside a quoted name must be doubled", s)
		}
		return strings.ReplaceAll(inner, `""`, `"`), nil
	}
	if strings.ContainsAny(s, "\" \t\n.") {
		return "", fmt.Errorf("%q is not a plain name: quote it (\"Name\") to keep spaces, dots or case", s)
	}
	return strings.ToLower(s), nil
}

// qualifiedName is a table's name, with its schema when one was given.
type qualifiedName struct {
	schema, name string
}

// parseQualified reads "table" or "schema.table", each part as
// parseIdentifier does. A dot inside a quoted part belongs to it.
func parseQualified(s string) (qualifiedName, error) {
	var parts []string
	rest := strings.TrimSpace(s)
	for rest != "" {
		var part string
		if strings.HasPrefix(rest, `"`) {
			i := 1
			for i < len(rest) {
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						i += 2
						continue
					}
					break
				}
				i++
			}
			if i >= len(rest) {
				return qualifiedName{}, fmt.Errorf("%s: unterminated quoted name", s)
			}
			part, rest = rest[:i+1], rest[i+1:]
		} else {
			j := strings.IndexByte(rest, '.')
			if j < 0 {
				j = len(rest)
			}
			part, rest = rest[:j], rest[j:]
		}
		id, err := parseIdentifier(part)
		if err != nil {
			return qualifiedName{}, err
		}
		parts = append(parts, id)
		if rest != "" {
			if rest[0] != '.' || len(rest) == 1 {
				return qualifiedName{}, fmt.Errorf("%s: expected table or schema.table", s)
			}
			rest = rest[1:]
		}
	}
	switch len(parts) {
	case 1:
		return qualifiedName{name: parts[0]}, nil
	case 2:
		return qualifiedName{schema: parts[0], name: parts[1]}, nil
	default:
		return qualifiedName{}, fmt.Errorf("%q: expected table or schema.table", s)
	}
}

// sql is the name quoted for a statement.
func (q qualifiedName) sql() string {
	if q.schema == "" {
		return pgx.Identifier{q.name}.Sanitize()
	}
	return pgx.Identifier{q.schema, q.name}.Sanitize()
}

// String is the name as errors show it.
func (q qualifiedName) String() string {
	if q.schema == "" {
		return q.name
	}
	return q.schema + "." + q.name
}
