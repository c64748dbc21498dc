package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/internal/kfetch"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShuffleTopicSuffix ends the name of every shuffle topic:
// <channel>.shuffle.
const ShuffleTopicSuffix = ".shuffle"

// noTimestampHeader marks a shuffle record written without an event
// timestamp. Kafka gives every record one (the producer's clock when none
// is set), and the reading side would otherwise hand the producer's
// clock on as the record's event time.
const noTimestampHeader = "splitflow-no-timestamp"

// maxTopicName is Kafka's limit on a topic's name.
const maxTopicName = 249

// ShuffleOption configures a Shuffle. WithBrokers, WithClientOpts,
// WithLogger and WithSecurity are ShuffleOptions: they apply to the
// shuffle's sinks, sources and topic creation alike.
type ShuffleOption interface{ applyShuffle(*shuffleConfig) }

type shuffleOptionFunc func(*shuffleConfig)

func (f shuffleOptionFunc) applyShuffle(c *shuffleConfig) { f(c) }

type shuffleConfig struct {
	source      []SourceOption
	sink        []SinkOption
	replication int16
	topicCfg    map[string]*string
	purgeEvery  time.Duration
}

func defaultShuffleConfig() shuffleConfig {
	return shuffleConfig{replication: -1, purgeEvery: DefaultShufflePurgeInterval}
}

// DefaultShufflePurgeInterval is how often, at most, a slot's shuffle
// reader deletes the records below its completed checkpoint
// (WithShufflePurgeInterval); Kafka Streams' repartition.purge.interval.ms
// has the same default.
const DefaultShufflePurgeInterval = 30 * time.Second

// WithShuffleReplicationFactor sets the replication factor of the topics
// the shuffle creates (Kafka: replication.factor of CreateTopics). A topic
// that exists already is used as it is. Default: -1, the brokers'
// default.replication.factor.
func WithShuffleReplicationFactor(n int16) ShuffleOption {
	return shuffleOptionFunc(func(c *shuffleConfig) { c.replication = n })
}

// WithShuffleTopicConfigs sets configurations of the topics the shuffle
// creates (min.insync.replicas, ...). Default: retention.ms and
// retention.bytes -1 (no retention), the brokers' defaults for the rest.
// A reader's position lives in the job's checkpoints, so a retention
// shorter than the longest a job may be down loses records that were
// committed and not yet read; the readers delete what they no longer
// need instead (WithShufflePurgeInterval). Setting retention.ms or
// retention.bytes here replaces the default.
func WithShuffleTopicConfigs(configs map[string]string) ShuffleOption {
	return shuffleOptionFunc(func(c *shuffleConfig) {
		if c.topicCfg == nil {
			c.topicCfg = map[string]*string{}
		}
		for k, v := range configs {
			c.topicCfg[k] = &v
		}
	})
}

// WithShufflePurgeInterval sets how often, at most, the reader of a
// shuffle partition in a slot of a distributed job deletes the records
// below the offset its latest completed checkpoint holds (Kafka:
// DeleteRecords, which needs Delete on the topic), as Kafka Streams
// purges its repartition topics. Zero purges at every completed
// checkpoint; a negative interval never purges, and the topics grow for
// as long as the job runs (their retention is off by default). A
// failed or refused purge is logged, never fatal. Outside a distributed
// job nothing is purged: a retained checkpoint or a savepoint may be
// restored there, and needs the records after its own offsets. Default:
// DefaultShufflePurgeInterval.
func WithShufflePurgeInterval(d time.Duration) ShuffleOption {
	return shuffleOptionFunc(func(c *shuffleConfig) { c.purgeEvery = d })
}

// WithShuffleSinkOptions passes options to the shuffle's sinks, such as
// WithTransactionTimeout, WithCommitTimeout or
// WithTransactionalIDPoolSize. The shuffle's own settings win over them:
// exactly-once, the channel as transactional id prefix, and the manual
// partitioner.
func WithShuffleSinkOptions(opts ...SinkOption) ShuffleOption {
	return shuffleOptionFunc(func(c *shuffleConfig) { c.sink = append(c.sink, opts...) })
}

// WithShuffleSourceOptions passes options to the shuffle's sources, such as
// WithGroupID for lag monitoring. The shuffle's own settings win over
// them: its topic, read_committed, the earliest offsets, unbounded, no
// partition discovery after the first, and the owner rule.
func WithShuffleSourceOptions(opts ...SourceOption) ShuffleOption {
	return shuffleOptionFunc(func(c *shuffleConfig) { c.source = append(c.source, opts...) })
}

