package registry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kgo"
)

// letterSink keeps the dead letters every subtask writes.
type letterSink struct {
	mu      sync.Mutex
	letters []kafka.DeadLetter
}

func (s *letterSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[kafka.DeadLetter], error) {
	return s, nil
}
func (s *letterSink) Write(d kafka.DeadLetter, _ connector.WriteContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.letters = append(s.letters, d)
	return nil
}
func (s *letterSink) Flush(bool) error { return nil }
func (s *letterSink) Close() error     { return nil }

// checkBadRecordPolicies produces the good values, then the bad ones
// (keyed by a piece of the reason each must give), to a topic of an
// in-process Kafka, and reads them with deser under each bad-record
// policy of the source: by default the job fails with a
// *kafka.BadRecordError; WithSkipBadRecords passes the good records and
// drops the bad ones, each rejected once (the source counts them in
// splitflow_kafka_source_records_skipped_total, which lives as long as
// its reader); WithDeadLetterOutput passes the good records and sends each bad one,
// with its reason, to the side output.
func checkBadRecordPolicies[T any](t *testing.T, deser kafka.Deserializer[T], good [][]byte, bad map[string][]byte) {
	t.Helper()
	seeds, cl := kafkaCluster(t, "in")
	for i, b := range good {
		produce(t, cl, "in", int32(i%2), b)
	}
	for _, b := range bad {
		produce(t, cl, "in", 1, b)
	}
	for _, policy := range []string{"fail", "skip", "dead letters"} {
		t.Run(policy, func(t *testing.T) {
			opts := []kafka.SourceOption{kafka.WithBrokers(seeds...), kafka.WithTopics("in"), kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(quiet())}
			switch policy {
			case "skip":
				opts = append(opts, kafka.WithSkipBadRecords())
			case "dead letters":
				opts = append(opts, kafka.WithDeadLetterOutput("dead"))
			}
			var rejected atomic.Int64
			counted := kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) {
				v, err := deser.Deserialize(r)
				if err != nil {
					rejected.Add(1)
				}
				return v, err
			})
			src, err := kafka.NewSource[T](counted, opts...)
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quiet()),
				runtime.WithRestartStrategy(restart.None()))
			values := runtime.FromSource(env, src, "in")
			letters := &letterSink{}
			if policy == "dead letters" {
				dead := runtime.NewOutputTag[kafka.DeadLetter]("dead")
				values = values.DeclareSideOutputs(dead)
				runtime.SinkTo(runtime.SideOutput(values, dead), connector.Sink[kafka.DeadLetter](letters))
			}
			count := &countSink[T]{}
			runtime.SinkTo(values, connector.Sink[T](count))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = env.Execute(ctx, "bad records "+policy)
			if policy == "fail" {
				var bre *kafka.BadRecordError
				if !errors.As(err, &bre) || bre.Partition != 1 || !containsAny(err.Error(), bad) {
					t.Fatalf("Execute = %v; want a *kafka.BadRecordError of partition 1 giving one of the reasons", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if got := count.n.Load(); got != int64(len(good)) {
				t.Fatalf("%d good records reached the sink, want %d", got, len(good))
			}
			if policy == "skip" {
				if n := rejected.Load(); n != int64(len(bad)) {
					t.Fatalf("%d records rejected and skipped, want %d", n, len(bad))
				}
				return
			}
			if len(letters.letters) != len(bad) {
				t.Fatalf("%d dead letters, want %d", len(letters.letters), len(bad))
			}
			reasons := map[string]bool{}
			for _, l := range letters.letters {
				for want := range bad {
					if strings.Contains(l.Err, want) {
						reasons[want] = true
					}
				}
			}
			if len(reasons) != len(bad) {
				t.Fatalf("dead-letter reasons %v; want one for each of %d kinds", reasons, len(bad))
			}
		})
	}
}

func containsAny(s string, subs map[string][]byte) bool {
	for sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
