package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kgo"
)

// poisonInput writes ids 0..n-1 over two partitions and one value that is
// not an id into partition 1 in the middle of them; it returns the ids and
// the offset of the bad record.
func poisonInput(t *testing.T, b *kafkatest.Broker, topic string, n int64) ([]int64, int64) {
	t.Helper()
	ids := idRange(0, n)
	writeIDs(t, b, topic, ids[:n/2], modulo(2))
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("poison")})
	rec, err := res.First()
	if err != nil {
		t.Fatalf("write the bad record: %v", err)
	}
	writeIDs(t, b, topic, ids[n/2:], modulo(2))
	return ids, rec.Offset
}

// By default a record the deserializer rejects fails the job with an error
// naming its topic, partition and offset.
func TestPoisonRecordFailsTheJob(t *testing.T) {
	b := kafkatest.Get(t)
	input := b.CreateTopic(t, "poison-in", 2, nil)
	output := b.CreateTopic(t, "poison-out", 2, nil)
	_, offset := poisonInput(t, b, input, 2000)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	err := idjob.Run(ctx, idjob.Config{
		Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: output + "-txn",
		Parallelism: 2, CheckpointInterval: 50 * time.Millisecond,
		Restart: restart.FixedDelay(1, 50*time.Millisecond),
	})
	if ctx.Err() != nil {
		t.Fatalf("the job did not fail by itself: %v", err)
	}
	var bad *kafka.BadRecordError
	if !errors.As(err, &bad) {
		t.Fatalf("job ended with %v, want an error wrapping *kafka.BadRecordError", err)
	}
	if bad.Topic != input || bad.Partition != 1 || bad.Offset != offset || !errors.Is(err, idjob.ErrNotAnID) {
		t.Fatalf("bad record reported at %s-%d offset %d (cause %v), want %s-1 offset %d", bad.Topic, bad.Partition, bad.Offset, bad.Err, input, offset)
	}
	for _, want := range []string{input, fmt.Sprintf("offset %d", offset)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Logf("SUMMARY scenario=%q runs=1 in=2001 failed after %s: %v", "poison record, default", time.Since(began).Round(time.Millisecond), err)
}

// With WithSkipBadRecords the rejected record is counted and dropped, and
// every other record reaches the output exactly once.
func TestPoisonRecordSkipped(t *testing.T) {
	b := kafkatest.Get(t)
	input := b.CreateTopic(t, "poison-skip-in", 2, nil)
	output := b.CreateTopic(t, "poison-skip-out", 2, nil)
	ids, _ := poisonInput(t, b, input, 2000)

	var rejected atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := idjob.Run(ctx, idjob.Config{
		Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: output + "-txn",
		Parallelism: 2, CheckpointInterval: 50 * time.Millisecond, SkipBad: true, Rejected: &rejected,
		Restart: restart.None(),
	})
	if err != nil || ctx.Err() != nil {
		t.Fatalf("job: %v (context: %v)", err, ctx.Err())
	}
	if got := rejected.Load(); got != 1 {
		t.Errorf("%d records rejected, want 1", got)
	}
	report(t, "poison record, skipped", 1, len(ids)+1, countIDs(t, b, output, ids), 0)
}
