package kafkatest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadCommitted returns every record of topic that a read_committed consumer
// sees, all partitions, in offset order per partition. It first waits until
// no transaction is open on the topic (each partition's last stable offset
// reaches its high watermark; EndTxn returns before the markers are
// written), then reads to that offset. Control records are read too, so the
// position is known even when a partition ends in aborted data, and then
// left out. It fails the test if the topic does not settle within the
// timeout.
func ReadCommitted(t testing.TB, seeds []string, topic string, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ends := map[int32]int64{}
	for {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hwm, err2 := adm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2, lso.Error(), hwm.Error()); err != nil {
			t.Fatalf("kafkatest: list offsets of %s: %v", topic, err)
		}
		settled := true
		hwm.Each(func(h kadm.ListedOffset) {
			l, _ := lso.Lookup(topic, h.Partition)
			if l.Offset != h.Offset {
				settled = false
			}
			ends[h.Partition] = h.Offset
		})
		if settled {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: %s still has open transactions after %s (last stable %v, high watermark %v)", topic, timeout, lso, hwm)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pos := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if pos[p] < end {
				return false
			}
		}
		return true
	}
	var out []*kgo.Record
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kafkatest: read_committed consumer of %s stuck at %v, want %v", topic, pos, ends)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("kafkatest: fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}
