package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/metrics/metricstest"
	"github.com/splitflow/splitflow/txn"
)

// hangingCase is a transaction its coordinator committed that partition 0
// of topic holds open (kafkatest.Broker.HangCommit), with values a, b, c,
// under an id of prefix's pool that the writers do not use, so that
// their transactions do not end it by the way.
type hangingCase struct {
	b       *kafkatest.Broker
	c       cluster
	topic   string
	prefix  string
	hanging txn.Committable
}

func newHangingCase(t *testing.T, name string) hangingCase {
	t.Helper()
	b := kafkatest.Get(t)
	h := hangingCase{b: b, c: cluster{seeds: b.Addrs()}, topic: b.CreateTopic(t, name, 2, nil),
		prefix: fmt.Sprintf("%s-%d", name, time.Now().UnixNano())}
	id := txn.TransactionalID(h.prefix, 0, 7)
	pid, epoch := b.HangCommit(t, id, h.topic, "a", "b", "c")
	h.hanging = txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}
	return h
}

// committer makes a committer of the sink for subtask 0 of an attempt
// restored from checkpoint 1, counting in reg.
func (h hangingCase) committer(t *testing.T, s *Sink[string], reg *prometheus.Registry) connector.Committer[txn.Committable] {
	t.Helper()
	cm, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// commitEach commits each of cs with cm, which must commit them.
func commitEach(ctx context.Context, t *testing.T, cm connector.Committer[txn.Committable], cs ...txn.Committable) {
	t.Helper()
	for _, c := range cs {
		r := &request{c: c}
		if err := cm.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
			t.Fatalf("commit of %v: %v, %s (%v)", c, err, r.outcome, r.err)
		}
	}
}

// restartAndWriteD does what a restart does: cm commits the restored
// hanging committable (again: its coordinator committed it) before the
// writer exists. A writer of s then writes "d" and cm commits its
// transaction of checkpoint 2; endOfInput ends the writer's input first.
func (h hangingCase) restartAndWriteD(ctx context.Context, t *testing.T, s *Sink[string], cm connector.Committer[txn.Committable], endOfInput bool) {
	t.Helper()
	commitEach(ctx, t, cm, h.hanging)
	w := writer(t, s)
	t.Cleanup(func() { w.Close() })
	write(t, w, "d")
	if err := w.Flush(endOfInput); err != nil {
		t.Fatal(err)
	}
	cs, err := w.PrepareCommit(2)
	if err != nil || len(cs) != 1 {
		t.Fatalf("prepare: %v, %v", cs, err)
	}
	commitEach(ctx, t, cm, cs...)
}

// requireEnded checks that no partition holds the hanging transaction open
// any more, that read_committed reads want, and that reg counted one
// hanging commit ended.
func (h hangingCase) requireEnded(ctx context.Context, t *testing.T, reg *prometheus.Registry, want ...string) {
	t.Helper()
	if open, pending, err := txn.FindHangingCommits(ctx, h.b.Client(t), []txn.Committable{h.hanging}, []string{h.topic}); err != nil || len(open)+len(pending) != 0 {
		t.Fatalf("the committer left %v open in a partition (pending %v, err %v)", open, pending, err)
	}
	got := h.c.committed(t, h.topic)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed reads %q, want %q", got, want)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_"+metricHanging, nil); n != 1 {
		t.Fatalf("%s counts %v, want 1", metricHanging, n)
	}
}

