package txn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A HangingCommit is a committed transaction that one partition still holds
// open: the coordinator ended the transaction, but the partition never got
// its commit marker.
//
// Kafka loses the marker when the partition has no leader at the moment the
// coordinator sends it: the coordinator takes the partition for a deleted
// one, drops it from the transaction and completes the commit without it
// ("Couldn't find leader endpoint ... likely deleted already and hence can be
// skipped" in the broker's log). A partition has no leader while its only
// in-sync replica shuts down: the single broker of a small cluster
// restarting, a topic with one replica whose broker restarts. The partition
// then keeps the transaction open for ever: its last stable offset stays
// below the transaction's first record, every read_committed reader of the
// partition stops there, and the records, committed as far as the job and
// the coordinator know, never become visible.
type HangingCommit struct {
	Committable
	Topic     string
	Partition int32
	// FirstOffset is the transaction's first offset in the partition.
	FirstOffset int64

	coordinatorEpoch int32 // the partition's, for the marker
	markerEpoch      int16
}

func (h HangingCommit) String() string {
	return fmt.Sprintf("%s (open in %s[%d] from offset %d)", h.Committable, h.Topic, h.Partition, h.FirstOffset)
}

// FindHangingCommits returns the transactions of committed that a partition
// of topics holds open although their coordinator has ended them. Pending
// are those still open in a partition whose coordinator has not ended them
// yet, or whose state it could not tell: their markers may still be on
// their way; ask again later. Every transaction of committed must be one
// whose commit was confirmed (Commit returned nil): a hanging commit is
// ended with a commit marker.
//
// It reads the partitions' open transactions (DescribeProducers), then the
// coordinators' states (DescribeTransactions), then the partitions again: a
// transaction still open after its coordinator said it ended is hanging.
// On a cluster that runs transaction protocol v1 it finds none and returns
// ErrProtocolV1 when a partition holds a transaction open under a producer
// id and epoch of committed.
func FindHangingCommits(ctx context.Context, cl *kgo.Client, committed []Committable, topics []string) (hanging []HangingCommit, pending []Committable, err error) {
	if len(committed) == 0 || len(topics) == 0 {
		return nil, nil, nil
	}
	adm := kadm.NewClient(cl)
	parts, err := partitionsOf(ctx, adm, topics)
	if err != nil || len(parts) == 0 {
		return nil, nil, err
	}
	open, err := openTransactions(ctx, adm, parts, committed)
	if err != nil || len(open) == 0 {
		return nil, nil, err
	}

	// Under transaction protocol v1 a producer keeps its epoch from one
	// transaction to the next: the open transaction of a producer id and
	// epoch may be a later one than the committed, and aborted.
	if v2, err := protocolV2(ctx, cl); err != nil {
		return nil, nil, err
	} else if !v2 {
		return nil, nil, ErrProtocolV1
	}

	var ids []string
	for _, o := range open {
		if !slices.Contains(ids, o.TransactionalID) {
			ids = append(ids, o.TransactionalID)
		}
	}
	described, err := adm.DescribeTransactions(ctx, ids...)
	if err != nil && len(described) == 0 {
		return nil, nil, fmt.Errorf("txn: describe transactions %v: %w", ids, err)
	}
	ended := make(kadm.TopicsSet)
	for _, o := range open {
		d, ok := described[o.TransactionalID]
		epoch, done := endedEpoch(d, ok, o.Committable)
		if !done {
			if !slices.Contains(pending, o.Committable) {
				pending = append(pending, o.Committable)
			}
			continue
		}
		o.markerEpoch = epoch
		ended.Add(o.Topic, o.Partition)
		hanging = append(hanging, o)
	}
	if len(hanging) == 0 {
		return nil, pending, nil
	}
	// A marker written between the first read and the coordinator's answer
	// closed its partition; only those still open are hanging.
	again, err := openTransactions(ctx, adm, ended, committed)
	if err != nil {
		return nil, nil, err
	}
	hanging = slices.DeleteFunc(hanging, func(h HangingCommit) bool {
		return !slices.ContainsFunc(again, func(a HangingCommit) bool {
			return a.Topic == h.Topic && a.Partition == h.Partition && a.Committable == h.Committable && a.FirstOffset == h.FirstOffset
		})
	})
	return hanging, pending, nil
}

