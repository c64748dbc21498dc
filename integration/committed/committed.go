// Package committed reads what a read_committed consumer of a topic sees:
// the proof side of exactly-once. Tests and the examples' verifiers use it
// to count ids and words on real output rather than assume them.
package committed

import (
	"context"
	"errors"
	"fmt"
	"time"

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
func readTo(ctx context.Context, seeds []string, topic string, ends map[int32]int64, opts []kgo.Opt) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	pos := map[int32]int64{}
	var out []*kgo.Record
	for {
		done := true
		for p, end := range ends {
			if pos[p] < end {
				done = false
			}
		}
		if done {
			return out, nil
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read_committed consumer of %s stuck at %v, want %v: %w", topic, pos, ends, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s[%d]: %w", topic, p, err))
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := ends[r.Partition]; !ok || r.Offset >= end {
				return // written after the offsets were taken
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
}
