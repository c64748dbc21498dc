package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// cluster is where a sink test runs: kfake, or the real broker.
type cluster struct {
	seeds []string
	fake  *kfake.Cluster
}

func onClusters(t *testing.T, fn func(t *testing.T, c cluster)) {
	t.Run("kfake", func(t *testing.T) {
		f, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fn(t, cluster{seeds: f.ListenAddrs(), fake: f})
	})
	t.Run("kafka", func(t *testing.T) { fn(t, cluster{seeds: kafkatest.Get(t).Addrs()}) })
}

func (c cluster) topic(t *testing.T) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	name := fmt.Sprintf("sink-%d", time.Now().UnixNano())
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func (c cluster) committed(t *testing.T, topic string) []string {
	t.Helper()
	var vs []string
	for _, r := range kafkatest.ReadCommitted(t, c.seeds, topic, 30*time.Second) {
		vs = append(vs, string(r.Value))
	}
	return vs
}

// initCtx is the SinkInitContext of subtask 0 of 1.
type initCtx struct{}

func (initCtx) Context() context.Context            { return context.Background() }
func (initCtx) SubtaskIndex() int                   { return 0 }
func (initCtx) Parallelism() int                    { return 1 }
func (initCtx) AttemptNumber() int                  { return 0 }
func (initCtx) RestoredCheckpointID() (int64, bool) { return 0, false }

// request is the engine's side of one committable handed to Commit.
type request struct {
	c       txn.Committable
	retries int
	outcome string
	err     error
}

func (r *request) Committable() txn.Committable            { return r.c }
func (r *request) NumberOfRetries() int                    { return r.retries }
func (r *request) SignalFailedWithKnownReason(err error)   { r.outcome, r.err = "known", err }
func (r *request) SignalFailedWithUnknownReason(err error) { r.outcome, r.err = "unknown", err }
func (r *request) RetryLater()                             { r.outcome = "retry" }
func (r *request) UpdateAndRetryLater(c txn.Committable)   { r.outcome, r.c = "retry", c }
func (r *request) SignalAlreadyCommitted()                 { r.outcome = "already" }

func commit(t *testing.T, s *Sink[string], cs []txn.Committable) []*request {
	t.Helper()
	cm, err := s.CreateCommitter(initCtx{})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	var reqs []connector.CommitRequest[txn.Committable]
	var out []*request
	for _, c := range cs {
		r := &request{c: c}
		reqs = append(reqs, r)
		out = append(out, r)
	}
	if err := cm.Commit(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	return out
}

// stringSink is an exactly-once sink of prefix writing strings to topic;
// with prefix "" opts choose its guarantee.
func stringSink(t *testing.T, c cluster, topic, prefix string, opts ...SinkOption) *Sink[string] {
	t.Helper()
	ser := KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	all := []SinkOption{WithBrokers(c.seeds...)}
	if prefix != "" {
		all = append(all, WithExactlyOnce(prefix))
	}
	all = append(all, opts...)
	s, err := NewSink[string](ser, all...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writer(t *testing.T, s *Sink[string]) *sinkWriter[string] {
	t.Helper()
	w, err := s.CreateWriter(initCtx{})
	if err != nil {
		t.Fatal(err)
	}
	return w.(*sinkWriter[string])
}

func write(t *testing.T, w *sinkWriter[string], vs ...string) {
	t.Helper()
	for _, v := range vs {
		if err := w.Write(v, connector.WriteContext{Timestamp: connector.NoTimestamp}); err != nil {
			t.Fatal(err)
		}
	}
}

func prepare(t *testing.T, w *sinkWriter[string], id int64) []txn.Committable {
	t.Helper()
	if err := w.Flush(false); err != nil {
		t.Fatal(err)
	}
	cs, err := w.PrepareCommit(id)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Records become visible only when the committer commits after the
// checkpoint (the commit rule), and each checkpoint's transaction commits
// once.
func TestSinkExactlyOnceCommitsAfterCheckpoint(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		s := stringSink(t, c, topic, fmt.Sprintf("eo-%d", time.Now().UnixNano()))
		w := writer(t, s)
		defer w.Close()
		write(t, w, "a", "b")
		cs := prepare(t, w, 1)
		if len(cs) != 1 || cs[0].CheckpointID != 1 {
			t.Fatalf("committables %v", cs)
		}
		write(t, w, "c") // the next checkpoint's transaction is open
		for _, r := range commit(t, s, cs) {
			if r.outcome != "" {
				t.Fatalf("commit: %s %v", r.outcome, r.err)
			}
		}
		cs2 := prepare(t, w, 2)
		commit(t, s, cs2)
		if got := c.committed(t, topic); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("read_committed sees %q, want [a b c]", got)
		}
		// An empty checkpoint yields no committable.
		if cs3 := prepare(t, w, 3); len(cs3) != 0 {
			t.Fatalf("empty checkpoint produced %v", cs3)
		}
	})
}

// A crash after prepare, before commit: the new attempt commits the
// restored committable before it creates its writer (whose start aborts
// what is open), and the records appear exactly once.
func TestResumeSinkCrashAfterPrepare(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("crash-%d", time.Now().UnixNano())
		old := stringSink(t, c, topic, prefix)
		w := writer(t, old)
		write(t, w, "x", "y")
		cs := prepare(t, w, 5)
		write(t, w, "lost-open") // the next transaction, open at the crash
		_ = w.Flush(false)
		// The process dies: nothing is closed. A new process restores the
		// committable from checkpoint 5.
		ser := CommittableSerializer{}
		b, _ := ser.Serialize(cs[0])
		restored, err := ser.Deserialize(ser.Version(), b)
		if err != nil || restored != cs[0] {
			t.Fatalf("committable round trip: %v %v", restored, err)
		}
		s := stringSink(t, c, topic, prefix)
		for _, r := range commit(t, s, []txn.Committable{restored}) {
			if r.outcome != "" {
				t.Fatalf("commit of the restored committable: %s %v", r.outcome, r.err)
			}
		}
		began := time.Now()
		w2 := writer(t, s) // aborts the open transaction of the crashed attempt
		defer w2.Close()
		t.Logf("lingering abort at start took %s", time.Since(began))
		write(t, w2, "z")
		commit(t, s, prepare(t, w2, 6))
		if got := c.committed(t, topic); !slices.Equal(got, []string{"x", "y", "z"}) {
			t.Fatalf("read_committed sees %q, want [x y z]", got)
		}
		_ = w.Close() // the zombie's resources
	})
}

