package kafka_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An exactly-once pipeline from topic "in" to topic "out", as in the
// README, run on an in-process Kafka: the source reads what is in "in" and
// ends (WithBounded), the work is done in the pipeline, and the sink
// commits a transaction per checkpoint. A read_committed consumer then
// sees every line once.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := produce(ctx, brokers, "in", "to be", "or not", "to be"); err != nil {
		fmt.Println(err)
		return
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := kafka.NewSource(kafka.StringValues(),
		kafka.WithBrokers(brokers...), kafka.WithTopics("in"),
		kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(quiet))
	if err != nil {
		fmt.Println(err)
		return
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer("out", func(s string) (key, value []byte, err error) {
		return nil, []byte(s), nil
	}), kafka.WithBrokers(brokers...), kafka.WithLogger(quiet),
		kafka.WithExactlyOnce("upper"))
	if err != nil {
		fmt.Println(err)
		return
	}

	env := runtime.NewEnvironment(
		runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithLogger(quiet))
	lines := runtime.FromSource(env, src, "in").UID("in")
	upper := runtime.Map(lines, func(s string) (string, error) { return strings.ToUpper(s), nil }).UID("upper")
	runtime.SinkTo(upper, sink).UID("out")
	if err := env.Execute(ctx, "upper"); err != nil {
		fmt.Println(err)
		return
	}

	out, err := consume(ctx, brokers, "out", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output: [OR NOT TO BE TO BE]
}

// produce writes values into topic.
func produce(ctx context.Context, brokers []string, topic string, values ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// consume reads the committed values of topic, sorted: n of them, and
// whatever else a further short poll finds, so that a duplicate shows.
func consume(ctx context.Context, brokers []string, topic string, n int) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			return nil, err
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	more, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	cl.PollFetches(more).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	slices.Sort(got)
	return got, nil
}
