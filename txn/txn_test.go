package txn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestTransactionalIDNaming(t *testing.T) {
	for _, tc := range []struct {
		prefix  string
		id      string
		subtask int
		n       int
		ok      bool
		legacy  bool // parsed, but the layout before the colon
	}{
		{"sink", "sink:0-0", 0, 0, true, false},
		{"sink", "sink:12-7", 12, 7, true, false},
		{"my-sink", "my-sink:3-1", 3, 1, true, false},
		{"sink", "sink-0-0", 0, 0, true, true},
		{"my-sink", "my-sink-3-1", 3, 1, true, true},
		{"sink", "sink:1", 0, 0, false, false},
		{"sink", "sinks:1-1", 0, 0, false, false},
		{"sink", "sink:a-1", 0, 0, false, false},
		{"sink", "sink:1-01", 0, 0, false, false},
		{"sink", "sink:-1-1", 0, 0, false, false},
		{"sink", "sink-1", 0, 0, false, false},
		{"sink", "sink-a-1", 0, 0, false, false},
		{"sink", "other:1-1", 0, 0, false, false},
		{"sink", "sink-x:1-1", 0, 0, false, false},
	} {
		st, n, ok := ParseTransactionalID(tc.prefix, tc.id)
		if ok != tc.ok || (ok && (st != tc.subtask || n != tc.n)) {
			t.Errorf("ParseTransactionalID(%q, %q) = %d, %d, %v; want %d, %d, %v", tc.prefix, tc.id, st, n, ok, tc.subtask, tc.n, tc.ok)
		}
		if tc.ok && !tc.legacy && TransactionalID(tc.prefix, tc.subtask, tc.n) != tc.id {
			t.Errorf("TransactionalID(%q, %d, %d) = %q, want %q", tc.prefix, tc.subtask, tc.n, TransactionalID(tc.prefix, tc.subtask, tc.n), tc.id)
		}
		if tc.ok && IsLegacyID(tc.prefix, tc.id) != tc.legacy {
			t.Errorf("IsLegacyID(%q, %q) = %v", tc.prefix, tc.id, !tc.legacy)
		}
	}
}

// Every id of a prefix begins with IDPrefix(prefix), and no id of another
// prefix does, so an ACL on the ids prefixed IDPrefix(prefix) grants one
// job's ids alone. With the dash as the prefix's end, "a-" also matched
// job "a-b"'s "a-b-0-0". A prefix holding the terminator is refused. A
// legacy id (a checkpoint's from before the colon) is still its own
// prefix's, and never another's.
func TestOneJobsIDPrefixCoversNoOtherJobsIDs(t *testing.T) {
	prefixes := []string{"a", "a-b", "a-1", "a-e2", "orders", "orders-eu", "job.counts", "job.counts-1"}
	for _, p := range prefixes {
		for _, q := range prefixes {
			for _, id := range []string{TransactionalID(q, 0, 0), TransactionalID(q, 12, 3), ClaimTransactionalID(q, 1, 2, 0), ClaimTransactionalID(q, 0, 40, 7)} {
				if mine := strings.HasPrefix(id, IDPrefix(p)); mine != (p == q) {
					t.Errorf("id %q of prefix %q begins with %q (the ids of prefix %q): %v", id, q, IDPrefix(p), p, mine)
				}
				if _, _, _, ok := ParseClaimTransactionalID(p, id); ok != (p == q) {
					t.Errorf("ParseClaimTransactionalID(%q, %q) = %v", p, id, ok)
				}
				legacy := strings.Replace(id, IDPrefix(q), q+"-", 1)
				if _, _, _, ok := ParseClaimTransactionalID(p, legacy); ok != (p == q) {
					t.Errorf("legacy id %q of prefix %q: ParseClaimTransactionalID(%q) = %v", legacy, q, p, ok)
				}
			}
		}
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q): %v", p, err)
		}
	}
	for _, bad := range []string{"", "a:b", "a:"} {
		if err := ValidatePrefix(bad); err == nil {
			t.Errorf("ValidatePrefix(%q) accepted it", bad)
		}
		if _, err := NewPool(bad, 0); err == nil {
			t.Errorf("NewPool(%q) accepted it", bad)
		}
	}
}

