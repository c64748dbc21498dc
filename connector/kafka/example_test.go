package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The README's word count, run on an in-process Kafka: the source reads
// what is in "lines" and ends (WithBounded), Count keeps each word's count
// as keyed state, and the sink commits a transaction per checkpoint. A
// read_committed consumer then sees each word's counts once each, 1 to n.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "lines", "counts"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := produce(ctx, brokers, "lines", "to be", "or not", "to be"); err != nil {
		fmt.Println(err)
		return
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err1 := kafka.NewSource(kafka.StringValues(), kafka.WithBrokers(brokers...), kafka.WithTopics("lines"),
		kafka.WithBounded(kafka.LatestOffsets()), kafka.WithLogger(quiet))
	sink, err2 := kafka.NewSink(kafka.KeyValueSerializer("counts", func(c runtime.KV[string, int64]) ([]byte, []byte, error) {
		return []byte(c.Key), strconv.AppendInt(nil, c.Value, 10), nil
	}), kafka.WithBrokers(brokers...), kafka.WithExactlyOnce("wordcount"), kafka.WithLogger(quiet))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithLogger(quiet))
	words := runtime.FlatMap(runtime.FromSource(env, src, "lines"), func(line string, out runtime.Collector[string]) error {
		for _, w := range strings.Fields(line) {
			out.Collect(w)
		}
		return nil
	})
	runtime.SinkTo(runtime.Count(runtime.KeyBy(words, func(w string) string { return w })), sink)
	if err := env.Execute(ctx, "wordcount"); err != nil {
		fmt.Println(err)
		return
	}

	out, err := consume(ctx, brokers, "counts", 6)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output: [be=1 be=2 not=1 or=1 to=1 to=2]
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

// show is a record as key=value, or its value alone when it has no key.
func show(r *kgo.Record) string {
	if r.Key == nil {
		return string(r.Value)
	}
	return string(r.Key) + "=" + string(r.Value)
}

// consume reads the committed records of topic (as show writes them), sorted: n of them, and
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
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, show(r)) })
	}
	more, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	cl.PollFetches(more).EachRecord(func(r *kgo.Record) { got = append(got, show(r)) })
	slices.Sort(got)
	return got, nil
}
