package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// progress counts what the job did, for the terminal.
type progress struct {
	events, emissions, failures, checkpoints, restarts atomic.Int64
}

func run(ctx context.Context, o options, stdout io.Writer, logger *slog.Logger) (int, error) {
	began := time.Now()
	seeds, closeCluster, err := connect(ctx, o)
	if err != nil {
		return 1, err
	}
	defer closeCluster()
	if err := ensureTopics(ctx, seeds, o); err != nil {
		return 1, err
	}
	written, partitions, err := fillInput(ctx, seeds, o)
	if err != nil {
		return 1, err
	}
	if written > 0 {
		fmt.Fprintf(stdout, "wrote %d events into %q (seed %d)\n", written, o.inputTopic, o.seed)
	}

	var p progress
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		showProgress(stdout, &p, done)
	}()
	err = runJob(ctx, o, seeds, min(o.parallelism, partitions), &p, logger)
	close(done)
	<-stopped // stdout is ours again
	if err != nil {
		return 1, fmt.Errorf("job failed: %w", err)
	}
	fmt.Fprintf(stdout, "job finished in %s: %d events read, %d window counts written (both counting replays after restarts), %d checkpoints, %d injected failures, %d restarts\n",
		time.Since(began).Round(time.Millisecond), p.events.Load(), p.emissions.Load(), p.checkpoints.Load(), p.failures.Load(), p.restarts.Load())
	if ctx.Err() != nil {
		// Execute returns nil after a stop too; what was committed until
		// then is a prefix of the output, which the model does not cover.
		return 1, errors.New("interrupted before the end of the input: the output is not verified")
	}

	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var topics [3][]*kgo.Record
	for i, t := range []string{o.inputTopic, o.outputTopic, o.lateTopic} {
		if topics[i], err = committed.Read(rctx, seeds, t, o.clientOpts...); err != nil {
			return 1, fmt.Errorf("verify: read %q: %w", t, err)
		}
	}
	ru := o.rules()
	x := expect(topics[0], ru)
	r := check(x, topics[1], topics[2], ru)
	if !r.ok() {
		fmt.Fprintf(stdout, "windows: FAILED windows=%d emissions=%d re-fired=%d late-events=%d events=%d differences=%d\n",
			r.windows, r.emissions, r.refired, r.late, r.events, len(r.diffs))
		for i, d := range r.diffs {
			if i == 10 {
				fmt.Fprintf(stdout, "  ... and %d more\n", len(r.diffs)-10)
				break
			}
			fmt.Fprintf(stdout, "  %s\n", d)
		}
		return 1, errNotExact
	}
	mode := ""
	if !x.exact {
		mode = " (input of several partitions: lateness checked against its bounds)"
	}
	fmt.Fprintf(stdout, "windows: OK windows=%d emissions=%d re-fired=%d late-events=%d events=%d%s\n",
		r.windows, r.emissions, r.refired, r.late, r.events, mode)
	return 0, nil
}

// kafkaOpts are the security options (--kafka-*) and then opts, for a
// client of the example's own.
func (o options) kafkaOpts(opts ...kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt(nil), o.clientOpts...), opts...)
}

// connect returns the seed brokers: an in-process cluster when no --brokers
// is given, else the given ones once they answer.
func connect(ctx context.Context, o options) ([]string, func(), error) {
	if o.brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, nil, fmt.Errorf("start the in-process Kafka: %w", err)
		}
		return c.ListenAddrs(), c.Close, nil
	}
	seeds := strings.Split(o.brokers, ",")
	cl, err := kgo.NewClient(o.kafkaOpts(kgo.SeedBrokers(seeds...), kgo.DialTimeout(3*time.Second))...)
	if err != nil {
		return nil, nil, fmt.Errorf("--brokers %q: %w", o.brokers, err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return nil, nil, fmt.Errorf("cannot reach Kafka at %s within 10s: %w", o.brokers, err)
	}
	return seeds, func() {}, nil
}

// ensureTopics creates the topics that are missing: the input with one
// partition (see the package doc), the outputs with --partitions.
func ensureTopics(ctx context.Context, seeds []string, o options) error {
	cl, err := kgo.NewClient(o.kafkaOpts(kgo.SeedBrokers(seeds...))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []struct {
		name       string
		partitions int
	}{{o.inputTopic, 1}, {o.outputTopic, o.partitions}, {o.lateTopic, o.partitions}} {
		resp, err := adm.CreateTopic(ctx, int32(t.partitions), -1, nil, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !strings.Contains(err.Error(), kerr.TopicAlreadyExists.Message) {
			return fmt.Errorf("create topic %q: %w", t.name, err)
		}
	}
	return nil
}

// fillInput writes the generated events into the input topic if that
// topic is empty, so a restarted run never writes them twice, and returns
// how many it wrote and the topic's partitions. Into a topic of several
// partitions (one that existed before) each user's events go to one
// partition, by key.
func fillInput(ctx context.Context, seeds []string, o options) (int, int, error) {
	cl, err := kgo.NewClient(o.kafkaOpts(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(o.inputTopic))...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, o.inputTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list offsets of %q: %w", o.inputTopic, err)
	}
	partitions, empty := 0, true
	ends.Each(func(l kadm.ListedOffset) {
		partitions++
		if l.Offset > 0 {
			empty = false
		}
	})
	if partitions == 0 {
		return 0, 0, fmt.Errorf("input topic %q has no partitions", o.inputTopic)
	}
	if !empty {
		return 0, partitions, nil
	}
	lines := generate(o.events, o.seed, o.rules())
	for _, l := range lines {
		user, _, _ := strings.Cut(l, " ")
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: []byte(l)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, fmt.Errorf("write input: %w", err)
	}
	return len(lines), partitions, nil
}

func showProgress(w io.Writer, p *progress, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	began := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			fmt.Fprintf(w, "  %4ds  events read %d  window counts written %d  checkpoints %d  restarts %d\n",
				int(time.Since(began).Seconds()), p.events.Load(), p.emissions.Load(), p.checkpoints.Load(), p.restarts.Load())
		}
	}
}
