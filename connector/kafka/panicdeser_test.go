package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// panicOnSevens deserializes "vNNNN" values and panics on every NNNN that
// is a multiple of 7, as a decoder with a bug does on input it does not
// expect.
func panicOnSevens() Deserializer[string] {
	return DeserializerFunc[string](func(r *kgo.Record) (string, error) {
		n, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "v"))
		if n%7 == 0 {
			var m map[string]int
			m["boom"] = n // assignment to entry in nil map
		}
		return string(r.Value), nil
	})
}

// deadLetters gathers the dead letters of every subtask.
type deadLetters struct {
	mu  sync.Mutex
	got []DeadLetter
}

func (s *deadLetters) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[DeadLetter], error) {
	return s, nil
}
func (s *deadLetters) Write(d DeadLetter, _ connector.WriteContext) error {
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	return nil
}
func (s *deadLetters) Flush(bool) error { return nil }
func (s *deadLetters) Close() error     { return nil }

// Rule: a deserializer that panics rejects the record as one that
// returns an error does, under the same bad-record policy: the job fails
// with the record's *BadRecordError (not a panic and its stack), or with
// WithSkipBadRecords drops it, or with WithDeadLetterOutput sends it to
// the side output. Before, the panic bypassed the policy and failed the
// task, which restarted onto the same record.
func TestPanickingDeserializerIsABadRecord(t *testing.T) {
	const n = 50
	good := n - (n+6)/7
	for _, c := range []struct {
		name string
		opts []SourceOption
	}{
		{"fail", nil},
		{"skip", []SourceOption{WithSkipBadRecords()}},
		{"dead letters", []SourceOption{WithDeadLetterOutput("dead")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			seeds, topic := fakeTopic(t, 2, n)
			src, err := NewSource(panicOnSevens(), append([]SourceOption{WithBrokers(seeds...), WithTopics(topic),
				WithBounded(LatestOffsets()), WithLogger(quietLogger())}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithLogger(quietLogger()))
			sink := &collectSink{got: map[string]int{}}
			dead := runtime.NewOutputTag[DeadLetter]("dead")
			in := runtime.FromSource(env, src, "in")
			dlq := &deadLetters{}
			if c.name == "dead letters" {
				in = in.DeclareSideOutputs(dead)
				runtime.SinkTo(runtime.SideOutput(in, dead), connector.Sink[DeadLetter](dlq))
			}
			runtime.SinkTo(in, connector.Sink[string](sink))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err = env.Execute(ctx, "panicking deserializer")
			if c.name == "fail" {
				var bad *BadRecordError
				if !errors.As(err, &bad) || !strings.Contains(err.Error(), "panic") {
					t.Fatalf("Execute = %v; want a *BadRecordError saying the deserializer panicked", err)
				}
				if strings.Contains(err.Error(), "goroutine ") {
					t.Fatalf("the bad record's error carries a stack: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Execute = %v; want the panicking records handled as bad records", err)
			}
			if len(sink.got) != good {
				t.Fatalf("wrote %d records, want the %d good ones", len(sink.got), good)
			}
			if c.name == "dead letters" {
				if len(dlq.got) != n-good {
					t.Fatalf("%d dead letters, want %d", len(dlq.got), n-good)
				}
				for _, d := range dlq.got {
					if !strings.Contains(d.Err, "panic") || !strings.Contains(d.Err, "nil map") || strings.Contains(d.Err, "goroutine ") {
						t.Fatalf("dead letter error %q: want the panic's value without its stack", d.Err)
					}
				}
			}
		})
	}
}