// endedEpoch reports whether the coordinator has ended c's transaction, and
// the epoch its commit marker carries: under transaction protocol v2 the
// coordinator ends a transaction of epoch e at epoch e+1 and writes its
// markers with e+1, and the next transaction of the producer runs at e+1.
// A coordinator that has not answered, or answers with c's own epoch or an
// older one, tells nothing.
func endedEpoch(d kadm.DescribedTransaction, ok bool, c Committable) (int16, bool) {
	if !ok || d.Err != nil {
		return 0, false
	}
	next := c.Epoch
	if next < math.MaxInt16 {
		next++
	}
	switch {
	case d.ProducerID != c.ProducerID:
		// The id has a new producer id: its old producer is done.
		return next, true
	case d.ProducerEpoch > next:
		return next, true
	case d.ProducerEpoch == next:
		// c ended at e+1; its markers may still be on their way.
		return next, !preparing(d.State)
	}
	return 0, false
}

func preparing(state string) bool {
	return state == "PrepareCommit" || state == "PrepareAbort" || state == "PrepareEpochFence"
}

// ErrProtocolV1 is FindHangingCommits' answer on a cluster whose
// transaction.version is below 2: there a producer id and epoch do not name
// one transaction, so a partition's open transaction cannot be told for a
// committed one.
var ErrProtocolV1 = errors.New("txn: the cluster runs transaction protocol v1 (transaction.version < 2), where a producer id and epoch do not name one transaction; hanging commits are not looked for")

// protocolV2 reports whether the cluster's finalized transaction.version is
// 2 or more.
func protocolV2(ctx context.Context, cl *kgo.Client) (bool, error) {
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return false, fmt.Errorf("txn: ask for the cluster's transaction.version: %w", err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel >= 2, nil
		}
	}
	return false, nil
}

// partitionsOf lists the partitions of topics; a topic the cluster does not
// know (deleted since) has none.
func partitionsOf(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicsSet, error) {
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("txn: list partitions of %v: %w", topics, err)
	}
	set := make(kadm.TopicsSet)
	for _, t := range td {
		if t.Err != nil {
			if errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("txn: list partitions of %s: %w", t.Topic, t.Err)
		}
		for p := range t.Partitions {
			set.Add(t.Topic, p)
		}
	}
	return set, nil
}

// openTransactions returns the open transactions in parts that belong to a
// committable of committed (same producer id and epoch).
func openTransactions(ctx context.Context, adm *kadm.Client, parts kadm.TopicsSet, committed []Committable) ([]HangingCommit, error) {
	described, err := adm.DescribeProducers(ctx, parts)
	if err != nil {
		return nil, fmt.Errorf("txn: describe the producers of %v: %w", parts.Topics(), err)
	}
	var open []HangingCommit
	var errs []error
	for _, t := range described {
		for _, p := range t.Partitions {
			if p.Err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, p.Err))
				continue
			}
			for _, pr := range p.ActiveProducers {
				if pr.CurrentTxnStartOffset < 0 {
					continue
				}
				for _, c := range committed {
					if c.ProducerID == pr.ProducerID && c.Epoch == pr.ProducerEpoch {
						open = append(open, HangingCommit{Committable: c, Topic: t.Topic, Partition: p.Partition,
							FirstOffset: pr.CurrentTxnStartOffset, coordinatorEpoch: max(pr.CoordinatorEpoch, 0)})
						break
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("txn: describe producers: %w", errors.Join(errs...))
	}
	return open, nil
}

// EndHangingCommits writes the commit marker that each of hs lacks to its
// partition's leader: the records become visible to read_committed readers
// and the partition's last stable offset moves on. It is what the
// coordinator would have written. Writing markers takes the ClusterAction
// right on the cluster, as aborting a hanging transaction by hand with
// kafka-transactions.sh does; an error naming ClusterAction says the
// client lacks it.
func EndHangingCommits(ctx context.Context, cl *kgo.Client, hs []HangingCommit) error {
	if len(hs) == 0 {
		return nil
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	for _, h := range hs {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = h.ProducerID, h.markerEpoch, true, h.coordinatorEpoch
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = h.Topic, []int32{h.Partition}
		m.Topics = append(m.Topics, t)
		req.Markers = append(req.Markers, m)
	}
	var errs []error
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			errs = append(errs, sh.Err)
			continue
		}
		resp := sh.Resp.(*kmsg.WriteTxnMarkersResponse)
		for _, rm := range resp.Markers {
			for _, rt := range rm.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						errs = append(errs, fmt.Errorf("producer %d in %s[%d]: %w", rm.ProducerID, rt.Topic, rp.Partition, err))
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return fmt.Errorf("txn: write the commit markers of %v: %w (writing a transaction marker takes the ClusterAction right on the cluster)", hs, err)
		}
		return fmt.Errorf("txn: write the commit markers of %v: %w", hs, err)
	}
	return nil
}