func TestClaimTransactionalIDNaming(t *testing.T) {
	for _, tc := range []struct {
		id      string
		subtask int
		epoch   int64
		n       int
		ok      bool
	}{
		{"sink:0-0", 0, 0, 0, true},
		{"sink:3-e1-0", 3, 1, 0, true},
		{"sink:12-e40-7", 12, 40, 7, true},
		{"sink:3-e0-0", 0, 0, 0, false},
		{"sink:3-e01-0", 0, 0, 0, false},
		{"sink:3-e-1-0", 0, 0, 0, false},
		{"sink:3-x2-0", 0, 0, 0, false},
		{"sink:3-e2", 0, 0, 0, false},
		{"sink:3-e2-0-1", 0, 0, 0, false},
	} {
		for _, id := range []string{tc.id, strings.Replace(tc.id, ":", "-", 1)} {
			st, e, n, ok := ParseClaimTransactionalID("sink", id)
			if ok != tc.ok || (ok && (st != tc.subtask || e != tc.epoch || n != tc.n)) {
				t.Errorf("ParseClaimTransactionalID(sink, %q) = %d, %d, %d, %v; want %d, %d, %d, %v", id, st, e, n, ok, tc.subtask, tc.epoch, tc.n, tc.ok)
			}
			// A claim's id is never mistaken for an id of no claim.
			if _, _, plain := ParseTransactionalID("sink", id); plain != (tc.ok && tc.epoch == 0) {
				t.Errorf("ParseTransactionalID(sink, %q) reports %v", id, plain)
			}
		}
		if tc.ok && ClaimTransactionalID("sink", tc.subtask, tc.epoch, tc.n) != tc.id {
			t.Errorf("ClaimTransactionalID(sink, %d, %d, %d) = %q, want %q", tc.subtask, tc.epoch, tc.n, ClaimTransactionalID("sink", tc.subtask, tc.epoch, tc.n), tc.id)
		}
	}
}

// A writer under a claim cleans up after its own and older claims of its
// slot, never after a newer claim's.
func TestLingeringOwnsOwnAndOlderClaimsOnly(t *testing.T) {
	l := Lingering{Prefix: "sink", Subtask: 1, Parallelism: 4, Epoch: 3}
	for id, want := range map[string]bool{
		"sink:1-e3-0":  true,
		"sink:1-e2-5":  true,
		"sink:1-0":     true,
		"sink:1-e4-0":  false,
		"sink:2-e3-0":  false,
		"sink:1-e30-0": false,
		// legacy ids, of a checkpoint from before the colon
		"sink-1-e2-5": true,
		"sink-1-0":    true,
		"sink-1-e4-0": false,
	} {
		if got := l.Owns(id); got != want {
			t.Errorf("Owns(%q) under claim 3 = %v, want %v", id, got, want)
		}
	}
	if _, err := NewPool("p", 0, WithClaimEpoch(-1)); err == nil {
		t.Error("negative claim epoch accepted")
	}
	p, err := NewPool("p", 2, WithClaimEpoch(7))
	if err != nil {
		t.Fatal(err)
	}
	if id := p.slots[0].id; id != "p:2-e7-0" {
		t.Errorf("pool id %q, want p:2-e7-0", id)
	}
}

// A slot of a distributed job started from a savepoint of a job run in
// one process at a higher parallelism commits the committables of old
// subtask j when j mod slots is its own, so the transactions of old
// subtask j are that slot's to clean up, not slot 0's: slots start and
// checkpoint on their own, and slot 0 aborting (or, after its first
// checkpoint, registering anew) an id of old subtask 3 before slot 1
// committed it would lose that transaction. One process keeps subtask 0
// the owner of every id at or beyond the parallelism: its subtasks
// commit what they restored before any checkpoint completes.
func TestSlotOwnsTheOldSubtasksWhoseCommittablesItCommits(t *testing.T) {
	for _, c := range []struct {
		l    Lingering
		id   string
		want bool
	}{
		{Lingering{Prefix: "sink", Subtask: 1, Parallelism: 2, Epoch: 3}, "sink-3-0", true},
		{Lingering{Prefix: "sink", Subtask: 0, Parallelism: 2, Epoch: 3}, "sink-3-0", false},
		{Lingering{Prefix: "sink", Subtask: 0, Parallelism: 2, Epoch: 3}, "sink-2-4", true},
		{Lingering{Prefix: "sink", Subtask: 1, Parallelism: 2, Epoch: 3}, "sink-1-e2-0", true},
		{Lingering{Prefix: "sink", Subtask: 0, Parallelism: 2, Epoch: 0}, "sink-3-0", true},
		{Lingering{Prefix: "sink", Subtask: 1, Parallelism: 2, Epoch: 0}, "sink-3-0", false},
	} {
		if got := c.l.Owns(c.id); got != c.want {
			t.Errorf("subtask %d of %d under claim %d: Owns(%q) = %v, want %v", c.l.Subtask, c.l.Parallelism, c.l.Epoch, c.id, got, c.want)
		}
	}
}

