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
// when ctx ends, naming the offsets.
func Read(ctx context.Context, seeds []string, topic string) ([]*kgo.Record, error) {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ends := map[int32]int64{}
	for {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hwm, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2, lso.Error(), hwm.Error()); err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		settled := true
		hwm.Each(func(h kadm.ListedOffset) {
			if l, _ := lso.Lookup(topic, h.Partition); l.Offset != h.Offset {
				settled = false
			}
			ends[h.Partition] = h.Offset
		})
		if settled {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s still has open transactions (last stable %v, high watermark %v): %w", topic, lso, hwm, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())
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
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
}
