package integration

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/txn"
)

// failingFirstCommitSink is the exactly-once Kafka sink with its first
// commit held back: retried while checkpoints complete, then failed for
// good, as a commit that keeps failing would.
type failingFirstCommitSink struct {
	*kafka.Sink[string]
	completed *atomic.Int64 // checkpoints completed so far
	holdFor   int64         // checkpoints to complete while it is held
}

// TwoPhase hands runtime.SinkTo this sink, with its held committer,
// rather than the two-phase form of the Kafka sink it wraps.
func (s *failingFirstCommitSink) TwoPhase() (connector.HiddenTwoPhaseSink[string], bool) {
	return connector.HideCommittable[string, txn.Committable](s), true
}

func (s *failingFirstCommitSink) CreateCommitter(ctx connector.SinkInitContext) (connector.Committer[txn.Committable], error) {
	c, err := s.Sink.CreateCommitter(ctx)
	if err != nil {
		return nil, err
	}
	return &heldCommitter{Committer: c, s: s}, nil
}

var errNeverTaken = errors.New("the broker never took the commit")

type heldCommitter struct {
	connector.Committer[txn.Committable]
	s *failingFirstCommitSink

	mu    sync.Mutex
	first string // the transactional id held back
	from  int64  // checkpoints completed when it was first seen
}

// RestoredCommittables passes the restored committables on to the Kafka
// committer, which spares them when it cleans up.
func (c *heldCommitter) RestoredCommittables(all []txn.Committable) {
	if l, ok := c.Committer.(connector.RestoredCommittablesListener[txn.Committable]); ok {
		l.RestoredCommittables(all)
	}
}

func (c *heldCommitter) Commit(ctx context.Context, reqs []connector.CommitRequest[txn.Committable]) error {
	var rest []connector.CommitRequest[txn.Committable]
	c.mu.Lock()
	for _, r := range reqs {
		id := r.Committable().String()
		if c.first == "" {
			c.first, c.from = id, c.s.completed.Load()
		}
		if id != c.first {
			rest = append(rest, r)
			continue
		}
		if c.s.completed.Load()-c.from < c.s.holdFor {
			r.RetryLater()
		} else {
			r.SignalFailedWithKnownReason(errNeverTaken)
		}
	}
	c.mu.Unlock()
	if len(rest) == 0 {
		return nil
	}
	return c.Committer.Commit(ctx, rest)
}

// A new job that starts from a group's committed offsets skips nothing on
// the real broker: the source and the exactly-once sink run in separate
// tasks, the sink's first commit is held back while several checkpoints
// complete and then fails, and the group may hold no offset past what the
// sink committed. Every input record is then in the failed job's committed
// output or read by the new job.
func TestFreshJobFromGroupOffsetsSkipsNothing(t *testing.T) {
	b := kafkatest.Get(t)
	in := b.CreateTopic(t, "groupoffsets-in", 2, nil)
	out := b.CreateTopic(t, "groupoffsets-out", 1, nil)
	group := in + "-group"
	ids := idRange(0, 400)
	writeIDs(t, b, in, ids, modulo(2))

	src, err := kafka.NewSource(kafka.StringValues(), kafka.WithBrokers(b.Addrs()...), kafka.WithTopics(in), kafka.WithGroupID(group))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := kafka.NewSink(kafka.KeyValueSerializer(out, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		kafka.WithBrokers(b.Addrs()...), kafka.WithExactlyOnce(out),
		kafka.WithTransactionTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var completed atomic.Int64
	sink := &failingFirstCommitSink{Sink: ks, completed: &completed, holdFor: 10}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithRestartStrategy(restart.None()), runtime.WithLogger(testLogger(t)),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { completed.Add(1) }}))
	lines := runtime.FromSource(env, src, "in").UID("in")
	runtime.SinkTo[string](runtime.Rebalance(lines), sink).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = env.Execute(ctx, "held commit")
	if !errors.Is(err, errNeverTaken) || ctx.Err() != nil {
		t.Fatalf("Execute = %v, want the held commit's failure", err)
	}
	t.Logf("the first job failed after %d checkpoints: %v", completed.Load(), err)
	first, err := committed.Visible(ctx, b.Addrs(), out, time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// A new job, without checkpoints, from the group's committed offsets.
	fresh, err := kafka.NewSource(kafka.StringValues(), kafka.WithBrokers(b.Addrs()...), kafka.WithTopics(in), kafka.WithGroupID(group),
		kafka.WithStartingOffsets(kafka.CommittedOffsets(kafka.ResetEarliest)), kafka.WithBounded(kafka.LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	read := &idSet{seen: map[string]bool{}}
	env2 := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(testLogger(t)))
	runtime.SinkTo(runtime.FromSource(env2, fresh, "in"), connector.Sink[string](read))
	if err := env2.Execute(ctx, "fresh from the group"); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range first {
		have[string(r.Value)] = true
	}
	lost := 0
	for _, id := range ids {
		v := strconv.FormatInt(id, 10)
		if !have[v] && !read.seen[v] {
			lost++
		}
	}
	t.Logf("SUMMARY scenario=%q in=%d committed_by_failed_job=%d read_by_fresh_job=%d lost=%d",
		"fresh job from group offsets", len(ids), len(have), len(read.seen), lost)
	if lost > 0 {
		t.Errorf("a fresh job from the group's committed offsets skipped %d of %d records that the failed job never committed (it committed %d)",
			lost, len(ids), len(have))
	}
}

// idSet is a plain sink that keeps the values it was given.
type idSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *idSet) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return idSetWriter{s}, nil
}

type idSetWriter struct{ s *idSet }

func (w idSetWriter) Write(v string, _ connector.WriteContext) error {
	w.s.mu.Lock()
	w.s.seen[v] = true
	w.s.mu.Unlock()
	return nil
}
func (idSetWriter) Flush(bool) error { return nil }
func (idSetWriter) Close() error     { return nil }
