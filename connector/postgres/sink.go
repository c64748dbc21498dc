package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/splitflow/splitflow/connector"
)

// RowFunc fills row, which has one element per column of the sink (in the
// order NewSink was given them), with the values of record: Go values
// that pgx encodes for the column's type (int64 for bigint, string for
// text, time.Time for timestamptz, []byte for bytea, nil for NULL, and
// so on). row is reused for the next record: the function must not keep
// it. It is called on the writer's task goroutine; an error fails the
// task.
type RowFunc[T any] func(record T, row []any) error

// Sink writes records as rows of one PostgreSQL table, exactly once: see
// the package doc. Make it with NewSink and add it with runtime.SinkTo.
type Sink[T any] struct {
	pgCfg    *pgxpool.Config
	table    qualifiedName
	columns  []string
	row      RowFunc[T]
	cfg      config
	progress qualifiedName

	// mu guards the pool the sink's writers and committers share in this
	// process: made by the first, closed by the last to close, so that a
	// job that ended leaves no connection or goroutine behind.
	mu           sync.Mutex
	pool         *pgxpool.Pool
	refs         int
	progressMade bool // the progress table is known to exist for this pool
}

var (
	_ connector.TwoPhaseCommittingSink[string, Committable] = (*Sink[string])(nil)
	_ connector.TwoPhaseCapable[string]                     = (*Sink[string])(nil)
	_ connector.CommitterRequired                           = (*Sink[string])(nil)
)

// NewSink returns a sink that writes each record as one row of table
// ("table" or "schema.table"; unquoted names are folded to lower case, as
// in SQL, and "Quoted" ones kept) into the given columns, with row
// filling their values. connString is pgx's, a URL or key=value pairs:
// host, port, dbname, user, password, sslmode and the other TLS settings,
// connect_timeout (30s when it gives none), pool_max_conns and
// statement_timeout (WithPoolSize and WithStatementTimeout win over
// them). Nothing is connected yet: the first writer checks the table, its
// columns and the rights it needs. Bad arguments fail with an error
// wrapping connector.ErrInvalidConfiguration.
func NewSink[T any](connString, table string, columns []string, row RowFunc[T], opts ...Option) (*Sink[T], error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	errs := []error{cfg.validate()}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("postgres sink: "+format+": %w", append(args, connector.ErrInvalidConfiguration)...))
	}
	pgCfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgx's message shows the connection string with its password
		// masked.
		bad("connection string: %v", err)
	}
	tbl, err := parseQualified(table)
	if err != nil {
		bad("table: %v", err)
	}
	progress, _ := parseQualified(cfg.progressTable) // validated above
	if row == nil {
		bad("no RowFunc")
	}
	if len(columns) == 0 {
		bad("no columns")
	}
	cols := make([]string, 0, len(columns))
	seen := map[string]bool{}
	for _, c := range columns {
		id, err := parseIdentifier(c)
		switch {
		case err != nil:
			bad("column: %v", err)
		case seen[id]:
			bad("column %q given twice", id)
		default:
			seen[id] = true
			cols = append(cols, id)
		}
	}
	var keys []string
	for _, k := range cfg.upsertKeys {
		id, err := parseIdentifier(k)
		switch {
		case err != nil:
			bad("key column: %v", err)
		case !seen[id]:
			bad("key column %q is not among the sink's columns %s", id, strings.Join(cols, ", "))
		default:
			keys = append(keys, id)
		}
	}
	if cfg.upsertKeys != nil {
		cfg.upsertKeys = keys
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Options win over the connection string, which wins over defaults.
	if cfg.poolSizeSet || !strings.Contains(connString, "pool_max_conns") {
		pgCfg.MaxConns = int32(cfg.poolSize)
	}
	params := pgCfg.ConnConfig.RuntimeParams
	_, inString := params["statement_timeout"]
	inString = inString || strings.Contains(params["options"], "statement_timeout")
	switch {
	case cfg.timeoutSet && cfg.statementTimeout == 0:
		delete(params, "statement_timeout")
	case cfg.timeoutSet || (!inString && cfg.statementTimeout > 0):
		params["statement_timeout"] = strconv.FormatInt(cfg.statementTimeout.Milliseconds(), 10)
	}
	if pgCfg.ConnConfig.ConnectTimeout == 0 {
		pgCfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return &Sink[T]{pgCfg: pgCfg, table: tbl, columns: cols, row: row, cfg: cfg, progress: progress}, nil
}

// TwoPhase implements connector.TwoPhaseCapable: the sink always commits
// in two phases, so runtime.SinkTo runs it with its committer.
func (s *Sink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	return connector.HideCommittable[T, Committable](s), true
}

// CommitterRequired implements connector.CommitterRequired: nothing is
// written without the committer.
func (s *Sink[T]) CommitterRequired() bool { return true }

// CommittableSerializer implements connector.TwoPhaseCommittingSink.
func (s *Sink[T]) CommittableSerializer() connector.VersionedSerializer[Committable] {
	return CommittableSerializer{}
}

// CreateCommitter implements connector.TwoPhaseCommittingSink. The
// committer connects at its first commit; it commits under the claim
// of the context (connector.ClaimInfo), whoever's claim prepared the
// committables.
func (s *Sink[T]) CreateCommitter(ictx connector.SinkInitContext) (connector.Committer[Committable], error) {
	return &committer{pool: s.acquirePool(), release: s.releasePool, progress: s.progress, claim: claimEpoch(ictx), incarnation: claimIncarnation(ictx)}, nil
}

// acquirePool returns the sink's pool, made if needed, counting the
// caller as a user until it calls releasePool.
func (s *Sink[T]) acquirePool() func(ctx context.Context) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs++
	return s.poolFor
}