// Shuffle is runtime.Shuffle over Kafka: the channel c is the topic
// c.shuffle with one partition per shuffle partition, written by the
// exactly-once Sink with transactional ids c-<subtask>-<n> and read
// read_committed by the Source from the earliest offsets, subtask i
// reading the partitions the runtime's owner rule gives it. A record keeps
// its event timestamp across, or its lack of one.
//
// Both sides create the topic when it is missing, when a writer starts
// and when the source first lists its partitions, so any process may be
// first; a topic that exists with another number of partitions fails the
// job without restarts (it wraps connector.ErrInvalidConfiguration), as
// does a channel that makes no valid topic name.
type Shuffle struct {
	cfg shuffleConfig
}

var _ runtime.Shuffle = (*Shuffle)(nil)

// NewShuffle returns a Kafka shuffle. It checks the options as NewSource
// and NewSink do (WithBrokers is required) and fails with every problem
// it finds, in an error wrapping connector.ErrInvalidConfiguration.
func NewShuffle(opts ...ShuffleOption) (*Shuffle, error) {
	cfg := defaultShuffleConfig()
	for _, o := range opts {
		o.applyShuffle(&cfg)
	}
	s := &Shuffle{cfg: cfg}
	var errs []error
	if cfg.replication == 0 || cfg.replication < -1 {
		errs = append(errs, fmt.Errorf("kafka shuffle: replication factor %d: give a positive number, or -1 for the brokers' default (WithShuffleReplicationFactor): %w",
			cfg.replication, connector.ErrInvalidConfiguration))
	}
	// The channel's options are those of any channel: build both sides
	// once so that Sink and Source, which cannot return an error, meet
	// none.
	if _, err := s.newSink("check", 1); err != nil {
		errs = append(errs, fmt.Errorf("kafka shuffle: %w", err))
	}
	if _, err := s.newSource("check", 1, nil); err != nil {
		errs = append(errs, fmt.Errorf("kafka shuffle: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// ShuffleTopic is the topic that carries channel.
func ShuffleTopic(channel string) string { return channel + ShuffleTopicSuffix }

// Sink adds the writing side of channel to ds: an exactly-once Sink
// writing each record's value to partition Partition of the channel's
// topic, with UID "shuffle-sink:"+channel. A record whose partition is
// outside [0, partitions) fails the job.
func (s *Shuffle) Sink(ds runtime.DataStream[connector.ShuffleRecord], channel string, partitions int) runtime.DataStreamSink {
	sink, err := s.newSink(channel, partitions)
	if err != nil {
		// NewShuffle built a sink with the same options.
		panic(fmt.Sprintf("kafka shuffle: sink of channel %q: %v", channel, err))
	}
	return runtime.SinkTo(ds, connector.Sink[connector.ShuffleRecord](sink)).
		Name("shuffle-sink " + channel).UID("shuffle-sink:" + channel)
}

// Source adds the reading side of channel to env: a Source reading the
// channel's topic with UID "shuffle-source:"+channel, subtask i of
// parallelism p reading the partitions for which owner(partition, p) ==
// i (nil: the Kafka source's own rule). owner must depend on its
// arguments alone: the enumerator calls it on the coordinator goroutine
// and each reader on its task goroutine. Records carry no watermark.
//
// A job restored at another parallelism must run with
// runtime.WithRescaledSplitsToEnumerator, so that the restored splits
// are assigned by owner; without it the engine deals them out
// round-robin, and the first reader given a split owner does not give it
// fails the job without restarts.
func (s *Shuffle) Source(env *runtime.Environment, channel string, partitions int, owner func(partition, parallelism int) int) runtime.DataStream[connector.ShuffleRecord] {
	src, err := s.newSource(channel, partitions, owner)
	if err != nil {
		// NewShuffle built a source with the same options.
		panic(fmt.Sprintf("kafka shuffle: source of channel %q: %v", channel, err))
	}
	return runtime.FromSource(env, connector.Source[connector.ShuffleRecord, Split, EnumeratorState](&shuffleSource{Source: src, channel: channel, purgeEvery: s.cfg.purgeEvery}),
		"shuffle-source "+channel).UID("shuffle-source:" + channel)
}

var _ connector.ShuffleEnds = (*Shuffle)(nil)

// Ends makes the Shuffle a connector.ShuffleEnds: the high watermark of
// every partition of each channel's topic, leaving out channels whose
// topic does not exist. The high watermark, not the last stable offset:
// it lies past the records of transactions still open, which an earlier
// run may commit or abort later, and a reader starting there reads
// neither. It asks with the clients' options of the shuffle's sources
// (WithShuffleSourceOptions), which need Describe on the topics.
func (s *Shuffle) Ends(ctx context.Context, channels map[string]int) (map[string][]int64, error) {
	src, err := s.newSource("ends", 1, nil)
	if err != nil {
		// NewShuffle built a source with the same options.
		return nil, fmt.Errorf("kafka shuffle: %w", err)
	}
	cfg := &src.cfg
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.kgoOpts...), kgo.SeedBrokers(cfg.seeds...))...)
	if err != nil {
		return nil, fmt.Errorf("kafka shuffle: client to list the channels' ends: %w", err)
	}
	defer cl.Close()
	topics := make([]string, 0, len(channels))
	for ch := range channels {
		topics = append(topics, ShuffleTopic(ch))
	}
	for {
		ends, err := listEnds(ctx, kadm.NewClient(cl), topics)
		if err == nil {
			out := make(map[string][]int64, len(ends))
			for ch := range channels {
				if e, ok := ends[ShuffleTopic(ch)]; ok {
					out[ch] = e
				}
			}
			return out, nil
		}
		if !kerr.IsRetriable(err) {
			return nil, fmt.Errorf("kafka shuffle: list the ends of %v: %w", topics, authorizationOf(err, cfg.security, ResourceTopic, topics[0], false, "Describe", useShuffleDesc))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("kafka shuffle: list the ends of %v (last answer: %w): %w", topics, err, ctx.Err())
		}
	}
}

// listEnds returns the high watermark of every partition of topics, by
// partition; a topic that does not exist is left out.
func listEnds(ctx context.Context, adm *kadm.Client, topics []string) (map[string][]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := map[string][]int64{}
	for topic, ps := range listed {
		if p, ok := ps[-1]; ok {
			if errors.Is(p.Err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("topic %s: %w", topic, p.Err)
		}
		ends := make([]int64, len(ps))
		for _, p := range ps {
			if p.Err != nil {
				return nil, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, p.Err)
			}
			if p.Partition < 0 || int(p.Partition) >= len(ps) {
				return nil, fmt.Errorf("topic %s: partition %d listed among %d", topic, p.Partition, len(ps))
			}
			ends[p.Partition] = p.Offset
		}
		out[topic] = ends
	}
	return out, nil
}

func (s *Shuffle) newSink(channel string, partitions int) (*Sink[connector.ShuffleRecord], error) {
	topic := ShuffleTopic(channel)
	ser := topicsSerializer[connector.ShuffleRecord]{topics: []string{topic}, ser: RecordSerializerFunc[connector.ShuffleRecord](
		func(r connector.ShuffleRecord, ts int64) (*kgo.Record, error) {
			if r.Partition < 0 || int(r.Partition) >= partitions {
				return nil, fmt.Errorf("kafka shuffle: record for partition %d of channel %q, which has partitions 0 to %d", r.Partition, channel, partitions-1)
			}
			rec := &kgo.Record{Topic: topic, Partition: r.Partition, Value: r.Value}
			if ts != connector.NoTimestamp {
				rec.Timestamp = time.UnixMilli(ts)
			} else {
				rec.Headers = []kgo.RecordHeader{{Key: noTimestampHeader}}
			}
			return rec, nil
		})}
	opts := append(append([]SinkOption(nil), s.cfg.sink...),
		// The shuffle's guarantee wins over one the user gave, as its
		// other settings do, rather than conflicting with it.
		sinkOptionFunc(func(c *sinkConfig) { c.chosen = nil }),
		WithExactlyOnce(channel),
		sinkOptionFunc(func(c *sinkConfig) {
			// After the user's client options, so the record's own
			// partition is always the one written.
			c.kgoOpts = append(c.kgoOpts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			c.prepare = s.prepare(channel, partitions)
			// The channel's prefix begins with the job's name, which
			// the job's group keeps to one job.
			c.noLease = true
		}))
	return NewSink[connector.ShuffleRecord](ser, opts...)
}

func (s *Shuffle) newSource(channel string, partitions int, owner func(partition, parallelism int) int) (*Source[connector.ShuffleRecord], error) {
	topic := ShuffleTopic(channel)
	deser := DeserializerFunc[connector.ShuffleRecord](func(r *kgo.Record) (connector.ShuffleRecord, error) {
		return connector.ShuffleRecord{Partition: r.Partition, Value: r.Value}, nil
	})
	// A fetch is bounded in compressed bytes, and shuffle batches of
	// small records compress well: franz-go's defaults (50 MiB a fetch)
	// held hundreds of MiB of decompressed records per reader ahead of
	// the operators. The user's options come after, and win.
	fetch := WithClientOpts(kgo.FetchMaxBytes(shuffleFetchMaxBytes), kgo.FetchMaxPartitionBytes(shuffleFetchMaxPartitionBytes))
	opts := append([]SourceOption{fetch}, s.cfg.source...)
	opts = append(opts, sourceOptionFunc(func(c *sourceConfig) {
		c.topics, c.topicRegex = []string{topic}, nil
		c.starting = EarliestOffsets()
		c.bounded, c.stopping = false, Offsets{}
		c.readCommitted = true
		// The topic is made with its partitions once and for all; a
		// partition added later would be one no writer targets.
		c.discovery = 0
		c.prepare = s.prepare(channel, partitions)
		c.timestampOf = shuffleTimestamp
		if owner != nil {
			c.owner = func(tp TopicPartition, parallelism int) int { return owner(int(tp.Partition), parallelism) }
		}
	}))
	return NewSource[connector.ShuffleRecord](deser, opts...)
}

// The shuffle source's fetch bounds (WithShuffleSourceOptions with
// WithClientOpts overrides them). A slot reads one partition of a
// channel, so that partition may fill the whole fetch.
const (
	shuffleFetchMaxBytes          = 4 << 20
	shuffleFetchMaxPartitionBytes = 4 << 20
)

// shuffleTimestamp is the event time the sink was given for r:
// connector.NoTimestamp if it was written without one.
func shuffleTimestamp(r *kgo.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == noTimestampHeader {
			return connector.NoTimestamp
		}
	}
	return r.Timestamp.UnixMilli()
}

// prepare returns the step both sides run before they touch the channel's
// topic: check the channel and the partition count, and make sure the
// topic exists with that many partitions.
func (s *Shuffle) prepare(channel string, partitions int) func(context.Context, *kgo.Client, Security) error {
	return func(ctx context.Context, cl *kgo.Client, sec Security) error {
		if err := checkChannel(channel, partitions); err != nil {
			return err
		}
		return ensureShuffleTopic(ctx, cl, sec, ShuffleTopic(channel), partitions, s.cfg.replication, s.topicConfigs())
	}
}

// topicConfigs are the configurations a shuffle topic is created with:
// the user's, and retention off unless the user set it. A stopped job's
// records committed to a shuffle topic and not yet read are needed when
// it starts again, however long it was stopped; the broker's default
// retention (7 days) would delete them. The readers purge what no
// restore can need instead (shufflePurger).
func (s *Shuffle) topicConfigs() map[string]*string {
	configs := maps.Clone(s.cfg.topicCfg)
	if configs == nil {
		configs = map[string]*string{}
	}
	for _, k := range []string{"retention.ms", "retention.bytes"} {
		if _, ok := configs[k]; !ok {
			configs[k] = kmsg.StringPtr("-1")
		}
	}
	return configs
}

// checkChannel refuses a channel that makes no valid topic name (Kafka:
// letters, digits, '.', '_' and '-', at most 249 characters) and a
// partition count below 1.
func checkChannel(channel string, partitions int) error {
	var errs []error
	if channel == "" {
		errs = append(errs, errors.New("empty channel name"))
	}
	if n := len(ShuffleTopic(channel)); n > maxTopicName {
		errs = append(errs, fmt.Errorf("channel %q makes a topic name of %d characters, above Kafka's %d", channel, n, maxTopicName))
	}
	for _, r := range channel {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			errs = append(errs, fmt.Errorf("channel %q has %q; a topic name takes letters, digits, '.', '_' and '-' only", channel, r))
			break
		}
	}
	if partitions < 1 {
		errs = append(errs, fmt.Errorf("channel %q with %d partitions; it needs at least 1", channel, partitions))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka shuffle: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	return nil
}

// ensureShuffleTopic makes sure topic exists with partitions partitions.
// Several processes may run it at once: the loser of a creation race gets
// TOPIC_ALREADY_EXISTS and checks the winner's topic like any existing
// one. An existing topic is looked at first, so a principal without the
// right to create topics can use topics made beforehand. A refused right
// is an *AuthorizationError, which fails the job without restarts.
func ensureShuffleTopic(ctx context.Context, cl *kgo.Client, sec Security, topic string, partitions int, replication int16, configs map[string]*string) error {
	for {
		n, err := shuffleTopicPartitions(ctx, cl, topic)
		if err != nil {
			err = authorizationOf(err, sec, ResourceTopic, topic, false, "Describe", useShuffleDesc)
		}
		switch {
		case err != nil:
			return err
		case n > 0 && n != partitions:
			return fmt.Errorf("kafka shuffle: topic %q has %d partitions, and the channel needs %d (one per partition of the channel: the job's slots); "+
				"a topic left by a job of another slot count, or made by an earlier splitflow, which gave a keyed edge a partition per key group, cannot carry this job's records: "+
				"finish the job with the splitflow that made it, or delete the topic or rename the job to start afresh: %w",
				topic, n, partitions, connector.ErrInvalidConfiguration)
		case n > 0:
			return awaitLeaders(ctx, cl, sec, topic)
		}
		resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), replication, configs, topic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			// Made; the controller answered before the brokers know the
			// topic. The source lists it right after this returns, so wait
			// until a broker shows its partitions, as the losers of a
			// creation race do, and then until they are led.
			for {
				n, err := shuffleTopicPartitions(ctx, cl, topic)
				switch {
				case err != nil:
					return err
				case n > 0:
					return awaitLeaders(ctx, cl, sec, topic)
				}
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return fmt.Errorf("kafka shuffle: topic %q was created and is not known yet: %w", topic, err)
				}
			}
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Made by another process meanwhile: check its partitions.
		case kerr.IsRetriable(err):
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("kafka shuffle: create topic %q: %w", topic, err)
			}
		default:
			return fmt.Errorf("kafka shuffle: create topic %q with %d partitions, replication factor %d: %w",
				topic, partitions, replication, authorizationOf(err, sec, ResourceTopic, topic, false, "Create", useShuffleMake))
		}
	}
}

