package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
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
		runtime.SinkTo(runtime.FromSource(env, src, "kafka", runtime.NoWatermarks[string]()), sink)
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

// An exactly-once sink on the plain SinkTo path is refused before the job
// runs: its transactions would never be committed.
func TestExactlyOnceSinkNeedsSinkToTwoPhase(t *testing.T) {
	src, err := NewSource(StringValues(), WithBrokers("127.0.0.1:1"), WithTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers("127.0.0.1:1"), WithDeliveryGuarantee(ExactlyOnce), WithTransactionalIDPrefix("p"))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment()
	runtime.SinkTo(runtime.FromSource(env, src, "in", runtime.NoWatermarks[string]()), connector.Sink[string](sink))
	if err := env.Execute(context.Background(), "wrong path"); !errors.Is(err, runtime.ErrInvalidGraph) {
		t.Fatalf("Execute: %v, want ErrInvalidGraph", err)
	}
}
