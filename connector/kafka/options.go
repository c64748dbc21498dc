package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SourceOption configures a Source.
type SourceOption interface{ apply(*sourceConfig) }

type sourceOptionFunc func(*sourceConfig)

func (f sourceOptionFunc) apply(c *sourceConfig) { f(c) }

type sourceConfig struct {
	seeds          []string
	topics         []string
	topicRegex     *regexp.Regexp
	groupID        string
	starting       Offsets
	bounded        bool
	stopping       Offsets
	discovery      time.Duration
	readCommitted  bool
	skipBadRecords bool
	// outOfRange is WithOutOfRangeReset's; ResetNone: fail.
	outOfRange OffsetResetStrategy
	// deadLetters is WithDeadLetterOutput's side output id; "": none.
	deadLetters     string
	deadLettersSet  bool
	kgoOpts         []kgo.Opt
	logger          *slog.Logger
	commitOnCheckpt bool
	// security, securityOpts and optErrs are WithSecurity's (security.go).
	security     Security
	securityOpts []kgo.Opt
	optErrs      []error
	// closeCommitTimeout bounds how long the reader's Close waits for
	// the group offset commits under way.
	closeCommitTimeout time.Duration
	// maxPollRecords is WithMaxPollRecords': the most records one fetch
	// of the reader hands over.
	maxPollRecords int
	// owner, when set, replaces ownerOf as the rule that gives each
	// split its subtask (the shuffle's owner rule, shuffle.go).
	owner func(tp TopicPartition, parallelism int) int
	// prepare, when set, runs once in the enumerator's discovery before
	// the topics are listed (the shuffle creates its topic there).
	prepare func(context.Context, *kgo.Client, Security) error
	// timestampOf, when set, is the event time a record is emitted with,
	// instead of its Kafka timestamp (the shuffle keeps "none").
	timestampOf func(*kgo.Record) int64
}

func defaultSourceConfig() sourceConfig {
	return sourceConfig{
		starting:        EarliestOffsets(),
		outOfRange:      ResetNone,
		discovery:       30 * time.Second,
		readCommitted:   true,
		commitOnCheckpt: true,
		logger:          slog.Default(),

		closeCommitTimeout: 5 * time.Second,
		maxPollRecords:     DefaultMaxPollRecords,
	}
}

func (c *sourceConfig) validate() error {
	errs := checkBrokers(c.seeds)
	if len(c.topics) == 0 && c.topicRegex == nil {
		errs = append(errs, errors.New("no topics (WithTopics or WithTopicRegex)"))
	}
	if len(c.topics) > 0 && c.topicRegex != nil {
		errs = append(errs, errors.New("both a topic list and a topic regex; choose one"))
	}
	if c.starting.kind == offsetsCommitted && c.groupID == "" {
		errs = append(errs, errors.New("committed starting offsets need a group id (WithGroupID)"))
	}
	if c.bounded && c.stopping.kind == offsetsCommitted && c.groupID == "" {
		errs = append(errs, errors.New("committed stopping offsets need a group id (WithGroupID)"))
	}
	if c.discovery < 0 {
		errs = append(errs, fmt.Errorf("negative partition discovery interval %s", c.discovery))
	}
	if c.deadLettersSet && c.deadLetters == "" {
		errs = append(errs, errors.New("WithDeadLetterOutput with an empty side output id"))
	}
	if c.deadLettersSet && c.skipBadRecords {
		errs = append(errs, errors.New("both WithSkipBadRecords and WithDeadLetterOutput; choose one"))
	}
	if c.outOfRange < ResetEarliest || c.outOfRange > ResetNone {
		errs = append(errs, fmt.Errorf("unknown out-of-range reset strategy %d (WithOutOfRangeReset)", c.outOfRange))
	}
	if c.closeCommitTimeout < 0 {
		errs = append(errs, fmt.Errorf("negative close commit timeout %s (WithCloseCommitTimeout)", c.closeCommitTimeout))
	}
	if c.maxPollRecords < 1 {
		errs = append(errs, fmt.Errorf("max poll records %d must be at least 1 (WithMaxPollRecords; the default is %d)", c.maxPollRecords, DefaultMaxPollRecords))
	}
	errs = append(errs, c.optErrs...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka source: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	c.kgoOpts = withSecurityFirst(c.securityOpts, c.kgoOpts)
	return nil
}

// CheckBrokers reports every seed broker address no client could dial (an
// empty one, one without a port or host, a port outside 1 to 65535), all
// of them in one error wrapping connector.ErrInvalidConfiguration; nil if
// every address is host:port. NewSource and NewSink check WithBrokers so;
// a program that takes addresses from its users (a --brokers flag) calls
// it to report them with its other settings, before it dials anything.
func CheckBrokers(seeds ...string) error {
	if err := errors.Join(checkBrokers(seeds)...); err != nil {
		return fmt.Errorf("%w: %w", err, connector.ErrInvalidConfiguration)
	}
	return nil
}

// checkBrokers returns a problem for every seed broker no client could
// dial: franz-go would dial ":9092" for an empty address and add Kafka's
// default port to an address without one, and a job would then restart
// forever against a broker that is not there.
func checkBrokers(seeds []string) []error {
	if len(seeds) == 0 {
		return []error{errors.New("no seed brokers (WithBrokers)")}
	}
	var errs []error
	for _, s := range seeds {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("broker address %q is empty; give host:port (WithBrokers)", s))
			continue
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			var ae *net.AddrError
			if errors.As(err, &ae) && strings.Contains(ae.Err, "missing port") {
				errs = append(errs, fmt.Errorf("broker address %q has no port; give host:port, such as %s (WithBrokers)",
					s, net.JoinHostPort(strings.Trim(s, "[]"), "9092")))
			} else {
				errs = append(errs, fmt.Errorf("broker address %q is not host:port: %w (WithBrokers)", s, err))
			}
			continue
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("broker address %q has no valid port (1 to 65535); give host:port (WithBrokers)", s))
			continue
		}
		if host == "" {
			errs = append(errs, fmt.Errorf("broker address %q has no host; give host:port (WithBrokers)", s))
		}
	}
	return errs
}

