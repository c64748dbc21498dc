package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime/restart"
)

// waitCommitted polls topic with read_committed until it holds at least n
// records.
func waitCommitted(t *testing.T, b *kafkatest.Broker, topic string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := 0
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		recs, err := committed.Read(ctx, b.Addrs(), topic)
		cancel()
		if last = err; err == nil {
			if got = len(recs); got >= n {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	lso, hwm := offsets(t, b.Admin(t), topic)
	t.Fatalf("%s holds %d committed records after %s, want %d (last stable offsets %v, high watermarks %v; last read: %v)",
		topic, got, timeout, n, lso, hwm, last)
}

// Partitions added to the input topic while an unbounded job runs are
// discovered and read: their records reach the output exactly once. The job
// is then stopped gracefully by cancelling its context.
func TestPartitionsAddedWhileRunning(t *testing.T) {
	b := kafkatest.Get(t)
	input := b.CreateTopic(t, "grow-in", 2, nil)
	output := b.CreateTopic(t, "grow-out", 2, nil)
	const n = 1000
	first := idRange(0, n)
	writeIDs(t, b, input, first, modulo(2))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- idjob.Run(ctx, idjob.Config{
			Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: output + "-txn",
			Parallelism: 2, CheckpointInterval: 100 * time.Millisecond, Unbounded: true,
			Discovery: 200 * time.Millisecond, Restart: restart.None(), Logger: testLogger(t),
		})
	}()
	waitCommitted(t, b, output, n, 60*time.Second)

	adm := b.Admin(t)
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	resp, err := adm.CreatePartitions(actx, 2, input)
	acancel()
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	added := time.Now()
	second := idRange(n, n)
	writeIDs(t, b, input, second, func(id int64) int32 { return 2 + int32(id%2) })
	written := time.Now()
	waitCommitted(t, b, output, 2*n, 60*time.Second)
	seenAfter := time.Since(written)
	t.Logf("wrote into the new partitions %s after adding them; all in the output %s later",
		written.Sub(added).Round(time.Millisecond), seenAfter.Round(time.Millisecond))

	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("job after cancellation: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("job did not stop after its context was cancelled")
	}
	report(t, "partitions added while running", 1, 2*n, countIDs(t, b, output, append(first, second...)), seenAfter)
}
