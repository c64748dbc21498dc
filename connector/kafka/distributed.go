package kafka

import (
	"fmt"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
)

// DistributedOption configures Distributed.
type DistributedOption interface{ applyDistributed(*distributedConfig) }

type distributedOptionFunc func(*distributedConfig)

func (f distributedOptionFunc) applyDistributed(c *distributedConfig) { f(c) }

type distributedConfig struct {
	slots          int
	sessionTimeout time.Duration
	replication    int16
	shuffle        []ShuffleOption
}

// WithSlots sets the number of slots the job is cut into: the unit of
// ownership, state, checkpoints and fencing, and the parallelism of every
// operator; fixed for the life of the job's checkpoints, between 1 and
// the max parallelism (runtime.Distributed's Slots). Default: 16.
func WithSlots(n int) DistributedOption {
	return distributedOptionFunc(func(c *distributedConfig) { c.slots = n })
}

// WithSessionTimeout sets how long the job's group waits for a silent
// process before its slots go to the others (Kafka: session.timeout.ms;
// runtime.Distributed's SessionTimeout). Default: 10s.
func WithSessionTimeout(d time.Duration) DistributedOption {
	return distributedOptionFunc(func(c *distributedConfig) { c.sessionTimeout = d })
}

// WithReplicationFactor sets the replication factor of the topics the job
// creates: <job>.slots, its membership's, and the shuffle's
// (WithShuffleReplicationFactor, which wins when given to WithShuffle
// too). Default: -1, the brokers' default.replication.factor.
func WithReplicationFactor(n int16) DistributedOption {
	return distributedOptionFunc(func(c *distributedConfig) { c.replication = n })
}

// WithShuffle passes options to the job's shuffle (NewShuffle): its topic
// configurations, its purge interval, options of its sinks and sources
// (WithShuffleSinkOptions, WithShuffleSourceOptions), or a logger. They
// come after the connection's, and win where they overlap.
func WithShuffle(opts ...ShuffleOption) DistributedOption {
	return distributedOptionFunc(func(c *distributedConfig) { c.shuffle = append(c.shuffle, opts...) })
}

// Distributed returns the runtime option that runs a job as one of many
// processes over the Kafka cluster conn reaches (runtime.WithDistributed):
// the job's membership is a consumer group of conn's cluster, and every
// edge cut between processes is carried by a Shuffle over conn. Every
// process of the job is started with the same job name, job code,
// options and checkpoint storage. It checks the connection and the
// shuffle's options as NewShuffle does, and fails with every problem it
// finds, in an error wrapping connector.ErrInvalidConfiguration; the
// slots and the job name are checked when the job starts.
func Distributed(job string, conn *Conn, opts ...DistributedOption) (runtime.Option, error) {
	cfg := distributedConfig{replication: -1}
	for _, o := range opts {
		o.applyDistributed(&cfg)
	}
	if conn == nil {
		return nil, fmt.Errorf("kafka distributed job %q: no connection; give the one kafka.Connect returns: %w", job, connector.ErrInvalidConfiguration)
	}
	if err := conn.Err(); err != nil {
		return nil, fmt.Errorf("kafka distributed job %q: %w", job, err)
	}
	sh, err := NewShuffle(append([]ShuffleOption{WithConnection(conn), WithShuffleReplicationFactor(cfg.replication)}, cfg.shuffle...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka distributed job %q: %w", job, err)
	}
	return runtime.WithDistributed(runtime.Distributed{
		Job:               job,
		Slots:             cfg.slots,
		Cluster:           conn,
		Shuffle:           sh,
		SessionTimeout:    cfg.sessionTimeout,
		ReplicationFactor: cfg.replication,
	}), nil
}
