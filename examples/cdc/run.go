package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/postgres/cdc"
	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/runtime"
)

// progress counts what the job did, for the terminal.
type progress struct {
	changes, checkpoints, restarts atomic.Int64
}

func run(ctx context.Context, o options, stdout io.Writer, logger *slog.Logger) (int, error) {
	seeds, closeCluster, err := examplejob.Connect(ctx, o.job.Brokers, o.job.ClientOpts())
	if err != nil {
		return 1, err
	}
	defer closeCluster()
	if err := examplejob.EnsureTopics(ctx, seeds, o.job.ClientOpts(), examplejob.Topic{Name: o.topic, Partitions: o.partitions}); err != nil {
		return 1, err
	}
	src, err := cdc.NewSource(o.postgres, cdc.WithPublication(o.publication), cdc.WithSlot(o.slot), cdc.WithTables(o.tables...))
	if err != nil {
		return 2, err
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer(o.topic, func(c cdc.Change) ([]byte, []byte, error) {
		k, err := cdc.MarshalKey(c)
		if err != nil {
			return nil, nil, err
		}
		v, err := cdc.MarshalDebezium(c)
		return k, v, err
	}), o.job.SinkOpts(kafka.WithLogger(logger), kafka.WithExactlyOnce(o.txnPrefix))...)
	if err != nil {
		return 1, err
	}
	var p progress
	envOpts, err := examplejob.EnvOptions(o.job, logger, nil, &p.checkpoints, &p.restarts)
	if err != nil {
		return 1, err
	}
	env := runtime.NewEnvironment(envOpts...)
	changes := runtime.FromSource(env, src, "postgres-cdc").UID("postgres-cdc")
	counted := runtime.Map(changes, func(c cdc.Change) (cdc.Change, error) {
		p.changes.Add(1)
		return c, nil
	}).Name("count").UID("count")
	runtime.SinkTo(counted, sink).Name("kafka").UID("kafka-sink")

	fmt.Fprintf(stdout, "capturing publication %q through slot %q into topic %q\n", o.publication, o.slot, o.topic)
	stopProgress := examplejob.ShowProgress(stdout, func(secs int) string {
		return fmt.Sprintf("  %4ds  changes %d  checkpoints %d  restarts %d", secs, p.changes.Load(), p.checkpoints.Load(), p.restarts.Load())
	})
	err = env.Execute(ctx, "cdc")
	stopProgress()
	if err != nil && !(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return 1, fmt.Errorf("job failed: %w", err)
	}
	fmt.Fprintf(stdout, "stopped: %d changes read (counting replays after restarts), %d checkpoints, %d restarts\n",
		p.changes.Load(), p.checkpoints.Load(), p.restarts.Load())
	return 0, nil
}
