package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests prove, on the real broker, the primitive the exactly-once sink
// stands on (DESIGN.md, "Resuming a prepared transaction"): a transaction
// left open by a producer that is gone can be ended by a fresh client that
// knows only its transactional id, producer id and epoch, with a raw
// EndTxn request. Kafka 4.x runs transaction protocol v2 (KIP-890), which
// bumps the epoch when a transaction ends, so this is checked, not assumed.

// openTxn writes n records in a transaction, flushes them, and abandons the
// producer without ending the transaction. Before that the same producer
// commits `earlier` transactions of one record "earlier" each, as a sink's
// pooled producer does across checkpoints. It returns the producer id and
// epoch that a committable would record.
func openTxn(t *testing.T, b *kafkatest.Broker, txid, topic string, earlier, n int) (int64, int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID(txid),
		kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Close does not end an open transaction: it only drops the connections,
	// as a crashed process would.
	defer p.Close()
	for i := 0; i < earlier; i++ {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("earlier")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", txid, i))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	pid, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatalf("producer id: %v", err)
	}
	return pid, epoch
}

// endTxn sends EndTxn from cl, retrying while the coordinator is still
// writing the markers of an earlier EndTxn (CONCURRENT_TRANSACTIONS) or
// moving; any other answer is returned as it is.
func endTxn(ctx context.Context, cl *kgo.Client, txid string, pid int64, epoch int16, commit bool) error {
	for {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = txid
		req.ProducerID = pid
		req.ProducerEpoch = epoch
		req.Commit = commit
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		retriable := errors.Is(err, kerr.ConcurrentTransactions) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
			errors.Is(err, kerr.NotCoordinator)
		if !retriable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readCommitted returns the values a read_committed consumer sees once no
// transaction is open on the topic.
func readCommitted(t *testing.T, b *kafkatest.Broker, topic string) []string {
	t.Helper()
	var vs []string
	for _, r := range kafkatest.ReadCommitted(t, b.Addrs(), topic, 30*time.Second) {
		vs = append(vs, string(r.Value))
	}
	return vs
}

// lastStable is the partition-0 offset a read_committed consumer can read up
// to; an open transaction pins it.
func lastStable(t *testing.T, b *kafkatest.Broker, topic string) int64 {
	t.Helper()
	lso, err := b.Admin(t).ListCommittedOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := lso.Lookup(topic, 0)
	return o.Offset
}

// withoutEarlier drops the records of the earlier, normally committed
// transactions of openTxn.
func withoutEarlier(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "earlier" {
			out = append(out, v)
		}
	}
	return out
}

func TestResumeCommitFromFreshClient(t *testing.T) {
	for _, earlier := range []int{0, 2} {
		t.Run(fmt.Sprintf("after %d earlier transactions", earlier), func(t *testing.T) {
			testResumeCommit(t, earlier)
		})
	}
}

func testResumeCommit(t *testing.T, earlier int) {
	b := kafkatest.Get(t)
	topic := b.CreateTopic(t, "resume-commit", 1, nil)
	txid := fmt.Sprintf("resume-commit-%d", time.Now().UnixNano())
	const n = 25
	pid, epoch := openTxn(t, b, txid, topic, earlier, n)
	t.Logf("abandoned transaction %s: producer id %d, epoch %d", txid, pid, epoch)

	// The open transaction pins read_committed consumers at its first offset
	// (each earlier transaction took one record and one marker).
	if lso := lastStable(t, b, topic); lso != int64(2*earlier) {
		t.Fatalf("last stable offset %d while the transaction is open, want %d", lso, 2*earlier)
	}

	fresh := b.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := endTxn(ctx, fresh, txid, pid, epoch, true); err != nil {
		t.Fatalf("commit from a fresh client: %v", err)
	}
	got := withoutEarlier(readCommitted(t, b, topic))
	if len(got) != n {
		t.Fatalf("read_committed sees %d records after the resumed commit, want %d", len(got), n)
	}
	for i, v := range got {
		if want := fmt.Sprintf("%s-%d", txid, i); v != want {
			t.Fatalf("record %d is %q, want %q", i, v, want)
		}
	}

	// Committing again, as a restarted committer does with a committable
	// whose outcome it never learned, succeeds and changes nothing.
	if err := endTxn(ctx, fresh, txid, pid, epoch, true); err != nil {
		t.Fatalf("repeated commit: %v", err)
	}
	if got := withoutEarlier(readCommitted(t, b, topic)); len(got) != n {
		t.Fatalf("read_committed sees %d records after the repeated commit, want %d", len(got), n)
	}

	// The opposite outcome is refused: a committed transaction can't be
	// aborted after the fact.
	if err := endTxn(ctx, fresh, txid, pid, epoch, false); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("abort after commit: got %v, want INVALID_TXN_STATE", err)
	}
}

