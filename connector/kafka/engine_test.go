package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// collectSink gathers every element written by any subtask.
type collectSink struct {
	mu  sync.Mutex
	got map[string]int
}

func (s *collectSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[string], error) {
	return collectWriter{s}, nil
}

type collectWriter struct{ s *collectSink }

func (w collectWriter) Write(v string, _ connector.WriteContext) error {
	w.s.mu.Lock()
	w.s.got[v]++
	w.s.mu.Unlock()
	return nil
}
func (collectWriter) Flush(bool) error { return nil }
func (collectWriter) Close() error     { return nil }

// A bounded KafkaSource run by the engine reads every record of every
// partition exactly once and ends at the end offsets it found: on kfake and
// on the real broker, with transactional input that includes an aborted
// transaction.
func TestSourceInEngineBoundedExactlyOnce(t *testing.T) {
	onClusters(t, func(t *testing.T, c cluster) {
		ctx := context.Background()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.TransactionalID(fmt.Sprintf("in-%d", time.Now().UnixNano())),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		topic := fmt.Sprintf("src-%d", time.Now().UnixNano())
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic: %v %v", err, resp.Err)
		}
		const perTxn, txns = 50, 6
		want := map[string]bool{}
		for x := 0; x < txns; x++ {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < perTxn; i++ {
				v := strconv.Itoa(x*perTxn + i)
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(v)}, nil)
				if x != 3 {
					want[v] = true
				}
			}
			end := kgo.TryCommit
			if x == 3 {
				end = kgo.TryAbort
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
		kafkatest.ReadCommitted(t, c.seeds, topic, 30*time.Second) // markers written

		src, err := NewSource(StringValues(), WithBrokers(c.seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
		if err != nil {
			t.Fatal(err)
		}
		sink := &collectSink{got: map[string]int{}}
		env := runtime.NewEnvironment(runtime.WithParallelism(2))
		runtime.SinkTo(runtime.FromSource(env, src, "kafka"), sink)
		runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := env.Execute(runCtx, "bounded kafka"); err != nil {
			t.Fatalf("execute: %v", err)
		}
		if runCtx.Err() != nil {
			t.Fatal("the bounded job did not end by itself")
		}
		for v := range want {
			if sink.got[v] != 1 {
				t.Fatalf("record %s read %d times", v, sink.got[v])
			}
		}
		if len(sink.got) != len(want) {
			t.Fatalf("read %d distinct records, want %d (aborted ones must not appear)", len(sink.got), len(want))
		}
	})
}

// runtime.SinkTo runs an exactly-once Kafka sink with its committer: a job
// whose tasks fail after checkpoints have committed transactions, and that
// restarts from them, writes every input record once into the output as a
// read_committed consumer sees it, although records were read again after
// the restarts. The same job at-least-once, also through SinkTo, runs the
// sink as a plain one: nothing is missing, and records read again may be
// written twice.
func TestSinkToExactlyOnceKafkaSinkWritesEveryRecordOnce(t *testing.T) {
	const n = 600
	for _, g := range []DeliveryGuarantee{ExactlyOnce, AtLeastOnce} {
		// run is one job on fresh topics; it checks the output and says
		// whether a restart read records again, which the job's timing
		// does not guarantee (a failure right after a checkpoint replays
		// nothing), so a run without one is repeated, up to three times.
		run := func(t *testing.T) (replayed bool) {
			seeds, topic := fakeTopic(t, 3, n)
			src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
			if err != nil {
				t.Fatal(err)
			}
			sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
				WithBrokers(seeds...), withGuarantee(g, "sinkto"))
			if err != nil {
				t.Fatal(err)
			}
			// The map fails twice, at the 150th value ending in an even
			// and in an odd digit, each time after a checkpoint has
			// completed, so committed output precedes the restarts.
			var checkpoints atomic.Int64
			var seen [2]atomic.Int64
			var failed [2]atomic.Bool
			var failures, processed atomic.Int64
			env := runtime.NewEnvironment(runtime.WithParallelism(2),
				runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
				runtime.WithRestartStrategy(restart.FixedDelay(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger()),
				runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { checkpoints.Add(1) }}))
			in := runtime.FromSource(env, src, "in").UID("in")
			slow := runtime.Map(in, func(v string) (string, error) {
				k := int(v[len(v)-1]-'0') % 2
				if seen[k].Add(1) >= 150 && checkpoints.Load() > 0 && failed[k].CompareAndSwap(false, true) {
					failures.Add(1)
					return "", fmt.Errorf("injected failure at %s", v)
				}
				processed.Add(1)
				time.Sleep(100 * time.Microsecond)
				return v, nil
			}).UID("map")
			runtime.SinkTo(slow, connector.Sink[string](sink)).UID("out")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if err := env.Execute(ctx, "sinkto "+g.String()); err != nil {
				t.Fatal(err)
			}
			if failures.Load() == 0 {
				t.Fatalf("no failure injected (%d records processed)", processed.Load())
			}
			replayed = processed.Load() > n
			got := map[string]int{}
			for _, r := range kafkatest.ReadCommitted(t, seeds, "out", 30*time.Second) {
				got[string(r.Value)]++
			}
			var missing, dup int
			for i := range n {
				switch c := got[fmt.Sprintf("v%04d", i)]; {
				case c == 0:
					missing++
				case c > 1:
					dup++
				}
			}
			if missing > 0 || len(got) != n {
				t.Fatalf("%d of %d records missing, %d distinct values", missing, n, len(got))
			}
			if g == ExactlyOnce && dup > 0 {
				t.Fatalf("%d records written more than once through SinkTo with an exactly-once sink", dup)
			}
			return replayed
		}
		t.Run(g.String(), func(t *testing.T) {
			for attempt := 1; !run(t); attempt++ {
				if attempt == 3 {
					t.Fatalf("%d runs with failures injected and no record read again after a restart", attempt)
				}
				t.Logf("run %d: no record was read again after its restarts; running again", attempt)
			}
		})
	}
}