// Option configures a Source, a Sink and a Shuffle's source and sink alike.
type Option interface {
	SourceOption
	SinkOption
	ShuffleOption
}

type commonOption struct {
	src func(*sourceConfig)
	snk func(*sinkConfig)
}

func (o commonOption) apply(c *sourceConfig)   { o.src(c) }
func (o commonOption) applySink(c *sinkConfig) { o.snk(c) }
func (o commonOption) applyShuffle(c *shuffleConfig) {
	c.source = append(c.source, o)
	c.sink = append(c.sink, o)
}

// WithBrokers sets the seed brokers, host:port each (Flink:
// bootstrap.servers). Required; NewSource and NewSink refuse an empty list,
// an empty address and an address without a valid port.
func WithBrokers(seeds ...string) Option {
	return commonOption{
		src: func(c *sourceConfig) { c.seeds = append(c.seeds, seeds...) },
		snk: func(c *sinkConfig) { c.seeds = append(c.seeds, seeds...) },
	}
}

// WithTopics reads these topics (Flink: setTopics). Exactly one of
// WithTopics and WithTopicRegex is required.
func WithTopics(topics ...string) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.topics = append(c.topics, topics...) })
}

// WithTopicRegex reads every topic whose whole name matches re, including
// topics created while the job runs (Flink: setTopicPattern). Internal topics
// (names beginning with "__") are never matched.
func WithTopicRegex(re *regexp.Regexp) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.topicRegex = re })
}

// WithGroupID sets a consumer group id. A checkpoint's offsets are
// committed to it once the job's sinks have committed that checkpoint's
// output (never before, and never a partition's offset below one committed
// before), for monitoring lag and for a new job that starts from
// CommittedOffsets, which then skips nothing; progress itself lives in
// checkpoints and never depends on the group (Flink: group.id with
// commit.offsets.on.checkpoint). Default: none, nothing committed.
func WithGroupID(group string) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.groupID = group })
}

// WithStartingOffsets sets where partitions found at the first discovery
// start (Flink: setStartingOffsets). Partitions found later always start at
// the earliest offset, since their records were all written after the job
// started. Default: EarliestOffsets().
func WithStartingOffsets(o Offsets) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.starting = o })
}

// WithBounded makes the source bounded: every partition found at the first
// discovery is read up to the stopping offset o resolves, then the source
// ends; no partition is discovered later (Flink: setBounded). Splits
// restored from a checkpoint or savepoint of an unbounded job have no
// stopping offset: a bounded source gives them the one o resolves at the
// restore, so the job reads up to there and ends. Default: unbounded.
func WithBounded(o Offsets) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.bounded, c.stopping = true, o })
}

// WithPartitionDiscoveryInterval sets how often an unbounded source looks for
// new partitions and topics (Flink: partition.discovery.interval.ms);
// zero turns discovery after the first off. Default: 30s.
func WithPartitionDiscoveryInterval(d time.Duration) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.discovery = d })
}

