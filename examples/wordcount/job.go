package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/jobflag"
	"github.com/splitflow/splitflow/runtime"
)

// wordCount is one output record: a word and its running count.
type wordCount = runtime.KV[string, int64]

// runJob builds and runs the pipeline: KafkaSource -> split into words ->
// keyBy word -> running count -> KafkaSink, on seeds (o.job's brokers, or
// the in-process ones). A non-nil statusLn serves the job's status
// (jobflag.Job.Listen's).
func runJob(ctx context.Context, o options, seeds []string, p *progress, logger *slog.Logger, statusLn net.Listener) error {
	job := *o.job
	job.Brokers = seeds
	srcOpts := job.SourceOpts(kafka.WithTopics(o.inputTopic), kafka.WithLogger(logger))
	if o.unbounded {
		srcOpts = append(srcOpts, kafka.WithPartitionDiscoveryInterval(o.discovery))
	} else {
		srcOpts = append(srcOpts, kafka.WithBounded(kafka.LatestOffsets()))
	}
	src, err := kafka.NewSource(kafka.StringValues(), srcOpts...)
	if err != nil {
		return err
	}
	var sink connector.Sink[wordCount]
	if o.postgres != "" {
		if sink, err = countsSink(o); err != nil {
			return err
		}
	} else if sink, err = kafkaCountsSink(o, job, logger); err != nil {
		return err
	}
	if statusLn == nil {
		// Not serving after all (a test that runs the job alone).
		job.HTTP = jobflag.HTTP{}
	}
	envOpts, err := examplejob.EnvOptions(&job, logger, p.failures, &p.checkpoints, &p.restarts)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts...)
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	words := runtime.FlatMap(lines, func(line string, out runtime.Collector[string]) error {
		n := p.lines.Add(1)
		if p.failures.Fail() {
			return fmt.Errorf("injected failure at record %d (--fail-every %d)", n, o.failEvery)
		}
		for _, w := range splitWords(line) {
			out.Collect(w)
		}
		return nil
	}).Name("split").UID("split")
	var emit []runtime.RollingOption
	if o.latest {
		emit = append(emit, runtime.EmitLatest())
	}
	counts := runtime.Count(runtime.KeyBy(words, func(w string) string { return w }), emit...).Name("count").UID("count")
	written := runtime.Map(counts, func(wc wordCount) (wordCount, error) {
		p.updates.Add(1)
		return wc, nil
	}).Name("tally").UID("tally")
	runtime.SinkTo(written, sink).Name("counts").UID("counts-sink")
	err = env.Execute(ctx, "wordcount")
	if errors.Is(err, runtime.ErrStopped) {
		// Stopped over the status server (POST /api/v1/job/stop, or
		// splitflow savepoint stop): an end the operator asked for.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	// Execute returns nil both at the end of the input and after an
	// interrupt, which cancelled ctx, and ErrStopped after a stop; the
	// job's final state says whether it was cut short.
	p.stopped.Store(env.Status().State == "cancelled")
	return nil
}

// kafkaCountsSink writes each count update to o.outputTopic exactly-once:
// key the word, value its running count in decimal.
func kafkaCountsSink(o options, job jobflag.Job, logger *slog.Logger) (connector.Sink[wordCount], error) {
	sinkOpts := job.SinkOpts(kafka.WithLogger(logger), kafka.WithExactlyOnce(o.txnPrefix))
	if o.noTimeoutCheck {
		sinkOpts = append(sinkOpts, kafka.WithoutBrokerTimeoutCheck())
	}
	if o.leaseSession > 0 {
		sinkOpts = append(sinkOpts, kafka.WithPrefixLeaseSessionTimeout(o.leaseSession))
	}
	return kafka.NewSink(kafka.KeyValueSerializer(o.outputTopic, func(wc wordCount) ([]byte, []byte, error) {
		return []byte(wc.Key), strconv.AppendInt(nil, wc.Value, 10), nil
	}), sinkOpts...)
}
