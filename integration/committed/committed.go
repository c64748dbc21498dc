// Package committed reads what a read_committed consumer of a topic sees:
// the proof side of exactly-once. Tests and the examples' verifiers use it
// to count ids and words on real output rather than assume them.
package committed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/splitflow/splitflow/internal/kfetch"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Read returns every record of topic that a read_committed consumer sees,
// all partitions, in offset order per partition. It first waits until no
// transaction is open on the topic: each partition's last stable offset has
// reached its high watermark (EndTxn returns before the markers are
// written, so a just-committed transaction may still pin it). Then it reads
// to those offsets. Control records are read too, so the position is known
// even when a partition ends in aborted data, and then left out.
//
// ctx bounds the whole read; a transaction that stays open makes Read fail
// when ctx ends, naming the offsets. opts are added to its clients' options
// (TLS and SASL for a secured cluster).
func Read(ctx context.Context, seeds []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, error) {
	ends, err := stableEnds(ctx, seeds, topic, 0, opts)
	if err != nil {
		return nil, err
	}
	return readTo(ctx, seeds, topic, ends, opts)
}

// Visible returns what a read_committed consumer of topic sees now: every
// partition up to its last stable offset. Like Read it first waits for
// open transactions to end, but for settle at most: a transaction still
// open then is one a stopped or failed job left prepared for its next run
// to commit or abort, which Read would wait on until the broker's
// transaction timeout. The records after it are not visible yet and are
// left out.
func Visible(ctx context.Context, seeds []string, topic string, settle time.Duration, opts ...kgo.Opt) ([]*kgo.Record, error) {
	ends, err := stableEnds(ctx, seeds, topic, settle, opts)
	if err != nil {
		return nil, err
	}
	return readTo(ctx, seeds, topic, ends, opts)
}

// stableEnds returns each partition's last stable offset once it has
// reached the high watermark. With settle > 0 it stops waiting after
// settle and returns the last stable offsets as they are; with 0 it waits
// until ctx ends and then fails.
func stableEnds(ctx context.Context, seeds []string, topic string, settle time.Duration, opts []kgo.Opt) (map[int32]int64, error) {
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	deadline := time.Now().Add(settle)
	for {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hwm, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2, lso.Error(), hwm.Error()); err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		ends := map[int32]int64{}
		settled := true
		lso.Each(func(l kadm.ListedOffset) {
			if h, _ := hwm.Lookup(topic, l.Partition); h.Offset != l.Offset {
				settled = false
			}
			ends[l.Partition] = l.Offset
		})
		if settled || (settle > 0 && time.Now().After(deadline)) {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s still has open transactions (last stable %v, high watermark %v): %w", topic, lso, hwm, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readTo reads every partition of topic as a read_committed consumer up to
// ends, leaving out control records and anything at or past ends.
//
// It fetches by itself rather than through a consumer: a consumer's
// position moves only with the records it delivers, and it delivers none
// for a transaction aborted after another began, whose abort marker lies
// past the last stable offset (past ends), so a reader counting delivered
// records would wait for ever below ends. Each fetch answer says how far
// it went (kgo.ProcessFetchPartition), delivered records or not.
func readTo(ctx context.Context, seeds []string, topic string, ends map[int32]int64, opts []kgo.Opt) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.SeedBrokers(seeds...))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	pos := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { pos[o.Partition] = o.Offset })
	parts := slices.Sorted(maps.Keys(ends))
	var out []*kgo.Record
	for _, p := range parts {
		var (
			at      *partitionAt
			lastErr error
		)
		for pos[p] < ends[p] {
			var recs []*kgo.Record
			next := pos[p]
			if at == nil {
				at, err = leaderOf(ctx, adm, topic, p)
			}
			if err == nil {
				recs, next, err = at.fetchCommitted(ctx, cl, pos[p])
			}
			if err != nil {
				// A leader that moved or restarts: ask again, from
				// the metadata on, until ctx ends.
				at, lastErr = nil, err
			}
			for _, r := range recs {
				if r.Offset >= ends[p] {
					break // written after the offsets were taken
				}
				if !r.Attrs.IsControl() {
					out = append(out, r)
				}
			}
			if next > pos[p] {
				pos[p] = next
				continue
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("read_committed consumer of %s stuck at %v, want %v (last error: %v): %w", topic, pos, ends, lastErr, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return out, nil
}

// partitionAt is where a partition is fetched from: the partition, by
// its topic's id, and its leader.
type partitionAt struct {
	kfetch.Partition
	leader int32
}

func leaderOf(ctx context.Context, adm *kadm.Client, topic string, p int32) (*partitionAt, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return nil, fmt.Errorf("metadata of %s: %v", topic, t.Err)
	}
	pd, ok := t.Partitions[p]
	if !ok || pd.Err != nil {
		return nil, fmt.Errorf("metadata of %s[%d]: %v", topic, p, pd.Err)
	}
	return &partitionAt{Partition: kfetch.Partition{Topic: topic, TopicID: t.ID, Partition: p}, leader: pd.Leader}, nil
}

// fetchCommitted fetches the partition from offset from at its leader,
// read_committed, and returns the records a consumer would deliver
// (control records included) and the offset after the batches the answer
// held.
func (at *partitionAt) fetchCommitted(ctx context.Context, cl *kgo.Client, from int64) ([]*kgo.Record, int64, error) {
	answer, err := kfetch.Fetch(ctx, cl, at.leader, at.Partition, from, kfetch.Opts{MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond, ReadCommitted: true})
	if err != nil {
		return nil, 0, err
	}
	return kfetch.Records(at.Partition, from, true, answer)
}