func TestPoolConfigValidation(t *testing.T) {
	if _, err := NewPool("", 0); err == nil {
		t.Error("empty prefix accepted")
	}
	if _, err := NewPool("p", -1); err == nil {
		t.Error("negative subtask accepted")
	}
	if _, err := NewPool("p", 0, WithPoolSize(1)); err == nil {
		t.Error("pool of one id accepted")
	}
}

// A crash after prepare, before commit: the committable restored from the
// checkpoint is committed by a fresh pool (no client of the old one), and
// committing it again changes nothing (the commit rule).
func TestResumeCommitAfterCrash(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("resume")
		old := be.pool(t, prefix, 0)
		c := writeTxn(t, old, topic, 7, "a", "b", "c")
		// The process dies here: its clients just vanish.

		fresh := be.pool(t, prefix, 0)
		ctx := ctxT(t)
		if err := fresh.Commit(ctx, c); err != nil {
			t.Fatalf("commit restored %s: %v", c, err)
		}
		if err := fresh.Commit(ctx, c); err != nil {
			t.Fatalf("commit it again: %v", err)
		}
		if got := be.committed(t, topic); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("read_committed sees %q, want [a b c]", got)
		}
	})
}

// A crash before prepare: the open transaction is aborted when the next
// attempt starts, and none of it is visible.
func TestLingerCrashBeforePrepareIsAborted(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("linger")
		abandonTxn(t, be, TransactionalID(prefix, 0, 0), topic, "x", "y")
		aborted, err := AbortLingering(ctxT(t), be.client(t), Lingering{Prefix: prefix, Subtask: 0, Parallelism: 1, ProbeIDs: 8})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(aborted, []string{TransactionalID(prefix, 0, 0)}) {
			t.Fatalf("aborted %q", aborted)
		}
		if got := be.committed(t, topic); len(got) != 0 {
			t.Fatalf("read_committed sees %q of an aborted transaction", got)
		}
	})
}

// Each open transaction under the prefix has exactly one owner; restored
// committables are never aborted; a read_committed consumer is unpinned.
func TestLingerOwnershipAndKeep(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("owners")
		// Left by a run with parallelism 3: subtasks 0, 1 and 2.
		abandonTxn(t, be, TransactionalID(prefix, 0, 1), topic, "s0")
		keep := abandonTxn(t, be, TransactionalID(prefix, 1, 0), topic, "kept")
		abandonTxn(t, be, TransactionalID(prefix, 1, 4), topic, "s1")
		abandonTxn(t, be, TransactionalID(prefix, 2, 0), topic, "s2")
		abandonTxn(t, be, "other-prefix-0-0-"+prefix, topic, "not ours")

		// The new run has parallelism 2, so subtask 0 also owns subtask 2's
		// ids. Restored committables are committed first, as the sink does.
		ctx := ctxT(t)
		cl := be.client(t)
		if err := Commit(ctx, cl, keep); err != nil {
			t.Fatal(err)
		}
		got1, err := AbortLingering(ctx, cl, Lingering{Prefix: prefix, Subtask: 1, Parallelism: 2, Keep: []Committable{keep}})
		if err != nil {
			t.Fatal(err)
		}
		got0, err := AbortLingering(ctx, cl, Lingering{Prefix: prefix, Subtask: 0, Parallelism: 2})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{TransactionalID(prefix, 1, 4)}; !slices.Equal(got1, want) {
			t.Errorf("subtask 1 aborted %q, want %q", got1, want)
		}
		if want := []string{TransactionalID(prefix, 0, 1), TransactionalID(prefix, 2, 0)}; !slices.Equal(got0, want) {
			t.Errorf("subtask 0 aborted %q, want %q", got0, want)
		}
		// The foreign transaction still pins the partition; end it so the
		// topic can be drained.
		other := abandonTxn(t, be, "other-prefix-0-0-"+prefix, topic)
		if err := Abort(ctx, cl, other); err != nil {
			t.Fatal(err)
		}
		if got := be.committed(t, topic); !slices.Equal(got, []string{"kept"}) {
			t.Fatalf("read_committed sees %q, want only the kept committable", got)
		}
	})
}

