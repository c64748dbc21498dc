package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// rejectSevens deserializes "vNNNN" values, rejecting every NNNN that is a
// multiple of 7.
func rejectSevens() Deserializer[string] {
	return ValueDeserializer(func(b []byte) (string, error) {
		n, err := strconv.Atoi(strings.TrimPrefix(string(b), "v"))
		if err == nil && n%7 == 0 {
			return "", fmt.Errorf("%s is a multiple of 7", b)
		}
		return string(b), err
	})
}

// Rule: with WithDeadLetterOutput a record the deserializer rejects does
// not fail the job and is not lost: it goes, with where it was read and
// why it was refused, to the source's side output, and an exactly-once
// sink of that side output writes it once across failures and restarts,
// while every good record reaches the main output once.
func TestDeadLettersReachTheirTopicOnceAcrossFailures(t *testing.T) {
	const n = 420
	seeds, topic := fakeTopic(t, 3, n)
	adm, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := kadm.NewClient(adm).CreateTopic(context.Background(), 1, 1, nil, "dlq"); err != nil || resp.Err != nil {
		t.Fatalf("create topic dlq: %v %v", err, resp.Err)
	}
	adm.Close()
	src, err := NewSource(rejectSevens(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()), WithDeadLetterOutput("dead"))
	if err != nil {
		t.Fatal(err)
	}
	sink := func(ser RecordSerializer[string], prefix string) *Sink[string] {
		s, err := NewSink(ser, WithBrokers(seeds...), WithExactlyOnce(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dlqSink, err := NewSink(DeadLetterSerializer("dlq"), WithBrokers(seeds...), WithExactlyOnce("dlq"))
	if err != nil {
		t.Fatal(err)
	}
	var checkpoints, seen, failures atomic.Int64
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(20*time.Millisecond), runtime.WithCheckpointTimeout(10*time.Second),
		runtime.WithRestartStrategy(restart.FixedDelay(10, 10*time.Millisecond)), runtime.WithLogger(quietLogger()),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { checkpoints.Add(1) }}))
	dead := runtime.NewOutputTag[DeadLetter]("dead")
	in := runtime.FromSource(env, src, "in").UID("in").DeclareSideOutputs(dead)
	// Failures after a checkpoint completed, so that dead letters already
	// committed are read again after the restarts. Four, not two: a
	// failure whose subtask read nothing since the checkpoint's barrier
	// replays only its own record, and under load two such were met.
	good := runtime.Map(in, func(v string) (string, error) {
		if c := seen.Add(1); (c == 120 || c == 200 || c == 260 || c == 330) && checkpoints.Load() > 0 {
			failures.Add(1)
			return "", errors.New("injected failure")
		}
		time.Sleep(200 * time.Microsecond)
		return v, nil
	}).UID("map")
	runtime.SinkTo(good, connector.Sink[string](sink(KeyValueSerializer("out", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }), "out"))).UID("out")
	runtime.SinkTo(runtime.SideOutput(in, dead), connector.Sink[DeadLetter](dlqSink)).UID("dlq")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := env.Execute(ctx, "dead letters"); err != nil {
		t.Fatal(err)
	}
	if failures.Load() == 0 {
		t.Fatalf("no failure injected (%d records seen)", seen.Load())
	}
	// seen counts the good records and the failing calls; more is a
	// replay after a restart.
	if good := int64(n - (n+6)/7); seen.Load() <= good+failures.Load() {
		t.Fatalf("%d calls for %d good records and %d failures: no record was read again after a restart", seen.Load(), good, failures.Load())
	}
	out := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, "out", 30*time.Second) {
		out[string(r.Value)]++
	}
	dlq := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, "dlq", 30*time.Second) {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[DeadLetterTopicHeader] != topic || h[DeadLetterPartitionHeader] == "" || h[DeadLetterOffsetHeader] == "" ||
			!strings.Contains(h[DeadLetterErrorHeader], "multiple of 7") {
			t.Fatalf("dead letter %q has headers %v, want its origin and error", r.Value, h)
		}
		dlq[string(r.Value)+"@"+h[DeadLetterPartitionHeader]+"/"+h[DeadLetterOffsetHeader]]++
	}
	var badSeen int
	for i := range n {
		v := fmt.Sprintf("v%04d", i)
		// fakeTopic writes value i to partition i%3 at offset i/3.
		where := fmt.Sprintf("%s@%d/%d", v, i%3, i/3)
		if i%7 == 0 {
			badSeen++
			if dlq[where] != 1 || out[v] != 0 {
				t.Fatalf("bad record %s: %d times in the dead-letter topic, %d in the output; want once and never", where, dlq[where], out[v])
			}
		} else if out[v] != 1 {
			t.Fatalf("good record %s: %d times in the output, want once", v, out[v])
		}
	}
	if len(dlq) != badSeen || len(out) != n-badSeen {
		t.Fatalf("%d dead letters and %d outputs, want %d and %d", len(dlq), len(out), badSeen, n-badSeen)
	}
}

// Rule: a dead-letter output the source's stream does not declare fails
// the job at once, naming the id and how to declare it, and restarts do
// not hide it.
func TestUndeclaredDeadLetterOutputFailsTheJob(t *testing.T) {
	seeds, topic := fakeTopic(t, 1, 5)
	src, err := NewSource(rejectSevens(), WithBrokers(seeds...), WithTopics(topic), WithBounded(LatestOffsets()), WithDeadLetterOutput("dead"))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithLogger(quietLogger()), runtime.WithRestartStrategy(restart.FixedDelay(100, time.Millisecond)))
	runtime.SinkTo(runtime.FromSource(env, src, "in"), connector.Sink[string](&collectSink{got: map[string]int{}}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = env.Execute(ctx, "undeclared")
	if err == nil || !strings.Contains(err.Error(), `side output "dead"`) || !strings.Contains(err.Error(), "DeclareSideOutputs") {
		t.Fatalf("Execute: %v, want an error naming the undeclared side output and DeclareSideOutputs", err)
	}
}

// Rule: WithDeadLetterOutput needs an id and excludes WithSkipBadRecords.
func TestDeadLetterOutputOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		opts []SourceOption
		want string
	}{
		{[]SourceOption{WithDeadLetterOutput("")}, "empty side output id"},
		{[]SourceOption{WithDeadLetterOutput("d"), WithSkipBadRecords()}, "choose one"},
	} {
		_, err := NewSource(StringValues(), append([]SourceOption{WithBrokers("localhost:9092"), WithTopics("t")}, c.opts...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, connector.ErrInvalidConfiguration) {
			t.Errorf("error %v, want an invalid configuration saying %q", err, c.want)
		}
	}
}
