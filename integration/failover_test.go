package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// Kafka -> map -> keyBy or rebalance -> exactly-once Kafka sink, with a task
// failure injected once per seed at a seeded record: the job restarts from
// its latest checkpoint and every id is in the committed output once.
func TestExactlyOnceUnderInjectedTaskFailures(t *testing.T) {
	t.Parallel() // its seeds mostly wait on checkpoints and restarts, on topics of their own
	b := kafkatest.Get(t)
	const seeds = 20
	var in, restarts int
	var sum tally
	var slowest time.Duration
	for seed := uint64(1); seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		partitions := int32(2 + seed%2)
		n := int64(2000 + rng.IntN(2000))
		failAt := 1 + rng.Int64N(n)
		interval := time.Duration(50+rng.IntN(51)) * time.Millisecond
		rebalance := seed%2 == 1

		input := b.CreateTopic(t, fmt.Sprintf("fail-in-%d", seed), partitions, nil)
		output := b.CreateTopic(t, fmt.Sprintf("fail-out-%d", seed), partitions, nil)
		ids := idRange(0, n)
		writeIDs(t, b, input, ids, modulo(partitions))

		clock := newRecoveryClock()
		var seen atomic.Int64
		var failed, restarted atomic.Int64
		cfg := idjob.Config{
			Brokers: b.Addrs(), Input: input, Output: output,
			TxnPrefix:   fmt.Sprintf("%s-txn", output),
			Parallelism: 2, CheckpointInterval: interval,
			Restart:   restart.FixedDelay(3, 50*time.Millisecond),
			Rebalance: rebalance,
			Map: func(id int64) error {
				if seen.Add(1) == failAt {
					failed.Add(1)
					clock.disrupted()
					return fmt.Errorf("injected failure at record %d (id %d, seed %d)", failAt, id, seed)
				}
				return nil
			},
			Listener: runtime.JobListener{
				CheckpointCompleted: func(int64) { clock.checkpointed() },
				Restarting:          func(int, error) { restarted.Add(1) },
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := idjob.Run(ctx, cfg)
		timedOut := ctx.Err() != nil
		cancel()
		if err != nil || timedOut {
			t.Fatalf("seed %d: job failed (timed out: %v): %v", seed, timedOut, err)
		}
		if failed.Load() != 1 || restarted.Load() != 1 {
			t.Fatalf("seed %d: %d injected failures and %d restarts, want 1 each", seed, failed.Load(), restarted.Load())
		}
		r := countIDs(t, b, output, ids)
		rec, _ := clock.result()
		t.Logf("seed %d: %d ids over %d partitions, checkpoint every %s, %s, failure at record %d: out=%d distinct=%d lost=%d duplicated=%d recovery=%s",
			seed, n, partitions, interval, map[bool]string{true: "rebalance", false: "keyBy"}[rebalance], failAt,
			r.total, r.distinct, r.lost, r.duplicated, rec.Round(time.Millisecond))
		if !r.exact() {
			t.Errorf("seed %d: output is not exactly-once: %+v", seed, r)
		}
		in += int(n)
		restarts += int(restarted.Load())
		sum.total += r.total
		sum.distinct += r.distinct
		sum.duplicated += r.duplicated
		sum.lost += r.lost
		sum.unexpected += r.unexpected
		slowest = max(slowest, rec)
	}
	report(t, fmt.Sprintf("injected task failures (%d seeds, %d restarts)", seeds, restarts), seeds, in, sum, slowest)
}
