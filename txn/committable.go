package txn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Committable identifies a prepared transaction: enough to commit or abort
// it from any client, after a crash too.
type Committable struct {
	TransactionalID string
	ProducerID      int64
	// Epoch is the producer epoch during the transaction. Under transaction
	// protocol v2 it is bumped when the transaction ends, so it is read after
	// the flush, before the commit.
	Epoch int16
	// CheckpointID is the checkpoint whose completion commits the
	// transaction.
	CheckpointID int64
}

func (c Committable) String() string {
	return fmt.Sprintf("%s (producer id %d, epoch %d, checkpoint %d)", c.TransactionalID, c.ProducerID, c.Epoch, c.CheckpointID)
}

// Terminator ends the prefix in every transactional id: prefix:<...>. A
// prefix may not hold it (ValidatePrefix), so the ids of prefix "a" are
// exactly those that begin with "a:", and an ACL on the transactional ids
// prefixed "a:" (kafka-acls.sh --resource-pattern-type prefixed) grants
// none of job "a-b"'s, which begin with "a-b:". With a terminator that a
// prefix may hold, such as the dash before the subtask, "a-" also matched
// "a-b-0-0".
const Terminator = ':'

// ValidatePrefix checks that prefix can name transactional ids: it is not
// empty and does not hold Terminator.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return errors.New("txn: empty transactional id prefix")
	}
	if strings.ContainsRune(prefix, Terminator) {
		return fmt.Errorf("txn: transactional id prefix %q holds %q, which ends the prefix in every id (prefix%c<subtask>-<n>), so that an ACL on the ids prefixed %q covers this prefix's ids alone; choose a prefix without it",
			prefix, Terminator, Terminator, "prefix"+string(Terminator))
	}
	return nil
}

// IDPrefix is the beginning every transactional id of prefix shares and
// no other prefix's id has: prefix:. It is what an ACL on the ids names.
func IDPrefix(prefix string) string { return prefix + string(Terminator) }

// TransactionalID returns the transactional id of pooled transaction n of a
// subtask: prefix:<subtask>-<n>.
func TransactionalID(prefix string, subtask, n int) string {
	return IDPrefix(prefix) + strconv.Itoa(subtask) + "-" + strconv.Itoa(n)
}

// ClaimTransactionalID returns the transactional id of pooled transaction n
// of a subtask that runs under a claim of epoch (a slot of a distributed
// job): prefix:<subtask>-e<epoch>-<n>. Each claim of a slot has ids of its
// own, so a process that still runs the slot under an older claim cannot
// register, and so abort, a transaction of the newer owner. Epoch 0 is
// TransactionalID's form.
func ClaimTransactionalID(prefix string, subtask int, epoch int64, n int) string {
	if epoch == 0 {
		return TransactionalID(prefix, subtask, n)
	}
	return IDPrefix(prefix) + strconv.Itoa(subtask) + "-e" + strconv.FormatInt(epoch, 10) + "-" + strconv.Itoa(n)
}

// ParseTransactionalID is the inverse of TransactionalID. It reports false
// for an id that is not prefix:<subtask>-<n> (or the legacy
// prefix-<subtask>-<n>, see ParseClaimTransactionalID) with non-negative
// numbers.
func ParseTransactionalID(prefix, id string) (subtask, n int, ok bool) {
	subtask, epoch, n, ok := ParseClaimTransactionalID(prefix, id)
	if !ok || epoch != 0 {
		return 0, 0, false
	}
	return subtask, n, true
}

// ParseClaimTransactionalID is the inverse of ClaimTransactionalID: it
// parses both forms, prefix:<subtask>-<n> with epoch 0 and
// prefix:<subtask>-e<epoch>-<n> with epoch >= 1. It also parses the
// legacy layout, the same with a dash for the colon (IsLegacyID), which
// checkpoints written before the colon may still name: their prepared
// transactions are committed, and their open ones aborted, on restore.
func ParseClaimTransactionalID(prefix string, id string) (subtask int, epoch int64, n int, ok bool) {
	rest, found := strings.CutPrefix(id, IDPrefix(prefix))
	if !found {
		if rest, found = strings.CutPrefix(id, prefix+"-"); !found {
			return 0, 0, 0, false
		}
	}
	parts := strings.Split(rest, "-")
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && strings.HasPrefix(parts[1], "e"):
		e := parts[1][1:]
		v, err := strconv.ParseInt(e, 10, 64)
		if err != nil || v < 1 || strconv.FormatInt(v, 10) != e {
			return 0, 0, 0, false
		}
		epoch = v
		parts = []string{parts[0], parts[2]}
	default:
		return 0, 0, 0, false
	}
	subtask, err1 := strconv.Atoi(parts[0])
	n, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || subtask < 0 || n < 0 || strconv.Itoa(subtask) != parts[0] || strconv.Itoa(n) != parts[1] {
		return 0, 0, 0, false
	}
	return subtask, epoch, n, true
}

// IsLegacyID reports whether id, one of prefix's (ParseClaimTransactionalID),
// has the layout before Terminator: prefix-<subtask>-<n> or
// prefix-<subtask>-e<epoch>-<n>. An ACL on IDPrefix(prefix) does not cover
// it; the ACL on the ids prefixed "prefix-" does, so a job restored from
// such a checkpoint needs that one until a checkpoint of its own completed.
func IsLegacyID(prefix, id string) bool {
	return !strings.HasPrefix(id, IDPrefix(prefix))
}

// DataLossError reports a prepared transaction that can no longer be
// committed: the broker aborted it (its transaction.timeout.ms passed before
// the checkpoint completed) or a newer producer took its transactional id.
// Its records are not in the output. A caller must fail loudly; retrying
// cannot help.
type DataLossError struct {
	Committable
	// Err is the broker's answer, reachable with errors.Is (for example
	// kerr.ProducerFenced or kerr.InvalidTxnState).
	Err error
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("txn: transaction %s can no longer be committed, its records are lost: %v "+
		"(the broker aborted it or a newer producer took its id; check that transaction.timeout.ms exceeds "+
		"the longest a transaction can stay open, which the Kafka sink checks at start, and that no task was held up longer)", e.Committable, e.Err)
}

func (e *DataLossError) Unwrap() error { return e.Err }

// ErrPoolExhausted is returned by Pool.Begin when every pooled transactional
// id of the subtask holds a transaction that is open, awaits its commit, or
// was committed too recently to be reused (rule 1 of the package doc).
var ErrPoolExhausted = errors.New("txn: every pooled transactional id is in use or awaiting commit")

// ErrFenced is returned when a newer producer has taken a pooled id: this
// writer belongs to an older attempt and must stop.
// Its text has no "txn:" of its own: it is only handed out inside the
// error of the pool that was fenced, which says it.
var ErrFenced = errors.New("producer fenced by a newer attempt with the same transactional id")

// retriable reports whether an EndTxn answer is transient: the coordinator is
// still writing the markers of an earlier EndTxn, is loading, or moved.
func retriable(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || errors.Is(err, kerr.ConcurrentTransactions)
	}
	// Not a broker answer: a transport error, which may not have reached
	// the broker. Sending EndTxn again is safe (same outcome requested).
	return true
}

// lost reports whether an EndTxn(commit) answer means the transaction will
// never commit.
func lost(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.UnknownProducerID) ||
		errors.Is(err, kerr.InvalidTxnState) ||
		errors.Is(err, kerr.TransactionalIDNotFound)
}