// Where the broker cannot list transactions, the pooled ids are probed.
func TestLingerProbingFallback(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("probe")
		abandonTxn(t, be, TransactionalID(prefix, 0, 2), topic, "p")
		abandonTxn(t, be, TransactionalID(prefix, 3, 0), topic, "q") // an earlier, larger parallelism
		aborted, err := AbortLingering(ctxT(t), be.client(t), Lingering{
			Prefix: prefix, Subtask: 0, Parallelism: 2, ProbeIDs: 4, ProbeSubtasks: 4, ForceProbe: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{TransactionalID(prefix, 0, 2), TransactionalID(prefix, 3, 0)}; !slices.Equal(aborted, want) {
			t.Fatalf("aborted %q, want %q", aborted, want)
		}
		if got := be.committed(t, topic); len(got) != 0 {
			t.Fatalf("read_committed sees %q", got)
		}
	})
}

// A writer of an older attempt can never commit once the new attempt has
// started: starting registers the ids again, which aborts the old open
// transaction and fences the old producer.
func TestFenceOldAttemptCannotCommit(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("fence")
		old := be.pool(t, prefix, 0)
		c := writeTxn(t, old, topic, 3, "zombie")

		ctx := ctxT(t)
		if _, err := AbortLingering(ctx, be.client(t), Lingering{Prefix: prefix, Subtask: 0, Parallelism: 1}); err != nil {
			t.Fatal(err)
		}
		newer := be.pool(t, prefix, 0)
		cNew := writeTxn(t, newer, topic, 3, "new") // registers prefix-0-0 again

		err := old.Commit(ctx, c)
		var dl *DataLossError
		if !errors.As(err, &dl) {
			t.Fatalf("old attempt's commit: got %v, want a *DataLossError", err)
		}
		if dl.TransactionalID != c.TransactionalID || dl.ProducerID != c.ProducerID || dl.Epoch != c.Epoch || dl.CheckpointID != 3 {
			t.Fatalf("DataLossError names %s, want %s", dl.Committable, c)
		}
		if err := newer.Commit(ctx, cNew); err != nil {
			t.Fatal(err)
		}
		if got := be.committed(t, topic); !slices.Equal(got, []string{"new"}) {
			t.Fatalf("read_committed sees %q, want only the new attempt's record", got)
		}
	})
}

// A committable whose transaction the broker already aborted surfaces as a
// DataLossError, never as success (the commit rule).
func TestResumeAbortedTransactionIsDataLoss(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("lost")
		c := writeTxn(t, be.pool(t, prefix, 0), topic, 11, "gone")
		ctx := ctxT(t)
		cl := be.client(t)
		// What the broker does when transaction.timeout.ms passes.
		if err := Abort(ctx, cl, c); err != nil {
			t.Fatal(err)
		}
		err := Commit(ctx, cl, c)
		var dl *DataLossError
		if !errors.As(err, &dl) || dl.Committable != c {
			t.Fatalf("commit of an aborted transaction: got %v, want a *DataLossError for %s", err, c)
		}
		if !errors.Is(err, kerr.InvalidTxnState) && !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
			t.Fatalf("the broker's answer is not reachable with errors.Is: %v", err)
		}
	})
}

// Transient answers (the coordinator still writing markers, loading, moved)
// are retried until the commit succeeds.
func TestResumeRetriesTransientErrors(t *testing.T) {
	be := newKfake(t)
	topic := be.topic(t, 1)
	c := writeTxn(t, be.pool(t, uniquePrefix("retry"), 0), topic, 1, "r")
	answers := []*kerr.Error{kerr.ConcurrentTransactions, kerr.CoordinatorLoadInProgress, kerr.NotCoordinator}
	calls := 0
	be.fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		be.fake.KeepControl()
		if calls >= len(answers) {
			calls++
			return nil, nil, false // the real handler answers
		}
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = answers[calls].Code
		calls++
		return resp, nil, true
	})
	if err := Commit(ctxT(t), be.client(t), c); err != nil {
		t.Fatalf("commit through transient errors: %v", err)
	}
	if calls != len(answers)+1 {
		t.Fatalf("EndTxn sent %d times, want %d", calls, len(answers)+1)
	}
	if got := be.committed(t, topic); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("read_committed sees %q", got)
	}
}

