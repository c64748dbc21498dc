package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
)

// keyGroupOwner is the engine's rule for key groups (contiguous ranges),
// which differs from the Kafka source's own ownerOf: a test passing with
// it shows the shuffle's source follows the rule it is given.
func keyGroupOwner(partitions int) func(partition, parallelism int) int {
	return func(p, par int) int { return p * par / partitions }
}

// shufflePartitionOf is the partition the test job gives value "vNNNN".
func shufflePartitionOf(v string, partitions int) int32 {
	i, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	if err != nil {
		panic(err)
	}
	return int32((i * 7) % partitions)
}

// shuffleJob builds input -> shuffle.Sink, shuffle.Source -> tag ->
// exactly-once Kafka sink into "out", each output value "vNNNN pP sS"
// naming the shuffle partition P it crossed and the subtask S that read
// it. fail, when set, is called by both sides for every record and fails
// the record when it returns true.
func shuffleJob(t *testing.T, env *runtime.Environment, seeds []string, sh *Shuffle, channel string, partitions int, fail func(side string, v string) bool) {
	t.Helper()
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("in"), WithBounded(LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	in := runtime.FromSource(env, src, "in").UID("in")
	recs := runtime.Map(in, func(v string) (runtime.ShuffleRecord, error) {
		if fail != nil && fail("up", v) {
			return runtime.ShuffleRecord{}, fmt.Errorf("injected failure upstream at %s", v)
		}
		return runtime.ShuffleRecord{Partition: shufflePartitionOf(v, partitions), Value: []byte(v)}, nil
	}).UID("to-shuffle")
	sh.Sink(recs, channel, partitions)
	back := sh.Source(env, channel, partitions, keyGroupOwner(partitions))
	tagged := runtime.ProcessStream(back, func(ctx *runtime.ProcessContext[string], r runtime.ShuffleRecord) error {
		v := string(r.Value)
		if fail != nil && fail("down", v) {
			return fmt.Errorf("injected failure downstream at %s", v)
		}
		ctx.Collect(fmt.Sprintf("%s p%d s%d", v, r.Partition, ctx.SubtaskIndex()))
		return nil
	}).UID("tag")
	out, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithDeliveryGuarantee(ExactlyOnce), WithTransactionalIDPrefix("out"))
	if err != nil {
		t.Fatal(err)
	}
	runtime.SinkTo(tagged, connector.Sink[string](out)).UID("out")
}

// runUntilVisible runs env until a read_committed consumer of "out" sees
// want records, then stops the job gracefully.
func runUntilVisible(t *testing.T, env *runtime.Environment, seeds []string, want int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "shuffle") }()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("the job ended before its output was visible: %v", err)
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("output not visible within 90s")
		case <-time.After(50 * time.Millisecond):
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs, err := committed.Visible(rctx, seeds, "out", 20*time.Millisecond)
		rcancel()
		if err != nil {
			t.Fatalf("read out: %v", err)
		}
		if len(recs) >= want {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("execute: %v", err)
	}
}

// checkShuffleOutput checks the rules of runtime.Shuffle on what a
// read_committed consumer sees: every input value once in the shuffle
// topic, at its partition; every value once in the output, read by the
// subtask owner gives its partition at parallelism par.
func checkShuffleOutput(t *testing.T, seeds []string, channel string, n, partitions, par int) {
	t.Helper()
	owner := keyGroupOwner(partitions)
	inShuffle := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, ShuffleTopic(channel), 30*time.Second) {
		v := string(r.Value)
		inShuffle[v]++
		if want := shufflePartitionOf(v, partitions); r.Partition != want {
			t.Errorf("%s in partition %d of the shuffle topic, want %d", v, r.Partition, want)
		}
	}
	got := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, "out", 30*time.Second) {
		var v string
		var p, s int
		if _, err := fmt.Sscanf(string(r.Value), "%s p%d s%d", &v, &p, &s); err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		got[v]++
		if want := owner(p, par); s != want {
			t.Errorf("%s of partition %d read by subtask %d, its owner is %d", v, p, s, want)
		}
		if want := shufflePartitionOf(v, partitions); int32(p) != want {
			t.Errorf("%s arrived from partition %d, want %d", v, p, want)
		}
	}
	for i := range n {
		v := fmt.Sprintf("v%04d", i)
		if inShuffle[v] != 1 {
			t.Errorf("%s %d times in the shuffle topic (read_committed), want once", v, inShuffle[v])
		}
		if got[v] != 1 {
			t.Errorf("%s %d times in the output (read_committed), want once", v, got[v])
		}
	}
	if len(inShuffle) != n || len(got) != n {
		t.Errorf("%d distinct values in the shuffle topic and %d in the output, want %d", len(inShuffle), len(got), n)
	}
}

// The rules of runtime.Shuffle, on a job at parallelism 2 with
// checkpoints that writes a bounded input through the Kafka shuffle and
// reads it back: every record crosses once, in the partition it was
// given, and reaches the subtask the owner rule names; with a failure on
// each side after a checkpoint completed, the job restarts and a
// read_committed consumer still sees every record once, in the shuffle
// topic and in the output.
func TestShuffleDeliversEveryRecordOnceToItsOwner(t *testing.T) {
	const n, partitions, par = 400, 8, 2
	for _, withFailures := range []bool{false, true} {
		t.Run(fmt.Sprintf("failures=%v", withFailures), func(t *testing.T) {
			seeds, _ := fakeTopic(t, 3, n)
			sh, err := NewShuffle(WithBrokers(seeds...), WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			var checkpoints, failures atomic.Int64
			var failedUp, failedDown atomic.Bool
			var seenUp, seenDown atomic.Int64
			var fail func(side, v string) bool
			if withFailures {
				fail = func(side, v string) bool {
					switch side {
					case "up":
						// Slow enough that checkpoints complete while
						// the input is read.
						time.Sleep(500 * time.Microsecond)
						return seenUp.Add(1) >= n/3 && checkpoints.Load() > 0 && failedUp.CompareAndSwap(false, true) && failures.Add(1) > 0
					default:
						return seenDown.Add(1) >= n/2 && checkpoints.Load() > 1 && failedDown.CompareAndSwap(false, true) && failures.Add(1) > 0
					}
				}
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(par),
				runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
				runtime.WithRestartStrategy(runtime.FixedDelayRestart(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger()),
				runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { checkpoints.Add(1) }}))
			shuffleJob(t, env, seeds, sh, "job.edge", partitions, fail)
			runUntilVisible(t, env, seeds, n)
			if withFailures && failures.Load() != 2 {
				t.Fatalf("%d failures injected, want 2 (one on each side)", failures.Load())
			}
			checkShuffleOutput(t, seeds, "job.edge", n, partitions, par)
		})
	}
}
