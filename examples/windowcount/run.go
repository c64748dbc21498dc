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

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// progress counts what the job did, for the terminal.
type progress struct {
	events, emissions, checkpoints, restarts atomic.Int64
	// failures injects --fail-every's failures; nil: none.
	failures *examplejob.Failures
}

func run(ctx context.Context, o options, stdout io.Writer, logger *slog.Logger) (int, error) {
	began := time.Now()
	seeds, closeCluster, err := examplejob.Connect(ctx, o.job.Brokers, o.clientOpts)
	if err != nil {
		return 1, err
	}
	defer closeCluster()
	// The input with one partition (see the package doc), the outputs
	// with --partitions.
	if err := examplejob.EnsureTopics(ctx, seeds, o.clientOpts, examplejob.Topic{Name: o.inputTopic, Partitions: 1},
		examplejob.Topic{Name: o.outputTopic, Partitions: o.partitions}, examplejob.Topic{Name: o.lateTopic, Partitions: o.partitions}); err != nil {
		return 1, err
	}
	written, partitions, err := fillInput(ctx, seeds, o)
	if err != nil {
		return 1, err
	}
	if written > 0 {
		fmt.Fprintf(stdout, "wrote %d events into %q (seed %d)\n", written, o.inputTopic, o.seed)
	}

	p := progress{failures: examplejob.NewFailures(o.failEvery)}
	stopProgress := examplejob.ShowProgress(stdout, func(secs int) string {
		return fmt.Sprintf("  %4ds  events read %d  window counts written %d  checkpoints %d  restarts %d",
			secs, p.events.Load(), p.emissions.Load(), p.checkpoints.Load(), p.restarts.Load())
	})
	err = runJob(ctx, o, seeds, min(o.job.Parallelism, partitions), &p, logger)
	stopProgress() // stdout is ours again
	if err != nil {
		return 1, fmt.Errorf("job failed: %w", err)
	}
	fmt.Fprintf(stdout, "job finished in %s: %d events read, %d window counts written (both counting replays after restarts), %d checkpoints, %d injected failures, %d restarts\n",
		time.Since(began).Round(time.Millisecond), p.events.Load(), p.emissions.Load(), p.checkpoints.Load(), p.failures.Count(), p.restarts.Load())
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

// fillInput writes the generated events into the input topic if that
// topic is empty, so a restarted run never writes them twice, and returns
// how many it wrote and the topic's partitions. Into a topic of several
// partitions (one that existed before) each user's events go to one
// partition, by key.
func fillInput(ctx context.Context, seeds []string, o options) (int, int, error) {
	cl, err := examplejob.Client(seeds, o.clientOpts, kgo.DefaultProduceTopic(o.inputTopic))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	partitions, empty, err := examplejob.Partitions(ctx, cl, o.inputTopic)
	if err != nil {
		return 0, 0, err
	}
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
