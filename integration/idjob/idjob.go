// Package idjob is the pipeline the integration tests run, in the test
// process or in a child process (integration/idjob/cmd/idjob): a Kafka
// topic whose record values are decimal ids -> a map -> a keyBy (or a
// rebalance) -> an exactly-once Kafka sink writing each id as the value of
// one record. The output holds every input id once exactly when the job is
// exactly-once, which the tests check with a read_committed drain.
package idjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config describes one run of the job.
type Config struct {
	Brokers            []string
	Input, Output      string
	TxnPrefix          string
	Parallelism        int
	CheckpointInterval time.Duration
	// CheckpointTimeout, when set, replaces the engine's default (2m).
	CheckpointTimeout time.Duration
	// TolerableCheckpointFailures lets checkpoints time out without failing
	// the job.
	TolerableCheckpointFailures int
	CheckpointDir               string
	// Unbounded keeps reading; otherwise the source ends at the end offsets
	// of its first start.
	Unbounded bool
	// Discovery is the partition discovery interval (0: the default).
	Discovery time.Duration
	// Restart is the restart strategy (nil: the engine's default).
	Restart restart.Strategy
	// TxnTimeout is the sink's transaction timeout (0: the default).
	TxnTimeout time.Duration
	// CommitTimeout is the sink's commit timeout (0: the default).
	CommitTimeout time.Duration
	// LeaseSessionTimeout is the session timeout of the sink's prefix
	// lease (0: the default, 10s), which a run started after a killed one
	// waits out.
	LeaseSessionTimeout time.Duration
	// SkipBad drops records whose value is not an id.
	SkipBad bool
	// Rebalance shuffles with a rebalance instead of a keyBy on the id.
	Rebalance bool
	// Map runs for every id in the source's chain, on its task goroutine;
	// an error fails the task.
	Map func(id int64) error
	// Sink runs for every id in the sink's chain, after the shuffle, on
	// its task goroutine; an error fails the task.
	Sink func(id int64) error
	// Rejected counts the values the deserializer rejected (may be nil).
	Rejected *atomic.Int64
	Listener runtime.JobListener
	Logger   *slog.Logger
	// GroupID, when set, is the source's group: the offsets of every
	// checkpoint are committed to it.
	GroupID string
	// Security is how the source and the sink connect (zero: plaintext).
	Security kafka.Security
}

// ErrNotAnID is what the deserializer rejects a value with.
var ErrNotAnID = errors.New("value is not a decimal id")

// Run builds the job and executes it until it ends, fails or ctx is
// cancelled.
func Run(ctx context.Context, c Config) error {
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	deser := kafka.DeserializerFunc[int64](func(r *kgo.Record) (int64, error) {
		id, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil {
			if c.Rejected != nil {
				c.Rejected.Add(1)
			}
			return 0, fmt.Errorf("%w: %q", ErrNotAnID, r.Value)
		}
		return id, nil
	})
	conn := kafka.Connect(kafka.WithBrokers(c.Brokers...), kafka.WithSecurity(c.Security), kafka.WithLogger(logger))
	srcOpts := []kafka.SourceOption{kafka.WithConnection(conn), kafka.WithTopics(c.Input)}
	if !c.Unbounded {
		srcOpts = append(srcOpts, kafka.WithBounded(kafka.LatestOffsets()))
	}
	if c.Discovery > 0 {
		srcOpts = append(srcOpts, kafka.WithPartitionDiscoveryInterval(c.Discovery))
	}
	if c.GroupID != "" {
		srcOpts = append(srcOpts, kafka.WithGroupID(c.GroupID))
	}
	if c.SkipBad {
		srcOpts = append(srcOpts, kafka.WithSkipBadRecords())
	}
	src, err := kafka.NewSource(deser, srcOpts...)
	if err != nil {
		return err
	}
	sinkOpts := []kafka.SinkOption{kafka.WithConnection(conn), kafka.WithExactlyOnce(c.TxnPrefix)}
	if c.TxnTimeout > 0 {
		sinkOpts = append(sinkOpts, kafka.WithTransactionTimeout(c.TxnTimeout))
	}
	if c.CommitTimeout > 0 {
		sinkOpts = append(sinkOpts, kafka.WithCommitTimeout(c.CommitTimeout))
	}
	if c.LeaseSessionTimeout > 0 {
		sinkOpts = append(sinkOpts, kafka.WithPrefixLeaseSessionTimeout(c.LeaseSessionTimeout))
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer(c.Output, func(id int64) ([]byte, []byte, error) {
		return nil, strconv.AppendInt(nil, id, 10), nil
	}), sinkOpts...)
	if err != nil {
		return err
	}

	opts := []runtime.Option{
		runtime.WithParallelism(max(c.Parallelism, 1)),
		runtime.WithCheckpointInterval(c.CheckpointInterval),
		runtime.WithLogger(logger),
		runtime.WithJobListener(c.Listener),
	}
	if c.CheckpointTimeout > 0 {
		opts = append(opts, runtime.WithCheckpointTimeout(c.CheckpointTimeout))
	}
	if c.TolerableCheckpointFailures > 0 {
		opts = append(opts, runtime.WithTolerableCheckpointFailures(c.TolerableCheckpointFailures))
	}
	if c.CheckpointDir != "" {
		opts = append(opts, runtime.WithCheckpointDir(c.CheckpointDir))
	}
	if c.Restart != nil {
		opts = append(opts, runtime.WithRestartStrategy(c.Restart))
	}
	env := runtime.NewEnvironment(opts...)
	ids := runtime.FromSource(env, src, "ids").UID("ids")
	mapped := runtime.Map(ids, func(id int64) (int64, error) {
		if c.Map != nil {
			if err := c.Map(id); err != nil {
				return 0, err
			}
		}
		return id, nil
	}).Name("map").UID("map")
	var shuffled runtime.DataStream[int64]
	if c.Rebalance {
		shuffled = runtime.Map(runtime.Rebalance(mapped), func(id int64) (int64, error) {
			if c.Sink != nil {
				if err := c.Sink(id); err != nil {
					return 0, err
				}
			}
			return id, nil
		}).Name("rebalanced").UID("rebalanced")
	} else {
		shuffled = runtime.KeyedProcess(runtime.KeyBy(mapped, func(id int64) int64 { return id }), func(ctx *runtime.KeyedContext[int64, int64], id int64) error {
			if c.Sink != nil {
				if err := c.Sink(id); err != nil {
					return err
				}
			}
			ctx.Collect(id)
			return nil
		}).Name("keyed").UID("keyed")
	}
	runtime.SinkTo(shuffled, sink).Name("out").UID("out")
	return env.Execute(ctx, "idjob")
}