// An id is reused only once a checkpoint whose snapshot was taken after its
// commit completes (package doc, rule 1); until then Begin takes the next.
func TestPoolReusesIDOnlyAfterRelease(t *testing.T) {
	be := newKfake(t)
	topic := be.topic(t, 1)
	prefix := uniquePrefix("reuse")
	p := be.pool(t, prefix, 0, WithPoolSize(3))
	ctx := ctxT(t)

	c1 := writeTxn(t, p, topic, 1, "1")
	if c1.TransactionalID != TransactionalID(prefix, 0, 0) {
		t.Fatalf("first transaction on %s", c1.TransactionalID)
	}
	c2 := writeTxn(t, p, topic, 2, "2") // checkpoint 1 not complete yet
	if c2.TransactionalID != TransactionalID(prefix, 0, 1) {
		t.Fatalf("second transaction on %s, want id 1 while id 0 awaits commit", c2.TransactionalID)
	}
	if err := p.Commit(ctx, c1); err != nil { // checkpoint 1 completed
		t.Fatal(err)
	}
	p.CheckpointComplete(1)
	tx, err := p.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if tx.TransactionalID() != TransactionalID(prefix, 0, 2) {
		t.Fatalf("third transaction on %s: id 0 was reused before a snapshot after its commit", tx.TransactionalID())
	}
	if _, err := p.Begin(); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("fourth Begin with every id in use: got %v, want ErrPoolExhausted", err)
	}
	p.SnapshotTaken(2)      // the snapshot of checkpoint 2 no longer holds c1
	p.CheckpointComplete(1) // an older completion frees nothing
	if p.InUse() != 3 {
		t.Fatalf("%d ids in use after an older completion, want 3", p.InUse())
	}
	p.CheckpointComplete(2)
	if p.InUse() != 2 {
		t.Fatalf("%d ids in use after checkpoint 2 completed, want 2", p.InUse())
	}
	tx4, err := p.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if tx4.TransactionalID() != TransactionalID(prefix, 0, 0) {
		t.Fatalf("id 0 not reused once released: got %s", tx4.TransactionalID())
	}
	// The reused id keeps its client: same producer id, a later epoch.
	tx4.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("4")})
	c4, _, err := tx4.Prepare(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if c4.ProducerID != c1.ProducerID || c4.Epoch <= c1.Epoch {
		t.Fatalf("reused id: producer %d epoch %d after producer %d epoch %d", c4.ProducerID, c4.Epoch, c1.ProducerID, c1.Epoch)
	}
	for _, c := range []Committable{c2, c4} {
		if err := p.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got := be.committed(t, topic); !slices.Equal(got, []string{"1", "2", "4"}) {
		t.Fatalf("read_committed sees %q, want [1 2 4]", got)
	}
}

// An empty transaction produces no committable and frees its id at once.
func TestPoolEmptyTransactionHasNoCommittable(t *testing.T) {
	be := newKfake(t)
	p := be.pool(t, uniquePrefix("empty"), 0)
	tx, err := p.Begin()
	if err != nil {
		t.Fatal(err)
	}
	c, ok, err := tx.Prepare(ctxT(t), 1)
	if err != nil || ok {
		t.Fatalf("prepare of an empty transaction: %v, ok=%v, err=%v", c, ok, err)
	}
	if p.InUse() != 0 {
		t.Fatalf("%d ids in use after an empty transaction", p.InUse())
	}
}

// A pooled commit whose outcome the owning client could not confirm is
// settled with raw EndTxn requests, then and on every later retry.
func TestResumePoolCommitAfterUnconfirmedOutcome(t *testing.T) {
	be := newKfake(t)
	topic := be.topic(t, 1)
	p := be.pool(t, uniquePrefix("unconfirmed"), 0)
	c := writeTxn(t, p, topic, 1, "u")
	var refuse atomic.Bool
	refuse.Store(true)
	be.fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !refuse.Load() {
			be.fake.DropControl() // only valid inside the control function
			return nil, nil, false
		}
		be.fake.KeepControl()
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := p.Commit(ctx, c)
	cancel()
	if err == nil {
		t.Fatal("commit succeeded while every EndTxn was refused")
	}
	var dl *DataLossError
	if errors.As(err, &dl) {
		t.Fatalf("a transient failure was reported as data loss: %v", err)
	}
	refuse.Store(false)
	if err := p.Commit(ctxT(t), c); err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	if got := be.committed(t, topic); !slices.Equal(got, []string{"u"}) {
		t.Fatalf("read_committed sees %q", got)
	}
}

// FenceAll registers every pooled id, so a live producer of an older attempt
// between transactions is fenced before it opens its next one.
func TestFenceAllPooledIDs(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("fenceall")
		old := be.pool(t, prefix, 0, WithPoolSize(3))
		ctx := ctxT(t)
		// The old attempt has registered ids 0 and 1 and holds nothing open.
		c0 := writeTxn(t, old, topic, 1, "a")
		c1 := writeTxn(t, old, topic, 2, "b")
		for _, c := range []Committable{c0, c1} {
			if err := old.Commit(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		old.SnapshotTaken(3)
		old.CheckpointComplete(3)

		aborted, err := AbortLingering(ctx, be.client(t), Lingering{Prefix: prefix, Subtask: 0, Parallelism: 1, ProbeIDs: 3, FenceAll: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(aborted) != 0 {
			t.Fatalf("aborted %q with nothing open", aborted)
		}
		tx, err := old.Begin()
		if err != nil {
			t.Fatal(err)
		}
		tx.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie")})
		if _, _, err := tx.Prepare(ctx, 4); err == nil {
			t.Fatalf("the fenced producer of %s prepared a transaction", tx.TransactionalID())
		}
		if got := be.committed(t, topic); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("read_committed sees %q, want [a b]", got)
		}
	})
}

// Reserved ids (restored committables just committed) are neither used nor
// registered until a checkpoint taken afterwards completes.
func TestPoolReserveHoldsRestoredIDs(t *testing.T) {
	be := newKfake(t)
	prefix := uniquePrefix("reserve")
	p := be.pool(t, prefix, 0, WithPoolSize(2))
	p.Reserve(TransactionalID(prefix, 0, 0), "another-prefix-0-0")
	tx, err := p.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if tx.TransactionalID() != TransactionalID(prefix, 0, 1) {
		t.Fatalf("Begin took %s while id 0 is reserved", tx.TransactionalID())
	}
	if _, err := p.Begin(); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("second Begin: %v, want ErrPoolExhausted", err)
	}
	p.CheckpointComplete(5) // no snapshot since the reservation: nothing freed
	if p.InUse() != 2 {
		t.Fatalf("%d in use, want 2", p.InUse())
	}
	p.SnapshotTaken(6)
	p.CheckpointComplete(6)
	if p.InUse() != 1 {
		t.Fatalf("%d in use after checkpoint 6, want 1", p.InUse())
	}
	_ = tx.Abort(ctxT(t))
}

// A pool fenced by a newer producer stops: it never builds a new client to
// register the id again, which would fence the newer attempt in turn and
// let the two fence each other forever.
func TestFenceFencedPoolDoesNotRegisterAgain(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		topic := be.topic(t, 1)
		prefix := uniquePrefix("fenced")
		old := be.pool(t, prefix, 0, WithPoolSize(3))
		ctx := ctxT(t)
		c0 := writeTxn(t, old, topic, 1, "a")
		if err := old.Commit(ctx, c0); err != nil {
			t.Fatal(err)
		}
		old.SnapshotTaken(2)
		old.CheckpointComplete(2)

		// The newer attempt registers every id and runs a transaction on
		// id 0.
		if _, err := AbortLingering(ctx, be.client(t), Lingering{Prefix: prefix, Subtask: 0, Parallelism: 1, ProbeIDs: 3, FenceAll: true}); err != nil {
			t.Fatal(err)
		}
		newer := be.pool(t, prefix, 0, WithPoolSize(3))
		cNew := writeTxn(t, newer, topic, 1, "new")

		tx, err := old.Begin()
		if err != nil {
			t.Fatal(err)
		}
		tx.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie")})
		if _, _, err := tx.Prepare(ctx, 3); !errors.Is(err, ErrFenced) {
			t.Fatalf("the fenced producer's prepare: %v, want an error wrapping ErrFenced", err)
		}
		if tx2, err := old.Begin(); !errors.Is(err, ErrFenced) {
			if err == nil {
				tx2.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("zombie again")})
				c, _, perr := tx2.Prepare(ctx, 2)
				if perr == nil {
					perr = old.Commit(ctx, c)
				}
				t.Errorf("the fenced pool began a transaction on %s again (its prepare and commit: %v)", tx2.TransactionalID(), perr)
			} else {
				t.Fatalf("Begin on a fenced pool: %v, want an error wrapping ErrFenced", err)
			}
		}
		if err := newer.Commit(ctx, cNew); err != nil {
			t.Fatalf("the newer attempt's commit after the fenced pool went on: %v", err)
		}
		if got := be.committed(t, topic); !slices.Equal(got, []string{"a", "new"}) {
			t.Fatalf("read_committed sees %q, want [a new]", got)
		}
	})
}
