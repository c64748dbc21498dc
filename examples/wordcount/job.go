package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
)

// wordCount is one output record: a word and its running count.
type wordCount = runtime.KV[string, int64]

// runJob builds and runs the pipeline: KafkaSource -> split into words ->
// keyBy word -> running count -> KafkaSink.
// A non-nil statusLn serves the job's status (runtime.WithHTTPListener).
func runJob(ctx context.Context, o options, seeds []string, p *progress, logger *slog.Logger, statusLn net.Listener) error {
	srcOpts := []kafka.SourceOpt{kafka.WithBrokers(seeds...), kafka.WithSecurity(o.security), kafka.WithTopics(o.inputTopic), kafka.WithLogger(logger)}
	if o.unbounded {
		srcOpts = append(srcOpts, kafka.WithPartitionDiscoveryInterval(o.discovery))
	} else {
		srcOpts = append(srcOpts, kafka.WithBounded(kafka.LatestOffsets()))
	}
	src, err := kafka.NewSource(kafka.StringValues(), srcOpts...)
	if err != nil {
		return err
	}
	sinkOpts := []kafka.SinkOpt{kafka.WithBrokers(seeds...), kafka.WithSecurity(o.security), kafka.WithLogger(logger),
		kafka.WithDeliveryGuarantee(kafka.ExactlyOnce), kafka.WithTransactionalIDPrefix(o.txnPrefix)}
	if o.noTimeoutCheck {
		sinkOpts = append(sinkOpts, kafka.WithoutBrokerTimeoutCheck())
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer(o.outputTopic, func(wc wordCount) ([]byte, []byte, error) {
		return []byte(wc.Key), strconv.AppendInt(nil, wc.Value, 10), nil
	}), sinkOpts...)
	if err != nil {
		return err
	}

	// An injected failure waits for a checkpoint completed since the
	// previous one, so every restart resumes further along and the job
	// always finishes.
	var sinceFailure atomic.Bool
	sinceFailure.Store(true)
	envOpts := []runtime.Option{
		runtime.WithCheckpointInterval(o.checkpointInterval),
		runtime.WithRestartStrategy(runtime.FixedDelayRestart(runtime.Unlimited, 100*time.Millisecond)),
		runtime.WithLogger(logger),
		runtime.WithJobListener(runtime.JobListener{
			CheckpointCompleted: func(int64) {
				p.checkpoints.Add(1)
				sinceFailure.Store(true)
			},
			Restarting: func(int, error) { p.restarts.Add(1) },
		}),
	}
	if o.distributed {
		d, err := distributedOption(o, seeds, logger)
		if err != nil {
			return err
		}
		envOpts = append(envOpts, d)
	} else {
		envOpts = append(envOpts, runtime.WithParallelism(o.parallelism))
	}
	if o.fromSavepoint != "" {
		envOpts = append(envOpts, runtime.WithRestoreFrom(o.fromSavepoint))
	}
	if o.savepointDir != "" {
		envOpts = append(envOpts, runtime.WithSavepointDir(o.savepointDir))
	}
	if o.checkpointDir != "" {
		envOpts = append(envOpts, runtime.WithCheckpointDir(o.checkpointDir))
	}
	if o.stateBackend != "" {
		backend, err := runtime.ParseStateBackend(o.stateBackend)
		if err != nil {
			return err
		}
		envOpts = append(envOpts, runtime.WithStateBackend(backend))
	}
	if o.stateDir != "" {
		envOpts = append(envOpts, runtime.WithStateDir(o.stateDir))
	}
	if statusLn != nil {
		envOpts = append(envOpts, runtime.WithHTTPListener(statusLn))
		if o.httpToken != "" {
			envOpts = append(envOpts, runtime.WithHTTPToken(o.httpToken))
		}
		if o.httpTLS != nil {
			envOpts = append(envOpts, runtime.WithHTTPTLS(o.httpTLS))
		}
		if len(o.httpAllowedHosts) > 0 {
			envOpts = append(envOpts, runtime.WithHTTPAllowedHosts(o.httpAllowedHosts...))
		}
	}
	env := runtime.NewEnvironment(envOpts...)
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	var seen atomic.Int64
	words := runtime.FlatMap(lines, func(line string, out runtime.Collector[string]) error {
		n := p.lines.Add(1)
		if o.failEvery > 0 && seen.Add(1)%o.failEvery == 0 && sinceFailure.CompareAndSwap(true, false) {
			p.failures.Add(1)
			return fmt.Errorf("injected failure at record %d (--fail-every %d)", n, o.failEvery)
		}
		for _, w := range splitWords(line) {
			out.Collect(w)
		}
		return nil
	}).Name("split").UID("split")
	counts := runtime.Count(runtime.KeyBy(words, func(w string) string { return w })).Name("count").UID("count")
	written := runtime.Map(counts, func(wc wordCount) (wordCount, error) {
		p.updates.Add(1)
		return wc, nil
	}).Name("tally").UID("tally")
	runtime.SinkTo(written, sink).Name("counts").UID("counts-sink")
	if err := env.Execute(ctx, "wordcount"); err != nil {
		return fmt.Errorf("%w", err)
	}
	// Execute returns nil both at the end of the input and after a stop;
	// the job's final state tells them apart (the stop endpoint cancels a
	// context of Execute's own, which ctx does not show).
	p.stopped.Store(env.Status().State == "cancelled")
	return nil
}
