package integration

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// idRange is the ids [from, from+n).
func idRange(from, n int64) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = from + int64(i)
	}
	return ids
}

// writeIDs writes each id as the decimal value of one record, into the
// partition part gives it, without a transaction.
func writeIDs(t testing.TB, b *kafkatest.Broker, topic string, ids []int64, part func(id int64) int32) {
	t.Helper()
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range ids {
		cl.Produce(ctx, &kgo.Record{Partition: part(id), Value: strconv.AppendInt(nil, id, 10)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("write ids into %s: %v", topic, err)
	}
}

// modulo spreads ids over n partitions.
func modulo(n int32) func(int64) int32 {
	return func(id int64) int32 { return int32(id % int64(n)) }
}

// tally is what a read_committed consumer found in an output topic,
// counted against the ids fed in.
type tally struct {
	total, distinct, duplicated, lost, unexpected int
}

func (r tally) exact() bool { return r.duplicated == 0 && r.lost == 0 && r.unexpected == 0 }

// countIDs drains topic with read_committed and counts its ids against
// want.
func countIDs(t testing.TB, b *kafkatest.Broker, topic string, want []int64) tally {
	t.Helper()
	recs := kafkatest.ReadCommitted(t, b.Addrs(), topic, 60*time.Second)
	return countRecords(t, recs, want)
}

func countRecords(t testing.TB, recs []*kgo.Record, want []int64) tally {
	t.Helper()
	seen := map[int64]int{}
	wanted := map[int64]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	var r tally
	for _, rec := range recs {
		id, err := strconv.ParseInt(string(rec.Value), 10, 64)
		if err != nil || !wanted[id] {
			r.unexpected++
			t.Errorf("unexpected output record %q", rec.Value)
			continue
		}
		seen[id]++
	}
	r.total = len(recs)
	r.distinct = len(seen)
	for _, c := range seen {
		r.duplicated += c - 1
	}
	r.lost = len(wanted) - len(seen)
	return r
}

// report logs the scenario's one-line summary and fails the test unless
// the output is exact.
func report(t testing.TB, scenario string, runs, in int, r tally, recovery time.Duration) {
	t.Helper()
	t.Logf("SUMMARY scenario=%q runs=%d in=%d out=%d distinct=%d lost=%d duplicated=%d recovery=%s",
		scenario, runs, in, r.total, r.distinct, r.lost, r.duplicated, recovery.Round(time.Millisecond))
	if !r.exact() {
		t.Errorf("%s: output is not exactly-once: %d records in, %d out, %d distinct, %d lost, %d duplicated, %d unexpected",
			scenario, in, r.total, r.distinct, r.lost, r.duplicated, r.unexpected)
	}
}

// recoveryClock measures the time from a disruption to the first
// checkpoint completed after it. Its methods are safe for concurrent use.
type recoveryClock struct {
	mu       sync.Mutex
	began    time.Time
	longest  time.Duration
	pending  bool
	recovers int
}

func newRecoveryClock() *recoveryClock { return &recoveryClock{} }

// disrupted starts the clock, unless it is already running.
func (c *recoveryClock) disrupted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pending {
		c.began, c.pending = time.Now(), true
	}
}

// checkpointed stops a running clock and keeps the longest time measured.
func (c *recoveryClock) checkpointed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending {
		c.longest = max(c.longest, time.Since(c.began))
		c.pending = false
		c.recovers++
	}
}

// result returns the longest recovery and how many recoveries completed.
func (c *recoveryClock) result() (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.longest, c.recovers
}

// offsets returns the last stable offset and the high watermark of every
// partition of topic.
func offsets(t *testing.T, adm *kadm.Client, topic string) (lso, hwm map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err1 := adm.ListCommittedOffsets(ctx, topic)
	h, err2 := adm.ListEndOffsets(ctx, topic)
	if err1 != nil || err2 != nil || l.Error() != nil || h.Error() != nil {
		t.Fatalf("list offsets of %s: %v %v %v %v", topic, err1, err2, l.Error(), h.Error())
	}
	lso, hwm = map[int32]int64{}, map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
	h.Each(func(o kadm.ListedOffset) { hwm[o.Partition] = o.Offset })
	return lso, hwm
}

// pinned reports whether some partition's last stable offset is below
// mark.
func pinned(lso, mark map[int32]int64) bool {
	for p, m := range mark {
		if lso[p] < m {
			return true
		}
	}
	return false
}

// testLogger returns a logger that writes warnings and errors into the
// test's log, until the test ends.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// openTxnStates are the coordinator's states of a transaction that is
// neither committed nor aborted.
var openTxnStates = []string{"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}

// requireNoOpenTransaction fails the test unless every transaction of the
// sink's prefix has ended once its job ended cleanly: no transactional id
// of the prefix is open at its coordinator, and no partition of topic has
// a transaction open (a producer with a current transaction start
// offset), which pins every read_committed reader of the partition until
// the transaction ends, if ever. A commit's markers are written after
// EndTxn returns, so the check waits a while for them; a transaction
// still open after it is one the job left open. It names both sides, so
// a partition that a coordinator no longer knows to be in a transaction
// (a hanging transaction) is told apart from a transaction left open.
func requireNoOpenTransaction(t testing.TB, b *kafkatest.Broker, prefix, topic string) {
	t.Helper()
	adm := b.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		listed, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			t.Fatalf("list transactions: %v", err)
		}
		owners := map[int64]string{} // producer id -> transactional id
		var ids []string
		for _, l := range listed.Sorted() {
			if strings.HasPrefix(l.TxnID, txn.IDPrefix(prefix)) {
				owners[l.ProducerID] = l.TxnID
				if slices.Contains(openTxnStates, l.State) {
					ids = append(ids, l.TxnID)
				}
			}
		}
		var open, hanging []string
		if len(ids) > 0 {
			described, err := adm.DescribeTransactions(ctx, ids...)
			if err != nil {
				t.Fatalf("describe transactions %v: %v", ids, err)
			}
			for _, d := range described.Sorted() {
				if slices.Contains(openTxnStates, d.State) {
					open = append(open, fmt.Sprintf("%s %s (producer %d, epoch %d, partitions %v)",
						d.TxnID, d.State, d.ProducerID, d.ProducerEpoch, d.Topics.Sorted()))
				}
			}
		}
		producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
		if err != nil {
			t.Fatalf("describe producers of %s: %v", topic, err)
		}
		for _, p := range producers.SortedProducers() {
			if p.CurrentTxnStartOffset >= 0 {
				hanging = append(hanging, fmt.Sprintf("%s[%d] open from offset %d by producer %d (%s), epoch %d, last sequence %d",
					p.Topic, p.Partition, p.CurrentTxnStartOffset, p.ProducerID, owners[p.ProducerID], p.ProducerEpoch, p.LastSequence))
			}
		}
		if len(open) == 0 && len(hanging) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the job ended cleanly but left transactions open: at the coordinator: [%s]; in the partitions: [%s]",
				strings.Join(open, "; "), strings.Join(hanging, "; "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
