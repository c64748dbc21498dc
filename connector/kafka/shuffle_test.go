package kafka

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// shuffleTopics names what a shuffle test job uses on its cluster: the
// input and output topics and the channel, unique on a shared broker.
type shuffleTopics struct {
	seeds            []string
	in, out, channel string
}

// newShuffleTopics makes an input topic of 3 partitions holding values
// v0000 to v<n-1> and an output topic, with names unique to the test.
func newShuffleTopics(t *testing.T, c cluster, n int) shuffleTopics {
	t.Helper()
	id := time.Now().UnixNano()
	st := shuffleTopics{seeds: c.seeds, in: fmt.Sprintf("in-%d", id), out: fmt.Sprintf("out-%d", id), channel: fmt.Sprintf("job-%d.edge", id)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{st.in, st.out} {
		if resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	st.produce(t, cl, 0, n)
	return st
}

// produce writes values v<from> to v<to-1> to the input, round robin
// over its partitions.
func (st shuffleTopics) produce(t *testing.T, cl *kgo.Client, from, to int) {
	t.Helper()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Topic: st.in, Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%04d", i)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// shuffleJob builds input -> shuffle.Sink, shuffle.Source -> tag ->
// exactly-once Kafka sink into the output, each output value
// "vNNNN pP sS" naming the shuffle partition P it crossed and the subtask
// S that read it. The input is read with inOpts. fail, when set, is
// called by both sides for every record and fails the record when it
// returns true.
func shuffleJob(t *testing.T, env *runtime.Environment, st shuffleTopics, sh *Shuffle, partitions int, fail func(side string, v string) bool, inOpts ...SourceOption) {
	t.Helper()
	seeds, channel := st.seeds, st.channel
	src, err := NewSource(StringValues(), append([]SourceOption{WithBrokers(seeds...), WithTopics(st.in), WithLogger(quietLogger())}, inOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	in := runtime.FromSource(env, src, "in").UID("in")
	recs := runtime.Map(in, func(v string) (connector.ShuffleRecord, error) {
		if fail != nil && fail("up", v) {
			return connector.ShuffleRecord{}, fmt.Errorf("injected failure upstream at %s", v)
		}
		return connector.ShuffleRecord{Partition: shufflePartitionOf(v, partitions), Value: []byte(v)}, nil
	}).UID("to-shuffle")
	sh.Sink(recs, channel, partitions)
	back := sh.Source(env, channel, partitions, keyGroupOwner(partitions))
	tagged := runtime.Process(back, func(ctx *runtime.ProcessContext[string], r connector.ShuffleRecord) error {
		v := string(r.Value)
		if fail != nil && fail("down", v) {
			return fmt.Errorf("injected failure downstream at %s", v)
		}
		ctx.Collect(fmt.Sprintf("%s p%d s%d", v, r.Partition, ctx.SubtaskIndex()))
		return nil
	}).UID("tag")
	out, err := NewSink(KeyValueSerializer(st.out, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce(st.out), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	runtime.SinkTo(tagged, connector.Sink[string](out)).UID("out")
}

// runUntilVisible runs env until a read_committed consumer of the output
// sees want records, then stops the job gracefully.
func runUntilVisible(t *testing.T, env *runtime.Environment, st shuffleTopics, want int) {
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
		// This read only decides when to stop; the checks read after the
		// job stopped. A read that does not settle while the job writes
		// and restarts (it has once, on the real broker under load) is
		// tried again.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs, err := committed.Visible(rctx, st.seeds, st.out, 20*time.Millisecond)
		rcancel()
		if err != nil {
			t.Logf("read out while the job runs: %v; trying again", err)
			continue
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
// subtask owner gives its partition at the parallelism parOf gives the
// value's index.
func checkShuffleOutput(t *testing.T, st shuffleTopics, n, partitions int, parOf func(i int) int) {
	t.Helper()
	owner := keyGroupOwner(partitions)
	inShuffle := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, st.seeds, ShuffleTopic(st.channel), 30*time.Second) {
		v := string(r.Value)
		inShuffle[v]++
		if want := shufflePartitionOf(v, partitions); r.Partition != want {
			t.Errorf("%s in partition %d of the shuffle topic, want %d", v, r.Partition, want)
		}
	}
	got := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, st.seeds, st.out, 30*time.Second) {
		var v string
		var p, s int
		if _, err := fmt.Sscanf(string(r.Value), "%s p%d s%d", &v, &p, &s); err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		got[v]++
		i, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
		if err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		if want := owner(p, parOf(i)); s != want {
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
// topic and in the output. On kfake and on the real broker.
func TestShuffleDeliversEveryRecordOnceToItsOwner(t *testing.T) {
	const n, partitions, par = 400, 8, 2
	onClusters(t, func(t *testing.T, c cluster) {
		for _, withFailures := range []bool{false, true} {
			t.Run(fmt.Sprintf("failures=%v", withFailures), func(t *testing.T) {
				st := newShuffleTopics(t, c, n)
				sh, err := NewShuffle(WithBrokers(st.seeds...), WithLogger(quietLogger()))
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
					runtime.WithRestartStrategy(restart.FixedDelay(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger()),
					runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { checkpoints.Add(1) }}))
				shuffleJob(t, env, st, sh, partitions, fail, WithBounded(LatestOffsets()))
				runUntilVisible(t, env, st, n)
				if withFailures && failures.Load() != 2 {
					t.Fatalf("%d failures injected, want 2 (one on each side)", failures.Load())
				}
				checkShuffleOutput(t, st, n, partitions, func(int) int { return par })
			})
		}
	})
}

// The shuffle's source assigns splits by the owner rule it is given, not
// by ownerOf, on every path of the enumerator: pending splits of a
// restored checkpoint handed to readers as they register, the splits of a
// failed subtask given back (region restart), and splits given back by
// the engine when the job restores at another parallelism
// (WithRescaledSplitsToEnumerator); a rule answering outside the
// parallelism fails the source.
func TestShuffleEnumeratorAssignsByOwnerRule(t *testing.T) {
	const partitions = 8
	sh, err := NewShuffle(WithBrokers("127.0.0.1:1"), WithLogger(quietLogger())) // never dialled: Start is not called
	if err != nil {
		t.Fatal(err)
	}
	topic := ShuffleTopic("job.edge")
	split := func(p int32) Split { return NewSplit(TopicPartition{topic, p}, int64(100+p), NoStoppingOffset) }
	rule := keyGroupOwner(partitions)
	differs := false
	for p := range partitions {
		differs = differs || rule(p, 2) != ownerOf(TopicPartition{topic, int32(p)}, 2)
	}
	if !differs {
		t.Fatal("the test's owner rule agrees with ownerOf on every partition: it would show nothing")
	}
	// check asserts that every split assigned went to its owner at par,
	// with the offset it had, and that want splits were assigned.
	check := func(t *testing.T, ctx *enumCtx, par, want int) {
		t.Helper()
		n := 0
		for sub, ss := range ctx.assigned {
			for _, s := range ss {
				n++
				if o := rule(int(s.Partition), par); o != sub {
					t.Errorf("%s went to subtask %d, the owner rule gives it to %d", s.TopicPartition, sub, o)
				}
				if s.StartingOffset != int64(100+s.Partition) {
					t.Errorf("%s starts at %d, want its restored offset %d", s.TopicPartition, s.StartingOffset, 100+s.Partition)
				}
			}
		}
		if n != want {
			t.Fatalf("%d splits assigned, want %d: %v", n, want, ctx.assigned)
		}
	}
	newEnum := func(ctx *enumCtx, st EnumeratorState, owner func(int, int) int) *enumerator {
		src, err := sh.newSource("job.edge", partitions, owner)
		if err != nil {
			t.Fatal(err)
		}
		return newEnumerator(&src.cfg, ctx, st)
	}
	register := func(t *testing.T, e *enumerator, ctx *enumCtx, subs ...int) {
		t.Helper()
		for _, sub := range subs {
			ctx.readers[sub] = connector.ReaderInfo{SubtaskIndex: sub}
			if err := e.AddReader(sub); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("restore and region restart", func(t *testing.T) {
		// Partitions 0 and 1 are in the readers' checkpoint; 2 to 7 were
		// pending when it was taken.
		st := EnumeratorState{InitialDiscoveryDone: true, Assigned: []TopicPartition{{topic, 0}, {topic, 1}}}
		for p := int32(2); p < partitions; p++ {
			st.Pending = append(st.Pending, split(p))
		}
		ctx := newEnumCtx(2)
		e := newEnum(ctx, st, rule)
		register(t, e, ctx, 1, 0)
		check(t, ctx, 2, 6)
		// Subtask 1 fails; its splits come back and go to it again, and
		// to no other subtask, when it registers anew.
		back := ctx.assigned[1]
		ctx.assigned = map[int][]Split{}
		delete(ctx.readers, 1)
		if err := e.AddSplitsBack(back, 1); err != nil {
			t.Fatal(err)
		}
		if err := e.AddReader(0); err != nil { // a registration of another subtask meanwhile
			t.Fatal(err)
		}
		if len(ctx.assigned) != 0 {
			t.Fatalf("splits of failed subtask 1 went elsewhere: %v", ctx.assigned)
		}
		register(t, e, ctx, 1)
		check(t, ctx, 2, len(back))
	})

	t.Run("rescale to 4 through the enumerator", func(t *testing.T) {
		// The engine restores the enumerator, then gives it back the
		// splits of every old subtask (oldSubtask may be beyond the
		// new parallelism).
		st := EnumeratorState{InitialDiscoveryDone: true}
		old := map[int][]Split{}
		for p := int32(0); p < partitions; p++ {
			st.Assigned = append(st.Assigned, TopicPartition{topic, p})
			o := rule(int(p), 2)
			old[o] = append(old[o], split(p))
		}
		ctx := newEnumCtx(4)
		e := newEnum(ctx, st, rule)
		for sub, ss := range old {
			if err := e.AddSplitsBack(ss, sub); err != nil {
				t.Fatal(err)
			}
		}
		register(t, e, ctx, 3, 2, 1, 0)
		check(t, ctx, 4, partitions)
	})

	t.Run("rule outside the parallelism", func(t *testing.T) {
		st := EnumeratorState{InitialDiscoveryDone: true, Pending: []Split{split(0)}}
		ctx := newEnumCtx(2)
		e := newEnum(ctx, st, func(int, int) int { return 2 })
		ctx.readers[0] = connector.ReaderInfo{}
		err := e.AddReader(0)
		if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "subtask 2, outside [0, 2)") {
			t.Fatalf("AddReader: %v, want an error wrapping connector.ErrInvalidConfiguration naming subtask 2 outside [0, 2)", err)
		}
	})
}

// A shuffle topic that exists with another number of partitions than the
// channel needs (a topic left by a job with another max parallelism)
// fails the job without restarts, from the writing side and from the
// reading side, naming both numbers.
func TestShuffleTopicPartitionMismatchFailsTheJob(t *testing.T) {
	for _, side := range []string{"sink", "source"} {
		t.Run(side, func(t *testing.T) {
			seeds, _ := fakeTopic(t, 1, 10)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 4, 1, nil, ShuffleTopic("job.edge")); err != nil || resp.Err != nil {
				t.Fatalf("create topic: %v %v", err, resp.Err)
			}
			sh, err := NewShuffle(WithBrokers(seeds...), WithLogger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			var restarts atomic.Int64
			env := runtime.NewEnvironment(runtime.WithParallelism(2),
				runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
				runtime.WithRestartStrategy(restart.FixedDelay(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger()),
				runtime.WithJobListener(runtime.JobListener{Restarting: func(int, error) { restarts.Add(1) }}))
			if side == "sink" {
				src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("in"), WithBounded(LatestOffsets()))
				if err != nil {
					t.Fatal(err)
				}
				recs := runtime.Map(runtime.FromSource(env, src, "in").UID("in"), func(v string) (connector.ShuffleRecord, error) {
					return connector.ShuffleRecord{Partition: 0, Value: []byte(v)}, nil
				})
				sh.Sink(recs, "job.edge", 8)
			} else {
				runtime.SinkTo(runtime.Map(sh.Source(env, "job.edge", 8, keyGroupOwner(8)), func(r connector.ShuffleRecord) (string, error) {
					return string(r.Value), nil
				}), connector.Sink[string](&collectSink{got: map[string]int{}}))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err = env.Execute(ctx, "mismatch")
			if ctx.Err() != nil {
				t.Fatal("the job ran on")
			}
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), `topic "job.edge.shuffle" has 4 partitions, and the channel needs 8`) {
				t.Fatalf("Execute: %v, want an error wrapping connector.ErrInvalidConfiguration naming 4 and 8 partitions", err)
			}
			if n := restarts.Load(); n != 0 {
				t.Fatalf("%d restarts; a wrong partition count must not restart the job", n)
			}
		})
	}
}

// Topic creation is idempotent and safe when several processes start at
// once: every one of them succeeds, whether it created the topic, lost
// the race (TOPIC_ALREADY_EXISTS) or found it made, and the topic has the
// channel's partitions; a later start with another count is refused, and
// so are channels that make no topic name. On kfake and on the real
// broker.
func TestShuffleTopicCreationIsSafeUnderConcurrentStarts(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		seeds := c.seeds
		channel := fmt.Sprintf("job-%d.edge", time.Now().UnixNano())
		sh, err := NewShuffle(WithBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		const partitions = 16
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		concurrentStarts(t, seeds, 8, func(cl *kgo.Client) error {
			return sh.prepare(channel, partitions)(ctx, cl, Security{})
		})
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if n, err := shuffleTopicPartitions(ctx, cl, ShuffleTopic(channel)); err != nil || n != partitions {
			t.Fatalf("topic has %d partitions (%v), want %d", n, err, partitions)
		}
		err = sh.prepare(channel, 12)(ctx, cl, Security{})
		if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "has 16 partitions, and the channel needs 12") {
			t.Fatalf("prepare with 12 partitions: %v, want the mismatch refused", err)
		}
		for _, tc := range []struct {
			channel    string
			partitions int
			want       string
		}{
			{"", 8, "empty channel name"},
			{"job/edge", 8, `has '/'`},
			{"job:edge", 8, `has ':'`},
			{strings.Repeat("x", 242), 8, "above Kafka's 249"},
			{"job.edge", 0, "with 0 partitions"},
		} {
			err := sh.prepare(tc.channel, tc.partitions)(ctx, cl, Security{})
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("channel %q with %d partitions: %v, want an invalid configuration saying %q", tc.channel, tc.partitions, err, tc.want)
			}
		}
	})
}

// NewShuffle checks its options once, as NewSource and NewSink do,
// including those passed to its sinks and sources.
func TestNewShuffleRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []ShuffleOption
		want string
	}{
		{"no brokers", nil, "no seed brokers"},
		{"broker without port", []ShuffleOption{WithBrokers("localhost")}, "has no port"},
		{"replication 0", []ShuffleOption{WithBrokers("localhost:9092"), WithShuffleReplicationFactor(0)}, "replication factor 0"},
		{"sink option", []ShuffleOption{WithBrokers("localhost:9092"), WithShuffleSinkOptions(WithTransactionalIDPoolSize(1))}, "pool size 1 is below 2"},
		{"source option", []ShuffleOption{WithBrokers("localhost:9092"), WithShuffleSourceOptions(WithCloseCommitTimeout(-time.Second))}, "negative close commit timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewShuffle(tc.opts...)
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewShuffle: %v, want an invalid configuration saying %q", err, tc.want)
			}
		})
	}
	if _, err := NewShuffle(WithBrokers("localhost:9092"), WithShuffleReplicationFactor(3),
		WithShuffleTopicConfigs(map[string]string{"retention.ms": "-1"})); err != nil {
		t.Fatalf("NewShuffle with good options: %v", err)
	}
}

// A job restored at another parallelism keeps the owner rule: with
// runtime.WithRescaledSplitsToEnumerator the shuffle's splits go back to
// the enumerator, which assigns them by the rule at the new parallelism,
// and every record, before and after the restore, reaches the output
// once; without it the engine would deal them out round-robin, and the
// reader refuses a split the rule gives another subtask, failing the job
// without restarts and naming the option.
func TestShuffleRestoredAtAnotherParallelismKeepsTheOwnerRule(t *testing.T) {
	const n1, n2, partitions = 200, 200, 8
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := newShuffleTopics(t, cluster{seeds: f.ListenAddrs(), fake: f}, n1)
	seeds := st.seeds
	dir := t.TempDir()
	sh, err := NewShuffle(WithBrokers(seeds...), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	newEnv := func(par int, opts ...runtime.Option) *runtime.Environment {
		return runtime.NewEnvironment(append([]runtime.Option{runtime.WithParallelism(par), runtime.WithCheckpointDir(dir),
			runtime.WithCheckpointInterval(20 * time.Millisecond), runtime.WithCheckpointTimeout(10 * time.Second),
			runtime.WithRestartStrategy(restart.FixedDelay(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger())}, opts...)...)
	}
	env := newEnv(2)
	shuffleJob(t, env, st, sh, partitions, nil)
	runUntilVisible(t, env, st, n1)

	// The owners of partitions at 3 differ from those at 2 and from a
	// round-robin deal, so the restore without the option meets a split
	// of another subtask.
	var restarts atomic.Int64
	env = newEnv(3, runtime.WithJobListener(runtime.JobListener{Restarting: func(int, error) { restarts.Add(1) }}))
	shuffleJob(t, env, st, sh, partitions, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = env.Execute(ctx, "shuffle")
	if ctx.Err() != nil {
		t.Fatal("the job restored at parallelism 3 without WithRescaledSplitsToEnumerator ran on")
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "runtime.WithRescaledSplitsToEnumerator") {
		t.Fatalf("Execute: %v, want an invalid configuration naming runtime.WithRescaledSplitsToEnumerator", err)
	}
	if restarts.Load() != 0 {
		t.Fatalf("%d restarts, want none", restarts.Load())
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st.produce(t, cl, n1, n1+n2)
	env = newEnv(3, runtime.WithRescaledSplitsToEnumerator())
	shuffleJob(t, env, st, sh, partitions, nil)
	runUntilVisible(t, env, st, n1+n2)
	checkShuffleOutput(t, st, n1+n2, partitions, func(i int) int {
		if i < n1 {
			return 2
		}
		return 3
	})
}

// What a shuffle sink writes is visible to the reading side only once
// committed: while the job still holds its last record, the records
// written so far are in the topic (a read_uncommitted consumer sees
// them) and a read_committed consumer, as the shuffle's source reads,
// sees none; after the end of input commits the transaction it sees
// every record once.
func TestShuffleRecordsVisibleOnlyAfterCommit(t *testing.T) {
	const n, partitions = 50, 4
	seeds, _ := fakeTopic(t, 1, n)
	sh, err := NewShuffle(WithBrokers(seeds...), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("in"), WithBounded(LatestOffsets()), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var seen atomic.Int64
	// No checkpoints: a bounded job commits its one transaction at the
	// end of input, which the last record holds back.
	env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithLogger(quietLogger()))
	recs := runtime.Map(runtime.FromSource(env, src, "in").UID("in"), func(v string) (connector.ShuffleRecord, error) {
		if seen.Add(1) == n {
			<-release
		}
		return connector.ShuffleRecord{Partition: shufflePartitionOf(v, partitions), Value: []byte(v)}, nil
	})
	sh.Sink(recs, "job.edge", partitions)
	done := make(chan error, 1)
	go func() { done <- env.Execute(context.Background(), "visibility") }()

	uncommitted, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(ShuffleTopic("job.edge")),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer uncommitted.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for got := 0; got < n-1; {
		fs := uncommitted.PollFetches(ctx)
		if ctx.Err() != nil {
			close(release)
			t.Fatalf("%d of the %d records written before the last not in the topic", n-1-got, n-1)
		}
		got += fs.NumRecords()
	}
	visible, err := committed.Visible(ctx, seeds, ShuffleTopic("job.edge"), 100*time.Millisecond)
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	if len(visible) != 0 {
		close(release)
		t.Fatalf("a read_committed consumer sees %d records of a transaction not committed yet", len(visible))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("execute: %v", err)
	}
	got := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, ShuffleTopic("job.edge"), 30*time.Second) {
		got[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%04d", i); got[v] != 1 {
			t.Errorf("%s %d times after the commit, want once", v, got[v])
		}
	}
}

// A principal the brokers do not let create the missing topic gets an
// *AuthorizationError naming Create on the topic (a configuration error:
// no restart grants the right), and one that may not describe it, naming
// Describe.
func TestShuffleTopicRefusedRightIsAuthorizationError(t *testing.T) {
	for _, tc := range []struct {
		key int16
		op  string
	}{
		{kmsg.CreateTopics.Int16(), "Create"},
		{kmsg.Metadata.Int16(), "Describe"},
	} {
		t.Run(tc.op, func(t *testing.T) {
			f, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(f.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			sh, err := NewShuffle(WithBrokers(f.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			// Refuse only requests about the shuffle topic: the client's
			// own metadata requests for brokers pass.
			f.ControlKey(tc.key, func(req kmsg.Request) (kmsg.Response, error, bool) {
				f.KeepControl()
				switch r := req.(type) {
				case *kmsg.CreateTopicsRequest:
					resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
					for _, t := range r.Topics {
						rt := kmsg.NewCreateTopicsResponseTopic()
						rt.Topic, rt.ErrorCode = t.Topic, kerr.TopicAuthorizationFailed.Code
						resp.Topics = append(resp.Topics, rt)
					}
					return resp, nil, true
				case *kmsg.MetadataRequest:
					if len(r.Topics) != 1 || r.Topics[0].Topic == nil || *r.Topics[0].Topic != ShuffleTopic("job.edge") {
						return nil, nil, false
					}
					resp := r.ResponseKind().(*kmsg.MetadataResponse)
					rt := kmsg.NewMetadataResponseTopic()
					rt.Topic, rt.ErrorCode = r.Topics[0].Topic, kerr.TopicAuthorizationFailed.Code
					resp.Topics = append(resp.Topics, rt)
					return resp, nil, true
				}
				return nil, nil, false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = sh.prepare("job.edge", 8)(ctx, cl, Security{})
			var ae *AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("prepare: %v, want an *AuthorizationError", err)
			}
			if ae.Resource != ResourceTopic || ae.Name != ShuffleTopic("job.edge") || ae.Operation != tc.op {
				t.Fatalf("the error names %s on %s %q, want %s on topic %q", ae.Operation, ae.Resource, ae.Name, tc.op, ShuffleTopic("job.edge"))
			}
		})
	}
}

// A record crosses the shuffle with its event timestamp, and one without
// a timestamp arrives without one: Kafka stamps every record, and the
// producer's clock must not become the record's event time.
func TestShuffleKeepsEventTimestamps(t *testing.T) {
	const n, partitions = 40, 4
	seeds, _ := fakeTopic(t, 2, n)
	// The input's timestamps, by value.
	want := map[string]int64{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, "in", 30*time.Second) {
		want[string(r.Value)] = r.Timestamp.UnixMilli()
	}
	sh, err := NewShuffle(WithBrokers(seeds...), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics("in"), WithBounded(LatestOffsets()), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := datagen.NewSource(func(i int64, _ *rand.Rand) string { return fmt.Sprintf("g%04d", i) }, datagen.WithCount(n))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quietLogger()),
		runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second))
	toRec := func(v string) (connector.ShuffleRecord, error) {
		return connector.ShuffleRecord{Partition: int32(len(v) % partitions), Value: []byte(v)}, nil
	}
	sh.Sink(runtime.Map(runtime.FromSource(env, src, "in").UID("in"), toRec).UID("in-rec"), "job.stamped", partitions)
	sh.Sink(runtime.Map(runtime.FromSource(env, gen, "gen").UID("gen"), toRec).UID("gen-rec"), "job.unstamped", partitions)
	var mu sync.Mutex
	got := map[string]int64{}
	all := make(chan struct{})
	for _, ch := range []string{"job.stamped", "job.unstamped"} {
		runtime.SinkTo(runtime.Process(sh.Source(env, ch, partitions, keyGroupOwner(partitions)),
			func(ctx *runtime.ProcessContext[string], r connector.ShuffleRecord) error {
				mu.Lock()
				defer mu.Unlock()
				got[string(r.Value)] = ctx.Timestamp()
				if len(got) == 2*n {
					select {
					case <-all:
					default:
						close(all)
					}
				}
				return nil
			}).UID("read-"+ch), connector.Sink[string](&collectSink{got: map[string]int{}})).UID("collect-" + ch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "timestamps") }()
	select {
	case <-all:
	case err := <-done:
		t.Fatalf("the job ended first: %v", err)
	case <-time.After(90 * time.Second):
		t.Error("not every record arrived within 90s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for v, ts := range want {
		if got[v] != ts {
			t.Errorf("%s arrived with timestamp %d, it was written with %d", v, got[v], ts)
		}
	}
	for i := range n {
		if v := fmt.Sprintf("g%04d", i); got[v] != connector.NoTimestamp {
			t.Errorf("%s had no timestamp and arrived with %d", v, got[v])
		}
	}
}

// The start of a shuffle returns once the topic is there for the client
// that started it: the source's enumerator lists the topic right after,
// from the client's metadata cache, and a start that returned as soon as
// CreateTopics answered made that listing fail with
// UNKNOWN_TOPIC_OR_PARTITION, and the slot restart, on a fresh job.
func TestShuffleTopicIsListedOnceItsStartReturns(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		seeds := c.seeds
		channel := fmt.Sprintf("job-%d.listed", time.Now().UnixNano())
		sh, err := NewShuffle(WithBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		const partitions = 16
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// As the enumerator's client: metadata cached up to 5s.
		concurrentStarts(t, seeds, 8, func(cl *kgo.Client) error {
			if err := sh.prepare(channel, partitions)(ctx, cl, Security{}); err != nil {
				return err
			}
			topics, err := kadm.NewClient(cl).ListTopics(ctx, ShuffleTopic(channel))
			if err != nil {
				return err
			}
			td := topics[ShuffleTopic(channel)]
			if td.Err == nil && len(td.Partitions) != partitions {
				return fmt.Errorf("listed with %d partitions", len(td.Partitions))
			}
			return td.Err
		}, kgo.MetadataMinAge(5*time.Second))
	})
}

// concurrentStarts runs start n times at once, each with a client of its
// own (as in separate processes, created beforehand so that the requests
// go out together), and fails the test with the first error.
func concurrentStarts(t *testing.T, seeds []string, n int, start func(cl *kgo.Client) error, opts ...kgo.Opt) {
	t.Helper()
	errs := make(chan error, n)
	var ready sync.WaitGroup
	ready.Add(n)
	for range n {
		go func() {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
			if err != nil {
				ready.Done()
				errs <- err
				return
			}
			defer cl.Close()
			ready.Done()
			ready.Wait()
			errs <- start(cl)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a concurrent start failed: %v", err)
		}
	}
}

// The start of a shuffle returns once every partition of a topic it
// created is led by the broker that metadata names: a writer's first
// transaction goes out right after. A start that returned as soon as
// metadata listed the partitions left the new leaders to take them up
// after it, and the first produce to a partition not yet led is refused
// (NOT_LEADER_OR_FOLLOWER), which franz-go answers with a metadata
// refresh at most every MetadataMinAge (5s): every fresh distributed job
// waited about 5s for its first checkpoint. The check is one round of
// partitionsLed, which sends ListOffsets to each leader straight, without
// the client's retries, so a partition not yet led shows.
func TestShuffleTopicIsLedOnEveryPartitionOnceItsStartReturns(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		channel := fmt.Sprintf("job-%d.led", time.Now().UnixNano())
		sh, err := NewShuffle(WithBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		const partitions = 128 // a channel of a job of 128 slots: many partitions made at once
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := sh.prepare(channel, partitions)(ctx, cl, Security{}); err != nil {
			t.Fatal(err)
		}
		topic := ShuffleTopic(channel)
		if n, err := shuffleTopicPartitions(ctx, cl, topic); err != nil || n != partitions {
			t.Fatalf("the topic has %d partitions (%v), want %d", n, err, partitions)
		}
		if err := partitionsLed(ctx, cl, topic); err != nil {
			t.Fatalf("a partition does not answer from the leader metadata names: %v", err)
		}
	})
}
