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

// TestACommitWhoseMarkerTheBrokerLostIsEndedByTheCommitter holds the rule
// of the committer's marker check: a transaction it committed that a
// partition still holds open although the coordinator ended it (the broker
// lost the partition's commit marker) is ended by the committer with that
// marker, at the latest at the end of input, so that its records become
// visible and the partition's read_committed readers go on. Without the
// check the job ends with the partition's last stable offset stuck below
// the transaction for ever.
func TestACommitWhoseMarkerTheBrokerLostIsEndedByTheCommitter(t *testing.T) {
	b := kafkatest.Get(t)
	c := cluster{seeds: b.Addrs()}
	topic := b.CreateTopic(t, "hanging", 2, nil)
	prefix := fmt.Sprintf("hanging-%d", time.Now().UnixNano())
	// An id of the pool the writer does not use: its transactions must not
	// end the hanging one by the way.
	id := txn.TransactionalID(prefix, 0, 7)
	pid, epoch := b.HangCommit(t, id, topic, "a", "b", "c")
	hanging := txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}

	// As after a restart: the committer commits the restored committable
	// (again: its coordinator committed it) before the writer exists; the
	// writer then writes, and its input ends.
	s := stringSink(t, c, topic, prefix)
	reg := prometheus.NewRegistry()
	cm, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commitAll := func(cs ...txn.Committable) {
		t.Helper()
		for _, c := range cs {
			r := &request{c: c}
			if err := cm.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
				t.Fatalf("commit of %v: %v, %s (%v)", c, err, r.outcome, r.err)
			}
		}
	}
	commitAll(hanging)
	w := writer(t, s)
	defer w.Close()
	write(t, w, "d")
	if err := w.Flush(true); err != nil {
		t.Fatal(err)
	}
	cs, err := w.PrepareCommit(2)
	if err != nil || len(cs) != 1 {
		t.Fatalf("prepare: %v, %v", cs, err)
	}
	commitAll(cs...)

	if open, pending, err := txn.FindHangingCommits(ctx, b.Client(t), []txn.Committable{hanging}, []string{topic}); err != nil || len(open)+len(pending) != 0 {
		t.Fatalf("after the end of input the committer left %v open in a partition (pending %v, err %v)", open, pending, err)
	}
	got := c.committed(t, topic)
	slices.Sort(got)
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed reads %q, want %q", got, want)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_"+metricHanging, nil); n != 1 {
		t.Fatalf("%s counts %v, want 1", metricHanging, n)
	}
}

// A hanging commit is ended while the sink has nothing more to commit: the
// committer checks the markers at the checkpoints that complete while the
// input is idle (connector.CommitterCheckpointListener), not only after a
// commit. Otherwise the last transactions before a quiet spell, those a
// restarting broker is most likely to have lost a marker of, keep their
// partitions' read_committed readers stopped until the next input comes.
func TestAHangingCommitIsEndedWhileTheSinkHasNothingToCommit(t *testing.T) {
	b := kafkatest.Get(t)
	c := cluster{seeds: b.Addrs()}
	topic := b.CreateTopic(t, "hanging-idle", 2, nil)
	prefix := fmt.Sprintf("hanging-idle-%d", time.Now().UnixNano())
	id := txn.TransactionalID(prefix, 0, 7)
	pid, epoch := b.HangCommit(t, id, topic, "a", "b", "c")
	hanging := txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}

	s := stringSink(t, c, topic, prefix)
	reg := prometheus.NewRegistry()
	cm, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As after a restart: the committer commits the restored committable
	// before the writer exists; the writer then writes and commits once,
	// and the input stays idle.
	commit := func(cs ...txn.Committable) {
		t.Helper()
		for _, c := range cs {
			r := &request{c: c}
			if err := cm.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
				t.Fatalf("commit of %v: %v, %s (%v)", c, err, r.outcome, r.err)
			}
		}
	}
	commit(hanging)
	w := writer(t, s)
	defer w.Close()
	write(t, w, "d")
	commit(prepare(t, w, 2)...)

	l, ok := cm.(connector.CommitterCheckpointListener)
	if !ok {
		t.Fatalf("the committer %T does not hear of completed checkpoints: with nothing to commit it never checks its markers", cm)
	}
	// Checkpoints complete every 100 ms with nothing to commit, until the
	// commits are old enough to check (markerGrace) and a little more.
	deadline := time.Now().Add(markerGrace + 2*time.Second)
	for cp := int64(3); time.Now().Before(deadline); cp++ {
		if err := l.CheckpointCompleted(ctx, cp); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if open, pending, err := txn.FindHangingCommits(ctx, b.Client(t), []txn.Committable{hanging}, []string{topic}); err != nil || len(open)+len(pending) != 0 {
		t.Fatalf("the committer left %v open in a partition while idle (pending %v, err %v)", open, pending, err)
	}
	got := c.committed(t, topic)
	slices.Sort(got)
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed reads %q, want %q", got, want)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_"+metricHanging, nil); n != 1 {
		t.Fatalf("%s counts %v, want 1", metricHanging, n)
	}
}

