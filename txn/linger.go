package txn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Lingering says which open transactions a subtask cleans up when it starts
// or restores.
type Lingering struct {
	// Prefix is the sink's transactional id prefix.
	Prefix string
	// Subtask and Parallelism identify the caller. A subtask owns the ids
	// prefix:<Subtask>-* (and, from older checkpoints, prefix-<Subtask>-*);
	// subtask 0 also owns those of subtasks at or beyond Parallelism, left
	// by a run with more subtasks (under a claim: the slot of that subtask
	// mod Parallelism, see Owns). Each id has one
	// owner, so no two subtasks race to abort it.
	Subtask, Parallelism int
	// Epoch is the claim the caller runs under (a slot of a distributed
	// job; 0: none), whose pool names its ids ClaimTransactionalID. It owns
	// the ids of its subtask under its own and every older claim: an
	// older owner can no longer record a checkpoint, so its open
	// transactions are never to be committed, except the restored ones
	// (Keep). It never owns those of a newer claim: a process that still
	// runs the slot under an older claim must not abort the transactions
	// of the slot's newer owner.
	Epoch int64
	// Keep lists the restored committables of every subtask of the
	// checkpoint restored from, not only this subtask's: their
	// transactions are committed, never aborted, and their ids are not
	// registered anew (their owner does so once a later checkpoint
	// completes). Another subtask may still be about to commit one of
	// them: after a parallelism change old subtask i's committables go to
	// new subtask i % Parallelism, while in one process the ids of old
	// subtasks beyond Parallelism are owned by subtask 0, and subtasks
	// start concurrently.
	Keep []Committable
	// ProbeIDs is how many pooled ids per subtask to probe where the broker
	// cannot list transactions (before Kafka 3.0): the pool size. Only the
	// ids of the caller's own claim (Epoch) are probed: an older claim's
	// open transactions are then left to the broker's transaction
	// timeout.
	ProbeIDs int
	// ProbeSubtasks is, for subtask 0 when probing, how many subtask indexes
	// to probe in all (covering an earlier, larger parallelism). Zero means
	// Parallelism.
	ProbeSubtasks int
	// ForceProbe probes even where listing works; for tests.
	ForceProbe bool
	// FenceAll registers every pooled id of the subtask (ProbeIDs of them)
	// besides the listed open ones. A producer of an older attempt that is
	// still alive and has not yet opened its next transaction is then
	// fenced too: whatever it sends later is refused.
	FenceAll bool
}

// Owns reports whether subtask l.Subtask is the one that aborts id and
// registers it anew. Under a claim (a slot, Epoch > 0) the ids of subtask
// st at or beyond the parallelism, a savepoint's of a job run in one
// process at a higher one, are slot st mod Parallelism's: the slot that
// commits that old subtask's committables, since slots start and
// checkpoint each on its own and another slot could abort them before
// it commits. In one process subtask 0 owns them: its subtasks commit
// what they restored before any checkpoint completes.
func (l Lingering) Owns(id string) bool {
	st, epoch, _, ok := ParseClaimTransactionalID(l.Prefix, id)
	if !ok || epoch > l.Epoch {
		return false
	}
	if l.Epoch > 0 {
		return st%l.Parallelism == l.Subtask
	}
	return st == l.Subtask || (l.Subtask == 0 && st >= l.Parallelism)
}

func (l Lingering) kept(id string) bool {
	for _, c := range l.Keep {
		if c.TransactionalID == id {
			return true
		}
	}
	return false
}

// AbortLingering aborts the open transactions under l.Prefix that this
// subtask owns and that are not restored committables, and returns their
// ids. A transaction is aborted by registering its id anew (InitProducerID),
// which also fences any producer still using it: a writer of an older
// attempt can no longer commit. It returns once every such abort is
// complete, so read_committed consumers are no longer pinned by them.
func AbortLingering(ctx context.Context, cl *kgo.Client, l Lingering) ([]string, error) {
	if l.Prefix == "" || l.Parallelism <= 0 || l.Subtask < 0 || l.Subtask >= l.Parallelism || l.Epoch < 0 {
		return nil, fmt.Errorf("txn: abort lingering: bad prefix %q, subtask %d, parallelism %d or epoch %d", l.Prefix, l.Subtask, l.Parallelism, l.Epoch)
	}
	var ids []string
	listed := !l.ForceProbe
	if listed {
		var err error
		ids, err = listOpen(ctx, cl, l)
		if errors.Is(err, kerr.UnsupportedVersion) || errors.Is(err, errNoListing) {
			listed = false
		} else if err != nil {
			return nil, fmt.Errorf("txn: list open transactions under %q: %w", l.Prefix, err)
		}
	}
	if !listed {
		ids = l.probeIDs()
	} else if l.FenceAll {
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		for i := 0; i < max(l.ProbeIDs, 1); i++ {
			if id := ClaimTransactionalID(l.Prefix, l.Subtask, l.Epoch, i); !seen[id] {
				ids = append(ids, id)
			}
		}
	}
	var aborted []string
	for _, id := range ids {
		if l.kept(id) {
			continue
		}
		wasOpen, err := registerID(ctx, cl, id)
		if err != nil {
			return aborted, fmt.Errorf("txn: abort lingering transaction %s: %w", id, err)
		}
		// A probed or fenced id may have had no open transaction; report
		// only those that were open.
		if wasOpen {
			aborted = append(aborted, id)
		}
	}
	return aborted, nil
}

