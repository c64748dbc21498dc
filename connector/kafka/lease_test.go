package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// jobCtx is the SinkInitContext of a subtask of job, distributed or not.
type jobCtx struct {
	initCtx
	sub, par    int
	job         string
	distributed bool
}

func (c jobCtx) SubtaskIndex() int    { return c.sub }
func (c jobCtx) Parallelism() int     { return c.par }
func (c jobCtx) JobName() string      { return c.job }
func (c jobCtx) DistributedJob() bool { return c.distributed }

// A transactional id prefix belongs to one job. Before, a second job on
// the prefix started: both aborted each other's "lingering" transactions,
// fenced each other back and forth, then ran side by side, each
// committing its own copy of the output, until one failed for good with
// "its data is lost". Now the sink's first writer takes the prefix's
// lease (the consumer group prefix:lease) before it touches an id, and a
// second job is refused at start, within the lease's session timeout,
// naming the prefix and the holder; the subtasks of one job, and the
// processes of one distributed job, share it; a holder that died without
// leaving expires within its session timeout, and the start that waits it
// out takes the prefix.
func TestSecondJobOnATransactionalIDPrefixIsRefusedAtStart(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cluster{seeds: f.ListenAddrs()}
	lease := WithPrefixLeaseSessionTimeout(time.Second)
	writer := func(t *testing.T, s *Sink[string], ctx jobCtx) connector.SinkWriter[string] {
		t.Helper()
		w, err := s.CreateWriter(ctx)
		if err != nil {
			t.Fatalf("subtask %d of job %q refused: %v", ctx.sub, ctx.job, err)
		}
		return w
	}
	refused := func(t *testing.T, s *Sink[string], ctx jobCtx, wants ...string) {
		t.Helper()
		began := time.Now()
		w, err := s.CreateWriter(ctx)
		if err == nil {
			_ = w.Close()
			t.Fatalf("job %q started on a prefix another job holds", ctx.job)
		}
		t.Logf("refused after %s: %v", time.Since(began).Round(time.Millisecond), err)
		var held *txn.PrefixHeldError
		if !errors.As(err, &held) || !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Fatalf("got %v; want a *txn.PrefixHeldError wrapping connector.ErrInvalidConfiguration", err)
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
	}

	t.Run("one process per job", func(t *testing.T) {
		a := stringSink(t, c, "out", "orders", lease)
		w0 := writer(t, a, jobCtx{sub: 0, par: 2, job: "a"})
		w1 := writer(t, a, jobCtx{sub: 1, par: 2, job: "a"})
		b := stringSink(t, c, "out", "orders", lease)
		refused(t, b, jobCtx{sub: 0, par: 1, job: "b"}, `"orders"`, `job "a"`, "session timeout (1s)")
		// A writer that closes keeps the lease for the other; the last
		// releases it, and then the other job may start.
		_ = w0.Close()
		refused(t, b, jobCtx{sub: 0, par: 1, job: "b"}, `"orders"`)
		_ = w1.Close()
		_ = writer(t, b, jobCtx{sub: 0, par: 1, job: "b"}).Close()
	})

	t.Run("processes of one distributed job", func(t *testing.T) {
		p1 := stringSink(t, c, "out", "shared", lease)
		p2 := stringSink(t, c, "out", "shared", lease)
		w1 := writer(t, p1, jobCtx{sub: 0, par: 2, job: "d", distributed: true})
		w2 := writer(t, p2, jobCtx{sub: 1, par: 2, job: "d", distributed: true})
		defer w1.Close()
		defer w2.Close()
		other := stringSink(t, c, "out", "shared", lease)
		refused(t, other, jobCtx{sub: 0, par: 2, job: "e", distributed: true}, `"shared"`, `distributed job "d"`)
		// A process of the job that holds it needs nothing more.
		p3 := stringSink(t, c, "out", "shared", lease)
		_ = writer(t, p3, jobCtx{sub: 0, par: 2, job: "d", distributed: true}).Close()
	})

	t.Run("killed holder expires", func(t *testing.T) {
		// A member of another holder that joined and then died: it
		// never heartbeats nor leaves.
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()
		join := kmsg.NewPtrJoinGroupRequest()
		join.Group = txn.LeaseGroup("killed")
		join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 1000, 1000
		join.ProtocolType = "splitflow-txn-prefix"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = `job "dead", process 1 on host`
		join.Protocols = append(join.Protocols, p)
		var resp *kmsg.JoinGroupResponse
		for range 3 {
			if resp, err = join.RequestWith(ctx, cl); err != nil {
				t.Fatal(err)
			}
			if err = kerr.ErrorForCode(resp.ErrorCode); !errors.Is(err, kerr.MemberIDRequired) {
				break
			}
			join.MemberID = resp.MemberID
		}
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		s := stringSink(t, c, "out", "killed", WithPrefixLeaseSessionTimeout(3*time.Second))
		_ = writer(t, s, jobCtx{sub: 0, par: 1, job: "restarted"}).Close()
	})

	t.Run("prefix with the terminator", func(t *testing.T) {
		_, err := NewSink[string](KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
			WithBrokers(c.seeds...), WithExactlyOnce("a:b"))
		if err == nil || !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), `"a:b" holds ':'`) {
			t.Fatalf("got %v; want the prefix refused for its ':'", err)
		}
	})
}

// A checkpoint written before the colon names its transactions
// prefix-<subtask>-<n>. A job restored from it commits them (the
// committer runs before the writer) and its writer's start aborts the
// legacy ids the previous run left open, sparing the restored ones, as
// it does its own ids'; the new ids it writes under are prefix:....
func TestRestoredLegacyTransactionalIDsCommitAndAbort(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		topic := c.topic(t)
		prefix := fmt.Sprintf("legacy-%d", time.Now().UnixNano())
		ctx := context.Background()
		// The previous run, of the version before the colon: one
		// transaction prepared for checkpoint 1, one left open.
		open := func(id, value string) txn.Committable {
			p, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			pid, epoch, err := p.ProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}
		}
		prepared := open(prefix+"-0-0", "prepared")
		open(prefix+"-0-1", "lingering")

		s := stringSink(t, c, topic, prefix)
		cm, err := s.CreateCommitter(initCtx{})
		if err != nil {
			t.Fatal(err)
		}
		defer cm.Close()
		cm.(connector.RestoredCommittablesListener[txn.Committable]).RestoredCommittables([]txn.Committable{prepared})
		r := &request{c: prepared}
		if err := cm.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
			t.Fatalf("commit of the restored legacy committable %s: %v %s %v", prepared, err, r.outcome, r.err)
		}
		w := writer(t, s)
		defer w.Close()
		write(t, w, "new")
		cs := prepare(t, w, 2)
		if len(cs) != 1 || !strings.HasPrefix(cs[0].TransactionalID, prefix+":") {
			t.Fatalf("new committables %v; want one under %s:", cs, prefix)
		}
		for _, r := range commit(t, s, cs) {
			if r.err != nil {
				t.Fatalf("commit %s: %v", r.c, r.err)
			}
		}
		got := c.committed(t, topic)
		slices.Sort(got)
		if fmt.Sprint(got) != "[new prepared]" {
			t.Fatalf("read_committed sees %q; want the restored legacy transaction and the new one, and the lingering one aborted", got)
		}
	})
}
