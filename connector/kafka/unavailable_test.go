package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// unavailableOnSevens deserializes "vNNNN" values and, on every NNNN that
// is a multiple of 7, fails as a schema registry client does that cannot
// reach its registry: the record may be perfectly good.
func unavailableOnSevens() Deserializer[string] {
	return DeserializerFunc[string](func(r *kgo.Record) (string, error) {
		var n int
		_, _ = fmt.Sscanf(string(r.Value), "v%d", &n)
		if n%7 == 0 {
			return "", fmt.Errorf("schema registry http://127.0.0.1:1: look up schema id 3: connection refused: %w", ErrDeserializerUnavailable)
		}
		return string(r.Value), nil
	})
}

// Rule: a deserializer error wrapping ErrDeserializerUnavailable says
// the record is not at fault, so no bad-record policy applies to it: the
// job fails with that error under WithSkipBadRecords and
// WithDeadLetterOutput alike, where dropping or dead-lettering would lose
// a good record without a word.
func TestUnavailableDeserializerFailsTheJobUnderEveryPolicy(t *testing.T) {
	const n = 20
	for _, c := range []struct {
		name string
		opts []SourceOption
	}{
		{"fail", nil},
		{"skip", []SourceOption{WithSkipBadRecords()}},
		{"dead letters", []SourceOption{WithDeadLetterOutput("dead")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			seeds, topic := fakeTopic(t, 1, n)
			src, err := NewSource(unavailableOnSevens(), append([]SourceOption{WithBrokers(seeds...), WithTopics(topic),
				WithBounded(LatestOffsets()), WithLogger(quietLogger())}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithParallelism(1), runtime.WithLogger(quietLogger()))
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
			err = env.Execute(ctx, "unavailable deserializer")
			if !errors.Is(err, ErrDeserializerUnavailable) {
				t.Fatalf("Execute = %v; want the job failed with the deserializer's ErrDeserializerUnavailable", err)
			}
			var bad *BadRecordError
			if errors.As(err, &bad) {
				t.Fatalf("Execute = %v; an unavailable deserializer is not a bad record", err)
			}
			if len(dlq.got) != 0 {
				t.Fatalf("%d dead letters; want none, the records are not at fault", len(dlq.got))
			}
		})
	}
}