func TestResumeAbortFromFreshClient(t *testing.T) {
	b := kafkatest.Get(t)
	topic := b.CreateTopic(t, "resume-abort", 1, nil)
	txid := fmt.Sprintf("resume-abort-%d", time.Now().UnixNano())
	pid, epoch := openTxn(t, b, txid, topic, 0, 10)

	fresh := b.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := endTxn(ctx, fresh, txid, pid, epoch, false); err != nil {
		t.Fatalf("abort from a fresh client: %v", err)
	}
	// Once the abort marker is written, the last stable offset is past the
	// aborted data: consumers are no longer pinned, and they see nothing of
	// it.
	if got := readCommitted(t, b, topic); len(got) != 0 {
		t.Fatalf("read_committed sees %d aborted records: %q", len(got), got)
	}
	if lso := lastStable(t, b, topic); lso != 11 {
		t.Fatalf("last stable offset %d after the abort, want 11 (10 records and the marker)", lso)
	}
	if err := endTxn(ctx, fresh, txid, pid, epoch, false); err != nil {
		t.Fatalf("repeated abort: %v", err)
	}
}

// Once the transactional id has run a later transaction, the old identity is
// fenced: a committable must be committed before its id is reused, or its
// outcome can no longer be confirmed.
func TestResumeStaleEpochIsFenced(t *testing.T) {
	b := kafkatest.Get(t)
	topic := b.CreateTopic(t, "resume-fenced", 1, nil)
	txid := fmt.Sprintf("resume-fenced-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := b.Client(t, kgo.TransactionalID(txid), kgo.DefaultProduceTopic(topic))
	var pid int64
	var epoch int16
	for i := 0; i < 2; i++ {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			var err error
			if pid, epoch, err = p.ProducerID(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	err := endTxn(ctx, b.Client(t), txid, pid, epoch, true)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("commit with the epoch of an earlier transaction: got %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	t.Logf("stale epoch %d after a later transaction: %v", epoch, err)
}

// A new producer that registers the same transactional id (InitProducerID)
// aborts the open transaction. The sink must therefore commit restored
// committables before it creates producers for the new attempt.
func TestResumeAfterNewProducerInitIsTooLate(t *testing.T) {
	b := kafkatest.Get(t)
	topic := b.CreateTopic(t, "resume-init", 1, nil)
	txid := fmt.Sprintf("resume-init-%d", time.Now().UnixNano())
	pid, epoch := openTxn(t, b, txid, topic, 0, 5)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := b.Client(t, kgo.TransactionalID(txid), kgo.DefaultProduceTopic(topic))
	if _, _, err := p.ProducerID(ctx); err != nil { // InitProducerID
		t.Fatal(err)
	}
	err := endTxn(ctx, b.Client(t), txid, pid, epoch, true)
	if err == nil {
		t.Fatalf("commit succeeded after a new producer took the transactional id")
	}
	if got := readCommitted(t, b, topic); len(got) != 0 {
		t.Fatalf("read_committed sees %d records of the transaction the new producer aborted", len(got))
	}
	t.Logf("commit after a new InitProducerID: %v", err)
}
