package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// database returns the connection string of a fresh database on the
// package's server.
func database(t *testing.T) string {
	t.Helper()
	return pgtest.Get(t).Database(t)
}

// execSQL runs statements on a connection of its own, closed before it
// returns: the suite's leak check must not see a connection of the test
// itself.
func execSQL(t testing.TB, connString string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func connect(t testing.TB, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), connString)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// queryInt64s returns the first column of the rows of query.
func queryInt64s(connString, query string, args ...any) ([]int64, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func mustInt64s(t testing.TB, connString, query string, args ...any) []int64 {
	t.Helper()
	v, err := queryInt64s(connString, query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

var tableSeq atomic.Int64

// tableName returns a table name no other test of the binary uses.
func tableName(prefix string) string {
	return fmt.Sprintf("%s_%d", prefix, tableSeq.Add(1))
}

// initContext is a connector.SinkInitContext of a test's own, for
// writers and committers made without the engine.
type initContext struct {
	subtask, parallelism int
	restored             int64
	committer            bool
	claim                int64 // connector.ClaimInfo's epoch; 0 outside a distributed job
	// incarnation is connector.ClaimIncarnation's: the run of the job
	// whose slot logs number the claims.
	incarnation string
}

func (c initContext) SubtaskIndex() int { return c.subtask }
func (c initContext) Parallelism() int  { return max(c.parallelism, 1) }
func (c initContext) AttemptNumber() int {
	return 0
}
func (c initContext) RestoredCheckpointID() (int64, bool) { return c.restored, c.restored > 0 }
func (c initContext) Context() context.Context            { return context.Background() }
func (c initContext) CommitterRuns() bool                 { return c.committer }
func (c initContext) JobName() string                     { return "test-job" }
func (c initContext) DistributedJob() bool                { return c.claim > 0 }
func (c initContext) ClaimEpoch() int64                   { return c.claim }
func (c initContext) ClaimIncarnation() string            { return c.incarnation }

var (
	_ connector.SinkInitContext  = initContext{}
	_ connector.CommitterInfo    = initContext{}
	_ connector.JobInfo          = initContext{}
	_ connector.ClaimInfo        = initContext{}
	_ connector.ClaimIncarnation = initContext{}
)

// request is a connector.CommitRequest of a test's own, recording the
// signal it got.
type request struct {
	c      Committable
	signal string
	err    error
}

func (r *request) Committable() Committable                { return r.c }
func (r *request) NumberOfRetries() int                    { return 0 }
func (r *request) SignalFailedWithKnownReason(err error)   { r.signal, r.err = "known", err }
func (r *request) SignalFailedWithUnknownReason(err error) { r.signal, r.err = "unknown", err }
func (r *request) RetryLater()                             { r.signal = "retry" }
func (r *request) UpdateAndRetryLater(Committable)         { r.signal = "retry" }
func (r *request) SignalAlreadyCommitted()                 { r.signal = "already" }

// commit commits cs with a new committer of sink, as a restarted subtask
// would, and returns the requests with their signals.
func commit[T any](t *testing.T, sink *Sink[T], cs ...Committable) []*request {
	t.Helper()
	out, err := commitAs(t, sink, initContext{}, cs...)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return out
}

// commitAs commits cs with a new committer of sink made with ictx (its
// claim, say) and returns the requests and Commit's error.
func commitAs[T any](t *testing.T, sink *Sink[T], ictx initContext, cs ...Committable) ([]*request, error) {
	t.Helper()
	ictx.committer = true
	cm, err := sink.CreateCommitter(ictx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cm.Close() }()
	var reqs []connector.CommitRequest[Committable]
	var out []*request
	for _, c := range cs {
		r := &request{c: c}
		reqs = append(reqs, r)
		out = append(out, r)
	}
	return out, cm.Commit(context.Background(), reqs)
}

// roundTrip passes c through the committable serializer, as a checkpoint
// does.
func roundTrip(t *testing.T, c Committable) Committable {
	t.Helper()
	ser := CommittableSerializer{}
	b, err := ser.Serialize(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ser.Deserialize(ser.Version(), b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}