// WithReadUncommitted reads records of open and aborted transactions too
// (Flink: isolation.level=read_uncommitted). Default: read_committed, which
// exactly-once pipelines need.
func WithReadUncommitted() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.readCommitted = false })
}

// WithSkipBadRecords drops records the deserializer rejects, counting them,
// instead of failing the job. Default: a rejected record fails the job with
// its topic, partition and offset.
func WithSkipBadRecords() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.skipBadRecords = true })
}

// WithOutOfRangeReset says what a split does when its next offset is no
// longer in the partition's log (Kafka's auto.offset.reset, which the
// source applies to this case only; starting offsets are
// WithStartingOffsets'). That happens when retention or DeleteRecords
// removed records before the source read them, to a split restored from
// an old checkpoint or to a reader that fell behind, and when the topic
// was deleted and created again. ResetEarliest resumes at the log start,
// ResetLatest at the end; either logs the partition, the offset and the
// log's range at error level, and the records in the gap never reach the
// output. Default: ResetNone, the job fails with an
// *OffsetOutOfRangeError naming the partition and the gap, and does not
// restart (a restart would restore the same offset).
func WithOutOfRangeReset(s OffsetResetStrategy) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.outOfRange = s })
}

// WithDeadLetterOutput sends every record the deserializer rejects to the
// side output id of the source's stream, as a DeadLetter (its key, value,
// headers, topic, partition, offset, timestamp and the error), instead of
// failing the job; the records are counted with the skipped ones. The
// stream FromSource returns must declare the side output:
//
//	dlq := runtime.NewOutputTag[kafka.DeadLetter]("dead-letters")
//	in := runtime.FromSource(env, src, "in").DeclareSideOutputs(dlq)
//	runtime.SinkTo(runtime.SideOutput(in, dlq), dlqSink) // kafka.DeadLetterSerializer
//
// Dead letters flow through the job like its records: between the same
// checkpoint barriers, so an exactly-once sink writes each once, with the
// output of the checkpoint it was read in. A reader whose stream does not
// declare id, or declares it with another type, fails the job without
// restarts. Not with WithSkipBadRecords. Default: none.
func WithDeadLetterOutput(id string) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.deadLetters, c.deadLettersSet = id, true })
}

// WithoutOffsetCommits stops committing offsets to the group on checkpoint
// completion (Flink: commit.offsets.on.checkpoint=false).
func WithoutOffsetCommits() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.commitOnCheckpt = false })
}

// WithCloseCommitTimeout bounds how long a reader, when its task ends (a
// bounded job finishing, a drain), waits for the group offset commit in
// flight and the one queued behind it; these carry the offsets of the job's
// last checkpoint, where a new job from CommittedOffsets starts. Past d it
// cancels them and logs it, and the group stays one checkpoint or more
// behind, so such a job writes that output again. A failover or hard stop
// cancels them at once. 0 does not wait. Default: 5s.
func WithCloseCommitTimeout(d time.Duration) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.closeCommitTimeout = d })
}

// DefaultMaxPollRecords is WithMaxPollRecords' default.
const DefaultMaxPollRecords = 5000

// WithMaxPollRecords sets the most records a reader takes from its client
// at a time, the batch it hands to the task (Kafka and Flink:
// max.poll.records, whose default is 500). The rest of a fetch waits in the
// client, which sends no next fetch before it is taken: so a reader holds
// about one fetch's records (fetch.max.bytes and max.partition.fetch.bytes,
// set with WithClientOpts, as decompressed records of franz-go's 150-odd
// bytes each) plus its element queue's batches of at most n records each,
// however small the records. Default: DefaultMaxPollRecords, 5000.
func WithMaxPollRecords(n int) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.maxPollRecords = n })
}

// WithClientOpts passes franz-go options to the clients (fetch and batch
// sizes; TLS and SASL are better given with WithSecurity, which also names
// the principal in authorization errors). Options that decide what is consumed (kgo.ConsumeTopics)
// or how transactions run (kgo.TransactionalID) must not be given: the
// source assigns partitions and the sink names transactions itself.
func WithClientOpts(opts ...kgo.Opt) Option {
	return commonOption{
		src: func(c *sourceConfig) { c.kgoOpts = append(c.kgoOpts, opts...) },
		snk: func(c *sinkConfig) { c.kgoOpts = append(c.kgoOpts, opts...) },
	}
}

// WithLogger sets the logger. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return commonOption{
		src: func(c *sourceConfig) { c.logger = l },
		snk: func(c *sinkConfig) { c.logger = l },
	}
}