// A committer that closes checks the markers of every transaction it
// committed, however recent: the task's next attempt (after a failover,
// on the process that took the slot over) restores only the committables
// its checkpoint still holds, so a transaction committed since would be
// nobody's to check.
func TestAHangingCommitIsEndedWhenItsCommitterCloses(t *testing.T) {
	b := kafkatest.Get(t)
	c := cluster{seeds: b.Addrs()}
	topic := b.CreateTopic(t, "hanging-close", 2, nil)
	prefix := fmt.Sprintf("hanging-close-%d", time.Now().UnixNano())
	id := txn.TransactionalID(prefix, 0, 7)
	pid, epoch := b.HangCommit(t, id, topic, "a", "b", "c")
	hanging := txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}

	s := stringSink(t, c, topic, prefix)
	reg := prometheus.NewRegistry()
	cm, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &request{c: hanging}
	if err := cm.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
		t.Fatalf("commit of %v: %v, %s (%v)", hanging, err, r.outcome, r.err)
	}
	if err := cm.Close(); err != nil {
		t.Fatal(err)
	}
	if open, pending, err := txn.FindHangingCommits(ctx, b.Client(t), []txn.Committable{hanging}, []string{topic}); err != nil || len(open)+len(pending) != 0 {
		t.Fatalf("the committer closed leaving %v open in a partition (pending %v, err %v)", open, pending, err)
	}
	got := c.committed(t, topic)
	slices.Sort(got)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed reads %q, want %q", got, want)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_"+metricHanging, nil); n != 1 {
		t.Fatalf("%s counts %v, want 1", metricHanging, n)
	}
}

// The transactions a closing committer cannot check (its broker away) are
// not dropped: the subtask's next committer in the process, the one of the
// attempt after a failover, takes them over and checks them.
func TestCommitsAClosedCommitterCouldNotCheckAreCheckedByTheSubtasksNextCommitter(t *testing.T) {
	b := kafkatest.Get(t)
	c := cluster{seeds: b.Addrs()}
	topic := b.CreateTopic(t, "hanging-handover", 2, nil)
	prefix := fmt.Sprintf("hanging-handover-%d", time.Now().UnixNano())
	id := txn.TransactionalID(prefix, 0, 7)
	pid, epoch := b.HangCommit(t, id, topic, "a", "b", "c")
	hanging := txn.Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch, CheckpointID: 1}

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
	s := stringSink(t, c, topic, prefix, WithClientOpts(kgo.Dialer(dial)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(prometheus.NewRegistry()).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := &request{c: hanging}
	if err := first.Commit(ctx, []connector.CommitRequest[txn.Committable]{r}); err != nil || r.outcome != "" {
		t.Fatalf("commit of %v: %v, %s (%v)", hanging, err, r.outcome, r.err)
	}
	away.Store(true)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	away.Store(false)
	if open, _, err := txn.FindHangingCommits(ctx, b.Client(t), []txn.Committable{hanging}, []string{topic}); err != nil || len(open) != 1 {
		t.Fatalf("with the broker away at close, %v open (err %v); want the hanging commit still open", open, err)
	}

	reg := prometheus.NewRegistry()
	next, err := s.CreateCommitter(groupCtx{g: metrics.NewRegistry(reg).Group("out", "out", 0), restored: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	// Checkpoints complete every 100 ms, until the commit is old enough
	// to check (markerGrace) and a little more.
	for cp, deadline := int64(2), time.Now().Add(markerGrace+time.Second); time.Now().Before(deadline); cp++ {
		if err := next.(connector.CommitterCheckpointListener).CheckpointCompleted(ctx, cp); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if open, pending, err := txn.FindHangingCommits(ctx, b.Client(t), []txn.Committable{hanging}, []string{topic}); err != nil || len(open)+len(pending) != 0 {
		t.Fatalf("the next committer left %v open in a partition (pending %v, err %v)", open, pending, err)
	}
	got := c.committed(t, topic)
	slices.Sort(got)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed reads %q, want %q", got, want)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_"+metricHanging, nil); n != 1 {
		t.Fatalf("%s counts %v, want 1", metricHanging, n)
	}
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