// shuffleTopicPartitions returns how many partitions topic has, 0 if it
// does not exist. It asks a broker each time: kadm's listing answers from
// the client's metadata cache (up to MetadataMinAge, 5s by default, old),
// which after a lost creation race still says the topic does not exist.
// A topic being created may be known to the broker answering before its
// partitions are (LEADER_NOT_AVAILABLE); it asks again until they are or
// ctx ends.
func shuffleTopicPartitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	for {
		t, terr := kfetch.Topic(ctx, cl, topic)
		var n int
		if t != nil {
			n = len(t.Partitions)
		}
		switch {
		case errors.Is(terr, kerr.UnknownTopicOrPartition):
			return 0, nil
		case terr == nil && n > 0:
			return n, nil
		case terr != nil && !kerr.IsRetriable(terr):
			return 0, fmt.Errorf("kafka shuffle: %w", terr)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return 0, fmt.Errorf("kafka shuffle: topic %q has no partitions yet: %w", topic, err)
		}
	}
}

// awaitLeaders returns once every partition of topic answers ListOffsets
// from the broker metadata names as its leader. A broker lists a new
// topic's partitions before it has taken up their leadership, and the
// first produce or fetch to a partition not yet led is refused
// (NOT_LEADER_OR_FOLLOWER); franz-go then waits for a metadata refresh,
// which it makes at most every MetadataMinAge (5s by default), so a fresh
// job's first checkpoint waited about that long. For a topic that has
// been up for a while this is two round trips. Each request goes to its
// broker straight, since the client's own retries would hide a partition
// not yet led.
func awaitLeaders(ctx context.Context, cl *kgo.Client, sec Security, topic string) error {
	for {
		last := partitionsLed(ctx, cl, topic)
		if last == nil {
			return nil
		}
		if !kerr.IsRetriable(last) {
			return fmt.Errorf("kafka shuffle: topic %q: %w", topic, authorizationOf(last, sec, ResourceTopic, topic, false, "Describe", useShuffleDesc))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("kafka shuffle: topic %q: its partitions are not led yet (last answer: %w): %w", topic, last, err)
		}
	}
}

// partitionsLed asks topic's metadata, then every leader for its
// partitions' end offsets, and returns the first error met: a partition
// without leader is LEADER_NOT_AVAILABLE.
func partitionsLed(ctx context.Context, cl *kgo.Client, topic string) error {
	t, err := kfetch.Topic(ctx, cl, topic)
	if err != nil {
		return err
	}
	byLeader := map[int32][]int32{}
	for _, p := range t.Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return err
		}
		if p.Leader < 0 {
			return kerr.LeaderNotAvailable
		}
		byLeader[p.Leader] = append(byLeader[p.Leader], p.Partition)
	}
	for leader, ps := range byLeader {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = -1 // the end
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return err
		}
		for _, t := range resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