// AbortOlderClaims aborts the open transactions of l's subtask under
// claims older than l.Epoch (l.Epoch >= 1), sparing l.Keep, and returns
// their ids. A writer runs AbortLingering when it starts; this is for
// later, at each completed checkpoint: a process that still runs the
// slot under an older claim (it was paused past the takeover) may open a
// transaction on one of its ids after that start, which found nothing
// open on the id and so neither aborted nor fenced it. Nothing of an
// older claim is ever committed once a newer claim recorded a checkpoint
// (the older owner's checkpoints are never recorded), but if that
// process dies the transaction stays open until the broker's transaction
// timeout and pins every read_committed reader of its partitions. Its
// own claim's ids are never touched: they are the caller's live ones.
// Where the brokers cannot list transactions (before Kafka 3.0) it does
// nothing, as AbortLingering probes only the own claim's ids there.
func AbortOlderClaims(ctx context.Context, cl *kgo.Client, l Lingering) ([]string, error) {
	if l.Prefix == "" || l.Parallelism <= 0 || l.Subtask < 0 || l.Subtask >= l.Parallelism || l.Epoch < 1 {
		return nil, fmt.Errorf("txn: abort older claims' transactions: bad prefix %q, subtask %d, parallelism %d or epoch %d", l.Prefix, l.Subtask, l.Parallelism, l.Epoch)
	}
	ids, err := listOpen(ctx, cl, l)
	if errors.Is(err, kerr.UnsupportedVersion) || errors.Is(err, errNoListing) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("txn: list open transactions under %q: %w", l.Prefix, err)
	}
	var aborted []string
	for _, id := range ids {
		if _, epoch, _, _ := ParseClaimTransactionalID(l.Prefix, id); epoch >= l.Epoch || l.kept(id) {
			continue
		}
		wasOpen, err := registerID(ctx, cl, id)
		if err != nil {
			return aborted, fmt.Errorf("txn: abort older claim's transaction %s: %w", id, err)
		}
		if wasOpen {
			aborted = append(aborted, id)
		}
	}
	return aborted, nil
}

var errNoListing = errors.New("broker does not support ListTransactions")

func listOpen(ctx context.Context, cl *kgo.Client, l Lingering) ([]string, error) {
	adm := kadm.NewClient(cl)
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return nil, err
	}
	supported := false
	vs.Each(func(v kadm.BrokerApiVersions) {
		if _, _, ok := v.KeyVersions(int16(kmsg.ListTransactions)); ok {
			supported = true
		}
	})
	if !supported {
		return nil, errNoListing
	}
	// The state filter needs ListTransactions v1; where it is ignored the
	// listing is wider, so states are checked here too.
	txns, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, t := range txns {
		if t.State == "Ongoing" && l.Owns(id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

func (l Lingering) probeIDs() []string {
	n := max(l.ProbeIDs, 1)
	subtasks := []int{l.Subtask}
	if l.Subtask == 0 {
		for s := l.Parallelism; s < max(l.ProbeSubtasks, l.Parallelism); s++ {
			subtasks = append(subtasks, s)
		}
	}
	var ids []string
	for _, s := range subtasks {
		for i := 0; i < n; i++ {
			ids = append(ids, ClaimTransactionalID(l.Prefix, s, l.Epoch, i))
		}
	}
	return ids
}

// AbortAndFence registers transactional id anew, which aborts its open
// transaction, if any, and fences every producer still using it. It reports
// whether a transaction was open. Operators use it to clear a transaction
// that pins read_committed consumers; a sink does the same at start.
func AbortAndFence(ctx context.Context, cl *kgo.Client, id string) (wasOpen bool, err error) {
	return registerID(ctx, cl, id)
}

// registerID sends InitProducerID for id, which aborts its open transaction
// (if any) and bumps its epoch, retrying while the coordinator is busy
// ending it. It reports whether the id had an open transaction, as far as
// DescribeTransactions could tell beforehand.
func registerID(ctx context.Context, cl *kgo.Client, id string) (bool, error) {
	wasOpen := false
	if d, err := kadm.NewClient(cl).DescribeTransactions(ctx, id); err == nil {
		if t, ok := d[id]; ok && t.Err == nil && t.State == "Ongoing" {
			wasOpen = true
		}
	}
	backoff := minBackoff
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(id)
		req.TransactionTimeoutMillis = 60_000
		req.ProducerID = -1
		req.ProducerEpoch = -1
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return wasOpen, nil
		}
		if ctx.Err() != nil {
			return wasOpen, fmt.Errorf("%w (last answer: %w)", ctx.Err(), err)
		}
		if !retriable(err) {
			return wasOpen, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return wasOpen, fmt.Errorf("%w (last answer: %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