// An exactly-once sink through SinkTo in an unbounded job without
// checkpoints is refused by Execute before anything runs (the brokers
// here do not exist): its transactions would never be committed.
func TestExactlyOnceSinkToWithoutCheckpointsIsRefusedAtExecute(t *testing.T) {
	src, err := NewSource(StringValues(), WithBrokers("127.0.0.1:1"), WithTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers("127.0.0.1:1"), WithExactlyOnce("p"))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithLogger(quietLogger()))
	runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[string](sink))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = env.Execute(ctx, "no checkpoints")
	if ctx.Err() != nil {
		t.Fatal("the job ran instead of being refused")
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "runtime.WithCheckpointInterval") {
		t.Fatalf("Execute: %v, want an error wrapping connector.ErrInvalidConfiguration naming runtime.WithCheckpointInterval", err)
	}
}

// wrappedSink is a user's wrapper around a sink that passes on nothing but
// connector.Sink: it hides that the sink commits in two phases.
type wrappedSink[T any] struct{ inner connector.Sink[T] }

func (s wrappedSink[T]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	return s.inner.CreateWriter(ctx)
}

// An exactly-once Kafka sink makes records visible only through its
// committer. A wrapper that hides connector.TwoPhaseCapable makes
// runtime.SinkTo run it as a plain sink, without one: the job must fail,
// wrapping connector.ErrInvalidConfiguration and naming the cause, rather
// than end with nothing committed.
func TestExactlyOnceKafkaSinkRefusesToRunWithoutItsCommitter(t *testing.T) {
	const n = 50
	seeds, topic := fakeTopic(t, 2, n)
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithExactlyOnce("wrapped"))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(20*time.Millisecond),
		runtime.WithCheckpointTimeout(10*time.Second), runtime.WithLogger(quietLogger()))
	runtime.SinkTo(runtime.FromSource(env, src, "in").UID("in"), connector.Sink[string](wrappedSink[string]{sink})).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = env.Execute(ctx, "wrapped")
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "TwoPhaseCapable") {
		t.Fatalf("Execute: %v (%d records committed of %d), want an error wrapping connector.ErrInvalidConfiguration naming connector.TwoPhaseCapable",
			err, len(kafkatest.ReadCommitted(t, seeds, "out", 5*time.Second)), n)
	}
}