// A crash before prepare leaves an open transaction; the next start aborts
// it so read_committed consumers are not pinned.
func TestLingerSinkCrashBeforePrepare(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("linger-%d", time.Now().UnixNano())
		w := writer(t, stringSink(t, c, topic, prefix))
		write(t, w, "never")
		// Wait until the broker holds the transaction open, then die.
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		id := txn.TransactionalID(prefix, 0, 0)
		deadline := time.Now().Add(20 * time.Second)
		for {
			d, err := kadm.NewClient(cl).DescribeTransactions(context.Background(), id)
			if err == nil && d[id].State == "Ongoing" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("transaction %s never became ongoing: %v %v", id, d, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		crashed := time.Now()
		w2 := writer(t, stringSink(t, c, topic, prefix))
		defer w2.Close()
		if got := c.committed(t, topic); len(got) != 0 {
			t.Fatalf("read_committed sees %q of a transaction that was never prepared", got)
		}
		t.Logf("read_committed consumers pinned for %s after the restart began", time.Since(crashed))
		_ = w.Close()
	})
}

// A writer of an older attempt can never commit once a new attempt started.
func TestFenceSinkOldWriter(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("fence-%d", time.Now().UnixNano())
		oldSink := stringSink(t, c, topic, prefix)
		w := writer(t, oldSink)
		write(t, w, "zombie")
		cs := prepare(t, w, 1)

		w2 := writer(t, stringSink(t, c, topic, prefix)) // new attempt: fences prefix-0-*
		defer w2.Close()
		reqs := commit(t, oldSink, cs)
		var dl *txn.DataLossError
		if reqs[0].outcome != "known" || !errors.As(reqs[0].err, &dl) {
			t.Fatalf("old writer's commit: %s %v, want a known-reason failure with a DataLossError", reqs[0].outcome, reqs[0].err)
		}
		if got := c.committed(t, topic); len(got) != 0 {
			t.Fatalf("read_committed sees the fenced writer's records: %q", got)
		}
		_ = w.Close()
	})
}