// poolFor makes the pool on first use. pgxpool connects lazily, so
// making it cannot fail for an unreachable server.
func (s *Sink[T]) poolFor(ctx context.Context) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return nil, errors.New("postgres sink: pool used after its last user closed")
	}
	if s.pool == nil {
		p, err := pgxpool.NewWithConfig(ctx, s.pgCfg.Copy())
		if err != nil {
			return nil, fmt.Errorf("postgres sink: %s: %w", s.where(), err)
		}
		s.pool, s.progressMade = p, false
	}
	return s.pool, nil
}

// releasePool drops a user; the last closes the pool.
func (s *Sink[T]) releasePool() {
	s.mu.Lock()
	s.refs--
	var p *pgxpool.Pool
	if s.refs == 0 {
		p, s.pool = s.pool, nil
	}
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

// where names the server and database for errors, never the password.
func (s *Sink[T]) where() string {
	return describeServer(s.pgCfg.ConnConfig.Config)
}

func describeServer(c pgconn.Config) string {
	host := c.Host
	if strings.HasPrefix(host, "/") {
		host = "socket " + host
	}
	return fmt.Sprintf("PostgreSQL at %s:%d (database %q, user %q)", host, c.Port, c.Database, c.User)
}

// CreateWriter implements connector.Sink. It connects, checks the table,
// the columns, the key and the rights the sink needs, makes the progress
// table if it is missing, and lowers the subtask's progress to the
// checkpoint the job starts from (see the package doc, "Progress").
func (s *Sink[T]) CreateWriter(ictx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	if ci, ok := ictx.(connector.CommitterInfo); ok && !ci.CommitterRuns() {
		return nil, fmt.Errorf("postgres sink: rows are written only by the sink's committer, and this writer runs without one, so nothing it writes would reach the table: "+
			"the sink was added as a plain one (a wrapper around it passes on neither connector.TwoPhaseCapable nor connector.CommitterRequired to runtime.SinkTo); pass TwoPhase on from the wrapper: %w",
			connector.ErrInvalidConfiguration)
	}
	key, err := s.progressKey(ictx)
	if err != nil {
		return nil, err
	}
	ctx := ictx.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	getPool := s.acquirePool()
	ok := false
	defer func() {
		if !ok {
			s.releasePool()
		}
	}()
	pool, err := getPool(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres sink: connect to %s: %w", s.where(), err)
	}
	defer conn.Release()
	if err := s.ensureProgressTable(ctx, conn); err != nil {
		return nil, err
	}
	tbl, err := s.describeTable(ctx, conn)
	if err != nil {
		return nil, err
	}
	if key.sink == "" {
		key.sink = tbl.name.String()
	}
	restored, fromCheckpoint := ictx.RestoredCheckpointID()
	if err := lowerProgress(ctx, conn, s.progress, key, restored, !fromCheckpoint, ictx.Parallelism()); err != nil {
		return nil, fmt.Errorf("postgres sink: reset the progress of subtask %d to checkpoint %d in %s: %w", key.subtask, restored, s.progress, err)
	}
	w, err := newWriter(s, key, tbl)
	if err != nil {
		return nil, err
	}
	ok = true
	return w, nil
}

// progressKey is the key of the writer's rows in the progress table,
// without the sink name when it defaults to the table's.
func (s *Sink[T]) progressKey(ictx connector.SinkInitContext) (progressKey, error) {
	job := s.cfg.jobName
	if job == "" {
		if ji, ok := ictx.(connector.JobInfo); ok {
			job = ji.JobName()
		}
	}
	if job == "" {
		return progressKey{}, fmt.Errorf("postgres sink: no job name for the progress key: the engine gave none; set one with postgres.WithJobName: %w", connector.ErrInvalidConfiguration)
	}
	return progressKey{job: job, sink: s.cfg.sinkName, subtask: ictx.SubtaskIndex(), claim: claimEpoch(ictx), incarnation: claimIncarnation(ictx)}, nil
}

// claimEpoch is the claim the subtask runs under (connector.ClaimInfo),
// 0 outside a distributed job.
func claimEpoch(ictx connector.SinkInitContext) int64 {
	if ci, ok := ictx.(connector.ClaimInfo); ok {
		return ci.ClaimEpoch()
	}
	return 0
}

// claimIncarnation is the run of the job that numbers the subtask's
// claims (connector.ClaimIncarnation), "" when the context does not say.
func claimIncarnation(ictx connector.SinkInitContext) string {
	if ci, ok := ictx.(connector.ClaimIncarnation); ok {
		return ci.ClaimIncarnation()
	}
	return ""
}
