package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector/kafka/registry"
	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// progress counts what the job did, for the terminal.
type progress struct {
	orders, totals, checkpoints, restarts atomic.Int64
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
	regURL := o.registry
	if regURL == "" {
		fake := srfake.New()
		defer fake.Close()
		regURL = fake.URL()
	}
	reg, err := registry.NewClient(registry.WithURLs(regURL))
	if err != nil {
		return 1, fmt.Errorf("--registry: %w", err)
	}
	if err := examplejob.EnsureTopics(ctx, seeds, o.clientOpts, examplejob.Topic{Name: o.inputTopic, Partitions: o.partitions},
		examplejob.Topic{Name: o.outputTopic, Partitions: o.partitions}, examplejob.Topic{Name: o.dlqTopic, Partitions: o.partitions}); err != nil {
		return 1, err
	}
	written, partitions, err := fillInput(ctx, seeds, reg, o)
	if err != nil {
		return 1, err
	}
	if written > 0 {
		fmt.Fprintf(stdout, "wrote %d orders into %q (seed %d)\n", written, o.inputTopic, o.seed)
	}

	p := progress{failures: examplejob.NewFailures(o.failEvery)}
	stopProgress := examplejob.ShowProgress(stdout, func(secs int) string {
		return fmt.Sprintf("  %4ds  orders read %d  totals written %d  checkpoints %d  restarts %d",
			secs, p.orders.Load(), p.totals.Load(), p.checkpoints.Load(), p.restarts.Load())
	})
	err = runJob(ctx, o, seeds, reg, min(o.job.Parallelism, partitions), &p, logger)
	stopProgress() // stdout is ours again
	if err != nil {
		return 1, fmt.Errorf("job failed: %w", err)
	}
	fmt.Fprintf(stdout, "job finished in %s: %d orders read, %d totals written (both counting replays after restarts), %d checkpoints, %d injected failures, %d restarts\n",
		time.Since(began).Round(time.Millisecond), p.orders.Load(), p.totals.Load(), p.checkpoints.Load(), p.failures.Count(), p.restarts.Load())
	// An unbounded job ends by a stop, and a bounded one may (an
	// interrupt): what it committed until then is checked as a prefix.
	partial := o.unbounded || ctx.Err() != nil
	if partial {
		ctx = context.WithoutCancel(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var topics [3][]*kgo.Record
	for i, t := range []string{o.inputTopic, o.outputTopic, o.dlqTopic} {
		if topics[i], err = committed.Read(rctx, seeds, t, o.clientOpts...); err != nil {
			return 1, fmt.Errorf("verify: read %q: %w", t, err)
		}
	}
	x, err := expect(topics[0], reg, o.window.Milliseconds())
	if err != nil {
		return 1, fmt.Errorf("verify: %w", err)
	}
	r := check(x, topics[1], topics[2], reg, o.window.Milliseconds(), partial)
	if !r.ok() {
		fmt.Fprintf(stdout, "ordertotals: FAILED totals=%d orders=%d dead-letters=%d differences=%d\n", r.totals, x.orders, r.dead, len(r.diffs))
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
	if partial {
		mode = fmt.Sprintf(" (stopped before the end: %d of %d windows closed, each exact)", r.totals, len(x.totals))
	}
	fmt.Fprintf(stdout, "ordertotals: OK totals=%d orders=%d v1=%d v2=%d dead-letters=%d%s\n", r.totals, x.orders, x.v1, x.v2, r.dead, mode)
	return 0, nil
}

// fillInput writes the generated orders into the input topic if that
// topic is empty, so a restarted run never writes them twice, and returns
// how many it wrote and the topic's partitions. Each customer's orders go
// to one partition, by key. It registers v1 and then v2 under the
// input's subject, as a producer that moves to v2 mid-stream does.
func fillInput(ctx context.Context, seeds []string, reg *registry.Client, o options) (int, int, error) {
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
	if !empty || o.orders == 0 {
		return 0, partitions, nil
	}
	v1, err := registry.NewAvroSerializer[Order](ctx, reg, o.inputTopic, orderV1Schema, registry.WithAutoRegister())
	if err != nil {
		return 0, 0, fmt.Errorf("register the input's schema v1: %w", err)
	}
	v2, err := registry.NewAvroSerializer[Order](ctx, reg, o.inputTopic, orderV2Schema, registry.WithAutoRegister())
	if err != nil {
		return 0, 0, fmt.Errorf("register the input's schema v2: %w", err)
	}
	recs := generate(o.orders, o.seed, o.outOfOrderness.Milliseconds())
	var mu sync.Mutex // the promises of different partitions may run at once
	var errs []error
	for _, g := range recs {
		var b []byte
		switch {
		case g.bad > 0:
			b, err = encodeBad(g.bad, g.order.OrderID, v1.Encode)
		case g.version == 1:
			b, err = v1.Encode(g.order)
		default:
			b, err = v2.Encode(g.order)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("encode order %s: %w", g.order.OrderID, err)
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(g.order.Customer), Value: b}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, fmt.Errorf("write input: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, fmt.Errorf("write input: %w", err)
	}
	return len(recs), partitions, nil
}