// A committable whose transaction the broker aborted (its timeout passed)
// fails with a known reason carrying a DataLossError; never success.
func TestSinkAbortedTransactionIsDataLoss(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		s := stringSink(t, c, topic, fmt.Sprintf("lost-%d", time.Now().UnixNano()))
		w := writer(t, s)
		defer w.Close()
		write(t, w, "gone")
		cs := prepare(t, w, 9)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := txn.Abort(context.Background(), cl, cs[0]); err != nil { // what the broker's timeout does
			t.Fatal(err)
		}
		r := commit(t, s, cs)[0]
		var dl *txn.DataLossError
		if r.outcome != "known" || !errors.As(r.err, &dl) || dl.CheckpointID != 9 {
			t.Fatalf("commit of an aborted transaction: %s %v", r.outcome, r.err)
		}
	})
}

// Transient commit failures that outlast the commit timeout are retried
// later, not failed.
func TestSinkTransientCommitErrorsAreRetried(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs(), fake: f}
	topic := c.topic(t)
	s := stringSink(t, c, topic, fmt.Sprintf("retry-%d", time.Now().UnixNano()))
	s.cfg.commitTimeout = 300 * time.Millisecond
	w := writer(t, s)
	defer w.Close()
	write(t, w, "r")
	cs := prepare(t, w, 1)
	var refuse atomic.Bool
	refuse.Store(true)
	f.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !refuse.Load() {
			f.DropControl() // only valid inside the control function
			return nil, nil, false
		}
		f.KeepControl()
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	})
	if r := commit(t, s, cs)[0]; r.outcome != "retry" {
		t.Fatalf("commit during transient errors: %s %v, want retry later", r.outcome, r.err)
	}
	refuse.Store(false)
	if r := commit(t, s, cs)[0]; r.outcome != "" {
		t.Fatalf("retried commit: %s %v", r.outcome, r.err)
	}
	if got := c.committed(t, topic); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("read_committed sees %q", got)
	}
}

func TestSinkValidatesTransactionTimeout(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs()}
	s := stringSink(t, c, "t", "p", WithTransactionTimeout(2*time.Minute))
	ctx := cpCtx{cc: connector.CheckpointConfig{Interval: 30 * time.Second, Timeout: 40 * time.Second, MaxRestartDelay: 10 * time.Second}}
	_, err = s.CreateWriter(ctx)
	if err == nil || !strings.Contains(err.Error(), "transaction.timeout.ms (2m0s) must exceed") || !strings.Contains(err.Error(), "WithTransactionTimeout") || !errors.Is(err, connector.ErrInvalidConfiguration) {
		t.Fatalf("got %v", err)
	}
	ctx.cc = connector.CheckpointConfig{Interval: 10 * time.Second, Timeout: 10 * time.Second, MaxRestartDelay: 10 * time.Second}
	w, err := s.CreateWriter(ctx)
	if err != nil {
		t.Fatalf("timings within the timeout: %v", err)
	}
	_ = w.Close()
}