// completeCheckpoints tells cm of a checkpoint completed every 100 ms,
// with nothing to commit, from checkpoint from on, until the commits are
// old enough to check (markerGrace) and a little more.
func completeCheckpoints(ctx context.Context, t *testing.T, cm connector.Committer[txn.Committable], from int64) {
	t.Helper()
	l, ok := cm.(connector.CommitterCheckpointListener)
	if !ok {
		t.Fatalf("the committer %T does not hear of completed checkpoints: with nothing to commit it never checks its markers", cm)
	}
	for cp, deadline := from, time.Now().Add(markerGrace+time.Second); time.Now().Before(deadline); cp++ {
		if err := l.CheckpointCompleted(ctx, cp); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestACommitWhoseMarkerTheBrokerLostIsEndedByTheCommitter holds the rule
// of the committer's marker check: a transaction it committed that a
// partition still holds open although the coordinator ended it (the broker
// lost the partition's commit marker) is ended by the committer with that
// marker, at the latest at the end of input, so that its records become
// visible and the partition's read_committed readers go on. Without the
// check the job ends with the partition's last stable offset stuck below
// the transaction for ever.
func TestACommitWhoseMarkerTheBrokerLostIsEndedByTheCommitter(t *testing.T) {
	h := newHangingCase(t, "hanging")
	s := stringSink(t, h.c, h.topic, h.prefix)
	reg := prometheus.NewRegistry()
	cm := h.committer(t, s, reg)
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.restartAndWriteD(ctx, t, s, cm, true)
	h.requireEnded(ctx, t, reg, "a", "b", "c", "d")
}

// A hanging commit is ended while the sink has nothing more to commit: the
// committer checks the markers at the checkpoints that complete while the
// input is idle (connector.CommitterCheckpointListener), not only after a
// commit. Otherwise the last transactions before a quiet spell, those a
// restarting broker is most likely to have lost a marker of, keep their
// partitions' read_committed readers stopped until the next input comes.
func TestAHangingCommitIsEndedWhileTheSinkHasNothingToCommit(t *testing.T) {
	h := newHangingCase(t, "hanging-idle")
	s := stringSink(t, h.c, h.topic, h.prefix)
	reg := prometheus.NewRegistry()
	cm := h.committer(t, s, reg)
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The input stays idle after "d".
	h.restartAndWriteD(ctx, t, s, cm, false)
	completeCheckpoints(ctx, t, cm, 3)
	h.requireEnded(ctx, t, reg, "a", "b", "c", "d")
}

// A committer that closes checks the markers of every transaction it
// committed, however recent: the task's next attempt (after a failover,
// on the process that took the slot over) restores only the committables
// its checkpoint still holds, so a transaction committed since would be
// nobody's to check.
func TestAHangingCommitIsEndedWhenItsCommitterCloses(t *testing.T) {
	h := newHangingCase(t, "hanging-close")
	s := stringSink(t, h.c, h.topic, h.prefix)
	reg := prometheus.NewRegistry()
	cm := h.committer(t, s, reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commitEach(ctx, t, cm, h.hanging)
	if err := cm.Close(); err != nil {
		t.Fatal(err)
	}
	h.requireEnded(ctx, t, reg, "a", "b", "c")
}

// The transactions a closing committer cannot check (its broker away) are
// not dropped: the subtask's next committer in the process, the one of the
// attempt after a failover, takes them over and checks them.
func TestCommitsAClosedCommitterCouldNotCheckAreCheckedByTheSubtasksNextCommitter(t *testing.T) {
	h := newHangingCase(t, "hanging-handover")
	// The broker is away for the sink's clients while away is set: dials
	// fail, and connections made before fail their reads and writes.
	var away atomic.Bool
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		if away.Load() {
			return nil, errors.New("broker away")
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return awayConn{Conn: conn, away: &away}, nil
	}
	s := stringSink(t, h.c, h.topic, h.prefix, WithClientOpts(kgo.Dialer(dial)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := h.committer(t, s, prometheus.NewRegistry())
	commitEach(ctx, t, first, h.hanging)
	away.Store(true)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	away.Store(false)
	if open, _, err := txn.FindHangingCommits(ctx, h.b.Client(t), []txn.Committable{h.hanging}, []string{h.topic}); err != nil || len(open) != 1 {
		t.Fatalf("with the broker away at close, %v open (err %v); want the hanging commit still open", open, err)
	}

	reg := prometheus.NewRegistry()
	next := h.committer(t, s, reg)
	defer next.Close()
	completeCheckpoints(ctx, t, next, 2)
	h.requireEnded(ctx, t, reg, "a", "b", "c")
}

// awayConn fails its reads and writes while away is set.
type awayConn struct {
	net.Conn
	away *atomic.Bool
}

func (c awayConn) Read(p []byte) (int, error) {
	if c.away.Load() {
		return 0, errors.New("broker away")
	}
	return c.Conn.Read(p)
}

func (c awayConn) Write(p []byte) (int, error) {
	if c.away.Load() {
		return 0, errors.New("broker away")
	}
	return c.Conn.Write(p)
}
