package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// The broker stops and starts again while a job runs: the job recovers by
// itself (its clients reconnect, its restart strategy restarts what failed),
// its output stays exact, and once it ended cleanly it leaves no
// transaction open. The broker is shared by the package's tests,
// so this test does not run in parallel with others and always restarts it.
func TestBrokerRestartMidJob(t *testing.T) {
	b := kafkatest.Get(t)
	const n = 40000
	input := b.CreateTopic(t, "bounce-in", 3, nil)
	output := b.CreateTopic(t, "bounce-out", 3, nil)
	ids := idRange(0, n)
	writeIDs(t, b, input, ids, modulo(3))

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Start(ctx); err != nil {
			t.Errorf("restart the broker: %v", err)
		}
	})

	var seen, restarts, checkpoints atomic.Int64
	clock := newRecoveryClock()
	cfg := idjob.Config{
		Brokers: b.Addrs(), Input: input, Output: output, TxnPrefix: output + "-txn",
		Parallelism: 2, CheckpointInterval: 100 * time.Millisecond, Logger: testLogger(t),
		Restart: restart.FixedDelay(100, 500*time.Millisecond),
		Map: func(int64) error {
			if seen.Add(1)%5 == 0 {
				time.Sleep(time.Millisecond) // a slow job: the broker goes away mid-way
			}
			return nil
		},
		Listener: runtime.JobListener{
			CheckpointCompleted: func(int64) { checkpoints.Add(1); clock.checkpointed() },
			Restarting:          func(int, error) { restarts.Add(1) },
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- idjob.Run(ctx, cfg) }()

	// Stop once the job is well under way.
	for checkpoints.Load() < 5 || seen.Load() < n/5 {
		select {
		case err := <-done:
			t.Fatalf("the job ended before the broker stopped (%v); give it more input", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	stopped := time.Now()
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("stop the broker: %v", err)
	}
	read := seen.Load()
	time.Sleep(3 * time.Second)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start the broker: %v", err)
	}
	clock.disrupted()
	t.Logf("broker down for %s, %d of %d records read when it stopped", time.Since(stopped).Round(time.Millisecond), read, n)

	if err := <-done; err != nil || ctx.Err() != nil {
		t.Fatalf("job after the broker restart: %v (context: %v)", err, ctx.Err())
	}
	rec, recovered := clock.result()
	if recovered == 0 {
		t.Fatal("no checkpoint completed after the broker came back")
	}
	t.Logf("%d restarts, %d checkpoints", restarts.Load(), checkpoints.Load())
	// Before the count, which waits for every partition's last stable
	// offset: a transaction left open would stall it without saying which.
	requireNoOpenTransaction(t, b, cfg.TxnPrefix, output)
	report(t, "broker stopped and started mid-job", 1+int(restarts.Load()), n, countIDs(t, b, output, ids), rec)
}