func TestSinkConfigValidation(t *testing.T) {
	ser := KeyValueSerializer("t", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	for _, tc := range []struct {
		opts []SinkOption
		want string
	}{
		{[]SinkOption{WithAtLeastOnce()}, "no seed brokers"},
		{[]SinkOption{WithBrokers("x:1"), WithExactlyOnce("")}, "transactional id prefix"},
		{[]SinkOption{WithBrokers("x:1"), WithTransactionalIDPoolSize(1)}, "pool size"},
	} {
		if _, err := NewSink[string](ser, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
}

// A sink's delivery guarantee is one option, and exactly-once carries its
// transactional id prefix: without options a sink is at-least-once; two
// different guarantee options, or two prefixes, are refused with an error
// that names both options, rather than the last one winning; a prefix
// given with another guarantee is refused saying that only exactly-once
// uses one; exactly-once cannot be chosen without a prefix.
func TestSinkGuaranteeIsOneOptionAndExactlyOnceCarriesItsPrefix(t *testing.T) {
	ser := KeyValueSerializer("t", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
	for _, tc := range []struct {
		name string
		opts []SinkOption
		want DeliveryGuarantee
	}{
		{"default", nil, AtLeastOnce},
		{"exactly-once", []SinkOption{WithExactlyOnce("orders")}, ExactlyOnce},
		{"at-least-once", []SinkOption{WithAtLeastOnce()}, AtLeastOnce},
		{"no guarantee", []SinkOption{WithNoGuarantee()}, NoGuarantee},
		{"one option twice", []SinkOption{WithExactlyOnce("orders"), WithExactlyOnce("orders")}, ExactlyOnce},
	} {
		s, err := NewSink[string](ser, append(tc.opts, WithBrokers("x:1"))...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if s.Guarantee() != tc.want || s.CommitterRequired() != (tc.want == ExactlyOnce) {
			t.Errorf("%s: guarantee %v, committer required %v; want %v", tc.name, s.Guarantee(), s.CommitterRequired(), tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		opts []SinkOption
		want []string
	}{
		{"at-least-once with a prefix", []SinkOption{WithExactlyOnce("orders"), WithAtLeastOnce()},
			[]string{`WithExactlyOnce("orders")`, "WithAtLeastOnce()", "prefix is for exactly-once alone"}},
		{"no guarantee with a prefix", []SinkOption{WithNoGuarantee(), WithExactlyOnce("orders")},
			[]string{"WithNoGuarantee()", `WithExactlyOnce("orders")`, "prefix is for exactly-once alone"}},
		{"two guarantees", []SinkOption{WithAtLeastOnce(), WithNoGuarantee()},
			[]string{"WithAtLeastOnce()", "WithNoGuarantee()", "one delivery guarantee"}},
		{"two prefixes", []SinkOption{WithExactlyOnce("a"), WithExactlyOnce("b")},
			[]string{`WithExactlyOnce("a")`, `WithExactlyOnce("b")`, "one transactional id prefix"}},
		{"empty prefix", []SinkOption{WithExactlyOnce("")}, []string{`WithExactlyOnce("")`, "no transactional id prefix"}},
		{"prefix with the terminator", []SinkOption{WithExactlyOnce("a:b")}, []string{`"a:b"`, "WithExactlyOnce"}},
	} {
		_, err := NewSink[string](ser, append(tc.opts, WithBrokers("x:1"))...)
		if !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Errorf("%s: got %v, want an error wrapping connector.ErrInvalidConfiguration", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
	// The shuffle's sinks are exactly-once on their channel whatever
	// guarantee the user passes them, as documented: no conflict.
	sh, err := NewShuffle(WithBrokers("x:1"), WithShuffleSinkOptions(WithAtLeastOnce()))
	if err != nil {
		t.Fatal(err)
	}
	if snk, err := sh.newSink("c", 1); err != nil || snk.Guarantee() != ExactlyOnce || snk.cfg.prefix != "c" {
		t.Fatalf("shuffle sink: %v; want exactly-once on prefix c", err)
	}
}

// At-least-once makes records durable at every checkpoint flush.
func TestSinkAtLeastOnceFlushes(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		ser := KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil })
		s, err := NewSink[string](ser, WithBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		w := writer(t, s)
		defer w.Close()
		write(t, w, "1", "2")
		if cs := prepare(t, w, 1); len(cs) != 0 {
			t.Fatalf("at-least-once produced committables %v", cs)
		}
		if got := c.committed(t, topic); !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("after the checkpoint flush: %q", got)
		}
	})
}

// A job restored from checkpoint N that fails again before a new checkpoint
// completes restores N once more and commits its committables a second
// time. The attempt in between must not have registered their ids anew, or
// the second commit meets a moved epoch and reports data loss that did not
// happen.
func TestResumeSinkRestoredTwiceFromOneCheckpoint(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		s := stringSink(t, c, topic, fmt.Sprintf("twice-%d", time.Now().UnixNano()))
		w1 := writer(t, s)
		write(t, w1, "a")
		cs := prepare(t, w1, 1)
		_ = w1.Close() // attempt 1 fails after checkpoint 1 completed, before committing

		for attempt := 2; attempt <= 3; attempt++ {
			for _, r := range commit(t, s, cs) { // restore: committer first
				if r.outcome != "" {
					t.Fatalf("attempt %d: commit of the restored committable: %s %v", attempt, r.outcome, r.err)
				}
			}
			w := writer(t, s)
			if attempt == 2 {
				write(t, w, "lost") // never prepared: the attempt fails
				_ = w.Close()
				continue
			}
			write(t, w, "b")
			cs2 := prepare(t, w, 2)
			if cs2[0].TransactionalID == cs[0].TransactionalID {
				t.Fatalf("the restored committable's id %s was reused before a new checkpoint completed", cs[0].TransactionalID)
			}
			commit(t, s, cs2)
			_ = w.Close()
		}
		if got := c.committed(t, topic); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("read_committed sees %q, want [a b]", got)
		}
	})
}

// withGuarantee is the option that chooses g, exactly-once with prefix.
func withGuarantee(g DeliveryGuarantee, prefix string) SinkOption {
	switch g {
	case ExactlyOnce:
		return WithExactlyOnce(prefix)
	case NoGuarantee:
		return WithNoGuarantee()
	default:
		return WithAtLeastOnce()
	}
}
