package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/splitflow/splitflow/connector"
)

// Conn is how a job reaches one Kafka cluster: its seed brokers, its
// security settings and client options, given once (Connect) and handed
// to every part of the job that talks to the cluster: sources and sinks
// (WithConnection), the shuffle of a distributed job and its membership
// (Distributed). A Conn is immutable and safe to share.
type Conn struct {
	opts []Option
}

// Connect returns the connection the options describe: WithBrokers
// (required), WithSecurity, WithClientOpts and WithLogger, which then
// apply to every source, sink and shuffle given the connection. Its
// problems (no brokers, an address without a port, an unreadable
// certificate file) are reported by each user of it, at its start: by
// NewSource, NewSink, NewShuffle and a distributed job's validation.
func Connect(opts ...Option) *Conn {
	return &Conn{opts: append([]Option(nil), opts...)}
}

// WithConnection makes the source, sink or shuffle reach the cluster as
// conn says (its brokers, security, client options and logger). Options
// given after it add to it or win where they overlap, as they would
// after the options conn was made of: WithClientOpts and WithLogger win,
// a later WithSecurity replaces conn's, WithBrokers adds seed brokers.
// A nil conn is a configuration error.
func WithConnection(conn *Conn) Option {
	if conn == nil {
		err := errors.New("WithConnection(nil); give the connection kafka.Connect returns")
		return commonOption{
			src: func(c *sourceConfig) { c.optErrs = append(c.optErrs, err) },
			snk: func(c *sinkConfig) { c.optErrs = append(c.optErrs, err) },
		}
	}
	return commonOption{
		src: func(c *sourceConfig) {
			for _, o := range conn.opts {
				o.apply(c)
			}
		},
		snk: func(c *sinkConfig) {
			for _, o := range conn.opts {
				o.applySink(c)
			}
		},
	}
}

// config is conn's options applied alone, as a source's.
func (c *Conn) config() (sourceConfig, error) {
	cfg := defaultSourceConfig()
	for _, o := range c.opts {
		o.apply(&cfg)
	}
	errs := checkBrokers(cfg.seeds)
	errs = append(errs, cfg.optErrs...)
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("kafka connection: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	cfg.kgoOpts = withSecurityFirst(cfg.securityOpts, cfg.kgoOpts)
	return cfg, nil
}

// Err reports every problem of the connection's settings (its brokers,
// its security), in an error wrapping connector.ErrInvalidConfiguration;
// nil if a client could be made from them. A program calls it to report
// them with its other settings before it starts a job.
func (c *Conn) Err() error {
	_, err := c.config()
	return err
}

// Brokers are the connection's seed brokers.
func (c *Conn) Brokers() []string {
	cfg, _ := c.config()
	return cfg.seeds
}

// Security is the connection's security settings (WithSecurity's).
func (c *Conn) Security() Security {
	cfg, _ := c.config()
	return cfg.security
}

// ClientOpts returns the franz-go options of a client that reaches the
// cluster as the connection says: its security settings, its client
// options and its seed brokers. It is for clients splitflow does not make
// itself (an admin client, a txn.Pool, a verifier) and for a distributed
// job's membership, which the engine makes from them. The error is Err's.
func (c *Conn) ClientOpts() ([]kgo.Opt, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return append(append([]kgo.Opt(nil), cfg.kgoOpts...), kgo.SeedBrokers(cfg.seeds...)), nil
}

var _ connector.Cluster = (*Conn)(nil)

// ClusterID returns the id of the Kafka cluster the connection reaches
// (Kafka: cluster.id), which tells two clusters apart where one job name
// is used on both: a distributed job records it with the job's name as
// its checkpoint root's owner. "" when the broker gives none (a metadata
// version without it).
func (c *Conn) ClusterID(ctx context.Context) (string, error) {
	opts, err := c.ClientOpts()
	if err != nil {
		return "", err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("kafka connection: client to ask the cluster's id: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	// An empty list, not nil: no topic, where nil asks for all of them.
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("kafka connection: ask the cluster for its id: %w", err)
	}
	if resp.ClusterID == nil {
		return "", nil
	}
	return *resp.ClusterID, nil
}
