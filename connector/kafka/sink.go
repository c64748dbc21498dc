package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeliveryGuarantee is what a Sink promises about records written before a
// failure (Sink.Guarantee). One option chooses it: WithExactlyOnce,
// WithAtLeastOnce or WithNoGuarantee; without one a sink is AtLeastOnce.
type DeliveryGuarantee int

const (
	// AtLeastOnce flushes at every checkpoint: nothing acknowledged by a
	// checkpoint is lost; records after it may be written twice on
	// recovery (WithAtLeastOnce, the default).
	AtLeastOnce DeliveryGuarantee = iota
	// ExactlyOnce writes each checkpoint's records in one Kafka transaction
	// per subtask, committed after the checkpoint completes: read_committed
	// consumers see every record once (WithExactlyOnce).
	ExactlyOnce
	// NoGuarantee flushes only at the end of input: records may be lost
	// or duplicated on failure (WithNoGuarantee).
	NoGuarantee
)

func (g DeliveryGuarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	case NoGuarantee:
		return "none"
	default:
		return "unknown"
	}
}

// SinkOption configures a Sink.
type SinkOption interface{ applySink(*sinkConfig) }

type sinkOptionFunc func(*sinkConfig)

func (f sinkOptionFunc) applySink(c *sinkConfig) { f(c) }

type sinkConfig struct {
	seeds     []string
	guarantee DeliveryGuarantee
	prefix    string
	// chosen holds the guarantee options given, in order, so that
	// validate refuses two different ones instead of letting the last
	// win silently.
	chosen        []guaranteeChoice
	txnTimeout    time.Duration
	poolSize      int
	commitTimeout time.Duration
	kgoOpts       []kgo.Opt
	logger        *slog.Logger
	// security, securityOpts and optErrs are WithSecurity's (security.go).
	security     Security
	securityOpts []kgo.Opt
	optErrs      []error
	// noBrokerTimeoutCheck is WithoutBrokerTimeoutCheck's (authz.go).
	noBrokerTimeoutCheck bool
	// prepare, when set, runs when a writer is created, before anything
	// else (the shuffle creates its topic there).
	prepare func(context.Context, *kgo.Client, Security) error
	// leaseSession is WithPrefixLeaseSessionTimeout's; noLease skips the
	// lease (the shuffle's sinks, whose prefix the job's name keeps to
	// one job).
	leaseSession time.Duration
	noLease      bool
}

func defaultSinkConfig() sinkConfig {
	return sinkConfig{
		guarantee:     AtLeastOnce,
		txnTimeout:    15 * time.Minute,
		poolSize:      8,
		commitTimeout: 30 * time.Second,
		logger:        slog.Default(),
		leaseSession:  10 * time.Second,
	}
}

func (c *sinkConfig) validate() error {
	errs := checkBrokers(c.seeds)
	if err := c.checkGuarantee(); err != nil {
		errs = append(errs, err)
	}
	if c.commitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("commit timeout %s is not positive (WithCommitTimeout)", c.commitTimeout))
	}
	if c.leaseSession <= 0 {
		errs = append(errs, fmt.Errorf("prefix lease session timeout %s is not positive (WithPrefixLeaseSessionTimeout)", c.leaseSession))
	}
	if c.poolSize < 2 {
		errs = append(errs, fmt.Errorf("transactional id pool size %d is below 2", c.poolSize))
	}
	errs = append(errs, c.optErrs...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka sink: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	c.kgoOpts = withSecurityFirst(c.securityOpts, c.kgoOpts)
	return nil
}

// checkGuarantee refuses two different guarantee options, two prefixes,
// and an exactly-once prefix no transactional id could carry.
func (c *sinkConfig) checkGuarantee() error {
	for i := 1; i < len(c.chosen); i++ {
		first, o := c.chosen[0], c.chosen[i]
		switch {
		case o.guarantee != first.guarantee && (o.guarantee == ExactlyOnce || first.guarantee == ExactlyOnce):
			return fmt.Errorf("both %s and %s; give one: a transactional id prefix is for exactly-once alone, at-least-once and no guarantee write without transactions",
				first.option, o.option)
		case o.guarantee != first.guarantee:
			return fmt.Errorf("both %s and %s; a sink has one delivery guarantee, give one of them", first.option, o.option)
		case o.prefix != first.prefix:
			return fmt.Errorf("both %s and %s; give the sink one transactional id prefix", first.option, o.option)
		}
	}
	if c.guarantee != ExactlyOnce {
		return nil
	}
	if c.prefix == "" {
		return errors.New(`WithExactlyOnce("") has no transactional id prefix; give one unique to this sink in the cluster`)
	}
	if err := txn.ValidatePrefix(c.prefix); err != nil {
		return fmt.Errorf("%w (WithExactlyOnce)", err)
	}
	return nil
}

// guaranteeChoice is one guarantee option given, for checkGuarantee.
type guaranteeChoice struct {
	guarantee DeliveryGuarantee
	prefix    string
	option    string // as the user wrote it: WithExactlyOnce("orders")
}

func (c *sinkConfig) choose(g DeliveryGuarantee, prefix, option string) {
	c.guarantee, c.prefix = g, prefix
	c.chosen = append(c.chosen, guaranteeChoice{g, prefix, option})
}

// WithExactlyOnce makes the sink exactly-once (ExactlyOnce; Flink:
// setDeliveryGuarantee(EXACTLY_ONCE) with setTransactionalIdPrefix): each
// subtask writes a checkpoint's records in one Kafka transaction, which
// its committer commits once the checkpoint completes. The transactional
// ids are transactionalIDPrefix:<subtask>-<n>. The prefix is required (an
// empty one is refused) and may not hold ':' (txn.Terminator), which ends
// it in every id, so that an ACL on the ids prefixed "prefix:" covers
// this sink's alone. It must be unique to this sink across every job
// writing to the cluster: a restarted job uses it to find and abort what
// its previous run left open. Not with WithAtLeastOnce or
// WithNoGuarantee. Default: AtLeastOnce.
func WithExactlyOnce(transactionalIDPrefix string) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		c.choose(ExactlyOnce, transactionalIDPrefix, fmt.Sprintf("WithExactlyOnce(%q)", transactionalIDPrefix))
	})
}

// WithAtLeastOnce makes the sink at-least-once (AtLeastOnce; Flink:
// setDeliveryGuarantee(AT_LEAST_ONCE)), the default: every checkpoint
// waits for the records written before it to be acknowledged, and a
// recovery may write the records after it again. Not with
// WithExactlyOnce or WithNoGuarantee. (Flink defaults to none; splitflow
// defaults to the strongest guarantee that needs no transactional id.)
func WithAtLeastOnce() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.choose(AtLeastOnce, "", "WithAtLeastOnce()") })
}

// WithNoGuarantee makes the sink promise nothing on failure (NoGuarantee;
// Flink: setDeliveryGuarantee(NONE)): it flushes only at the end of input,
// and records may be lost or written twice on failure. Not with
// WithExactlyOnce or WithAtLeastOnce. Default: AtLeastOnce.
func WithNoGuarantee() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.choose(NoGuarantee, "", "WithNoGuarantee()") })
}

// WithTransactionTimeout sets the producers' transaction.timeout.ms. The
// broker aborts a transaction open longer than this, so it must exceed the
// longest a transaction can stay open, (1 + tolerable checkpoint failures)
// x (max(checkpoint interval, checkpoint timeout + min pause) + checkpoint
// timeout) + commit timeout + restart delay, plus in a slot of a
// distributed job the takeover of the slot by another process
// (connector.Takeover), which the sink checks at start; and it must not exceed the brokers' transaction.max.timeout.ms
// (default 15 minutes), which the sink reads at start where it may.
// Default: 15 minutes.
func WithTransactionTimeout(d time.Duration) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.txnTimeout = d })
}

// WithCommitTimeout bounds one attempt to commit a transaction after its
// checkpoint completed; a commit that keeps meeting transient answers
// (the coordinator loading or moving) that long is retried later, and the
// task reacts to cancellation meanwhile. It counts in the longest a
// transaction can stay open, which the transaction timeout must exceed.
// Default: 30s.
func WithCommitTimeout(d time.Duration) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.commitTimeout = d })
}

// WithPrefixLeaseSessionTimeout sets the session timeout of the lease
// that keeps the transactional id prefix to one job (default 10s;
// Kafka's session.timeout.ms, within the brokers'
// group.min.session.timeout.ms and group.max.session.timeout.ms). In
// exactly-once mode the sink's first writer joins the consumer group
// prefix:lease before it touches an id, and the sink holds it while it
// has writers; a start that finds another job there waits this long for
// it to expire (a process killed without leaving holds it that long) and
// is then refused with a *txn.PrefixHeldError. Every process of one job
// shares the lease: in a distributed job all processes of the job, in
// another job the sink of one process.
func WithPrefixLeaseSessionTimeout(d time.Duration) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.leaseSession = d })
}

// WithTransactionalIDPoolSize sets how many transactional ids each subtask
// may use (default 8); see txn.WithPoolSize.
func WithTransactionalIDPoolSize(n int) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.poolSize = n })
}

// RecordSerializer turns an element into the Kafka record to write: topic,
// key, value, headers and, if set, partition (with a partitioner option in
// WithClientOpts). timestamp is the element's event time in milliseconds or
// connector.NoTimestamp.
type RecordSerializer[T any] interface {
	Serialize(element T, timestamp int64) (*kgo.Record, error)
}

// RecordSerializerFunc adapts a function to RecordSerializer.
type RecordSerializerFunc[T any] func(element T, timestamp int64) (*kgo.Record, error)

// Serialize calls f.
func (f RecordSerializerFunc[T]) Serialize(element T, timestamp int64) (*kgo.Record, error) {
	return f(element, timestamp)
}

// KeyValueSerializer writes to topic a record whose key and value fn
// returns, with the element's timestamp.
func KeyValueSerializer[T any](topic string, fn func(T) (key, value []byte, err error)) RecordSerializer[T] {
	return topicsSerializer[T]{topics: []string{topic}, ser: RecordSerializerFunc[T](func(v T, ts int64) (*kgo.Record, error) {
		k, val, err := fn(v)
		if err != nil {
			return nil, err
		}
		r := &kgo.Record{Topic: topic, Key: k, Value: val}
		if ts != connector.NoTimestamp {
			r.Timestamp = time.UnixMilli(ts)
		}
		return r, nil
	})}
}

// Sink writes elements to Kafka with the configured delivery guarantee.
// runtime.SinkTo runs it with that guarantee: in ExactlyOnce mode with its
// committer (it is connector.TwoPhaseCapable, a
// connector.TwoPhaseCommittingSink of txn.Committable), otherwise as a
// plain sink.
//
// Exactly-once follows the rules of package txn. At start every writer
// aborts the transactions its subtask's ids left open (which also fences
// writers of older attempts), sparing every committable of the restored
// checkpoint, which its committer learns first
// (connector.RestoredCommittablesListener). The engine must commit restored
// committables before it creates the writer of the same subtask, as Flink
// does by initializing a chain from its tail: registering the ids would
// otherwise abort them. A writer whose producer is fenced by a newer one
// (another attempt) fails with an error wrapping txn.ErrFenced and never
// registers its ids again. The prefix belongs to one job: the first
// writer takes its lease (txn.AcquireLease, the group prefix:lease)
// before it touches an id, and a writer of another job is refused
// (WithPrefixLeaseSessionTimeout).
//
// In a slot of a distributed job (the init context is a
// connector.ClaimInfo) each claim of the slot has ids of its own
// (txn.ClaimTransactionalID), and a writer aborts lingering transactions
// of its own and older claims only: an older owner that lives on after a
// newer one claimed the slot cannot register the newer owner's ids, which
// would abort a transaction whose checkpoint it recorded.
type Sink[T any] struct {
	cfg sinkConfig
	ser RecordSerializer[T]

	mu    sync.Mutex
	pools map[int]*txn.Pool // the live writer's pool of each subtask, shared with its committer
	// restored holds, per subtask, the transactional ids whose restored
	// committables the committer committed before the writer existed. The
	// writer must neither register them anew nor use them until a new
	// checkpoint completes: a failure before then restores and commits
	// the same committables again, which a moved epoch would refuse.
	restored map[int][]string
	// spare holds, per subtask, the transactional ids of every committable
	// of the checkpoint the subtask restored from (of all its old
	// subtasks), which the committer learned before the writer exists
	// (connector.RestoredCommittablesListener). The writer's cleanup
	// aborts none of them: another subtask may be about to commit one.
	spare map[int][]string
	// latest numbers the exactly-once writers of each subtask, to tell the
	// newest from writers of older attempts still closing (writerGen).
	latest map[int]uint64
	// written holds, per subtask, the topics its writers wrote in
	// transactions they prepared, and ended whether its writer's input
	// ended: the committer's marker check (hanging.go) reads both.
	written map[int][]string
	ended   map[int]bool
	// unchecked holds, per subtask, the committed transactions a closed
	// committer could not check the markers of (its broker away): the
	// subtask's next committer in this process goes on watching them.
	unchecked map[int][]watchedCommit

	// leaseMu orders the lease's acquisition and release; lease is held
	// while leaseUsers writers live (see acquireLease). instance tells
	// this sink from another job's in the same prefix's lease.
	leaseMu    sync.Mutex
	lease      *txn.Lease
	leaseUsers int
	instance   string
}

var (
	_ connector.TwoPhaseCommittingSink[string, txn.Committable] = (*Sink[string])(nil)
	_ connector.TwoPhaseCapable[string]                         = (*Sink[string])(nil)
)

// NewSink returns a sink that writes elements as ser makes them. It checks
// the options and fails with every problem it finds (no brokers, an empty
// broker address or one without a valid port among them), in an error
// wrapping connector.ErrInvalidConfiguration.
func NewSink[T any](ser RecordSerializer[T], opts ...SinkOption) (*Sink[T], error) {
	if ser == nil {
		return nil, errors.New("kafka sink: nil serializer")
	}
	cfg := defaultSinkConfig()
	for _, o := range opts {
		o.applySink(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Sink[T]{cfg: cfg, ser: ser, pools: map[int]*txn.Pool{}, restored: map[int][]string{}, spare: map[int][]string{}, latest: map[int]uint64{},
		written: map[int][]string{}, ended: map[int]bool{}, unchecked: map[int][]watchedCommit{},
		instance: newInstanceID()}, nil
}

// TwoPhase implements connector.TwoPhaseCapable: in exactly-once mode the
// sink commits in two phases, and runtime.SinkTo runs it with its
// committer; otherwise it runs as a plain sink.
func (s *Sink[T]) TwoPhase() (connector.HiddenTwoPhaseSink[T], bool) {
	if s.cfg.guarantee != ExactlyOnce {
		return nil, false
	}
	return connector.HideCommittable[T, txn.Committable](s), true
}

// CommitterRequired is true in exactly-once mode: the records are visible
// only once the committer commits. A wrapper that hides TwoPhase but
// passes this on is refused by runtime.SinkTo instead of running without
// a committer.
func (s *Sink[T]) CommitterRequired() bool { return s.cfg.guarantee == ExactlyOnce }

// Guarantee returns the sink's delivery guarantee.
func (s *Sink[T]) Guarantee() DeliveryGuarantee { return s.cfg.guarantee }

// clientOpts are the options of every client of the sink; extra (client
// metrics) come before the user's options.
func (s *Sink[T]) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	return append(append(append([]kgo.Opt(nil), extra...), s.cfg.kgoOpts...), kgo.SeedBrokers(s.cfg.seeds...))
}

// checkTimings fails when a transaction could time out before the
// checkpoint that commits it completes, and refuses exactly-once without
// checkpoints in an unbounded job.
//
// A transaction opens with the first record after barrier N-1 reaches the
// writer, so at or after checkpoint N-1's trigger, and commits after
// checkpoint N completes. N is triggered at most max(interval, timeout +
// min pause) after N-1 (N-1 may take up to the timeout, then the pause
// runs) and completes within the timeout; a failed checkpoint leaves the
// prepared transaction to the next, so each tolerated failure adds one
// such cycle. Then a commit attempt takes up to the commit timeout, and a
// failure meanwhile restarts the job, which commits the restored
// transaction after the restart delay. In a slot of a distributed job the
// process may die instead, and the slot's next owner commits the
// transaction after a takeover (connector.Takeover). Writing the
// checkpoint's metadata is not bounded by the configuration and is not
// counted (milliseconds for a directory).
func (s *Sink[T]) checkTimings(ctx connector.SinkInitContext) error {
	p, ok := ctx.(connector.CheckpointConfigProvider)
	if !ok {
		return nil
	}
	cc := p.CheckpointConfig()
	if cc.Interval <= 0 {
		if cc.Unbounded {
			return fmt.Errorf("kafka sink: exactly-once in an unbounded job needs checkpoints: without them the writer's one transaction commits only at the end of input, which never comes; turn checkpoints on (runtime.WithCheckpointInterval) or use WithAtLeastOnce(): %w",
				connector.ErrInvalidConfiguration)
		}
		// A bounded job without checkpoints runs in one transaction,
		// committed at the end of input: its run must fit in the
		// transaction timeout, which the configuration cannot tell.
		return nil
	}
	cycle := max(cc.Interval, cc.Timeout+cc.MinPause) + cc.Timeout
	need := time.Duration(1+cc.TolerableFailures)*cycle + s.cfg.commitTimeout + cc.MaxRestartDelay
	// In a slot, the process holding a prepared transaction may die
	// instead: the slot's next owner commits it after the takeover. A
	// slot may also restart first and its process die before the commit,
	// so the takeover adds to the restart delay.
	tk := cc.Takeover
	takeover := ""
	if tk != (connector.Takeover{}) {
		need += tk.Total()
		takeover = fmt.Sprintf(" + takeover of the slot by another process (session timeout %s + rebalance timeout %s + claim %s + restore %s, counted as one checkpoint timeout)",
			tk.SessionTimeout, tk.RebalanceTimeout, tk.Claim, tk.Restore)
	}
	if s.cfg.txnTimeout <= need {
		shorten := "shorten the checkpoint timings"
		if takeover != "" {
			shorten += " or the distributed job's session timeout"
		}
		return fmt.Errorf("kafka sink: transaction.timeout.ms (%s) must exceed the longest a transaction can stay open, "+
			"(1 + tolerable checkpoint failures %d) x (max(interval %s, checkpoint timeout %s + min pause %s) + checkpoint timeout %s) + commit timeout %s + restart delay %s%s = %s, "+
			"or the broker aborts prepared transactions and their records are lost; raise it with WithTransactionTimeout (and the broker's transaction.max.timeout.ms if needed) or %s: %w",
			s.cfg.txnTimeout, cc.TolerableFailures, cc.Interval, cc.Timeout, cc.MinPause, cc.Timeout, s.cfg.commitTimeout, cc.MaxRestartDelay, takeover, need,
			shorten, connector.ErrInvalidConfiguration)
	}
	return nil
}

// CreateWriter returns the writer of one subtask.
func (s *Sink[T]) CreateWriter(ictx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	g := metrics.GroupOf(ictx)
	w := &sinkWriter[T]{s: s, sub: ictx.SubtaskIndex(), bytesOut: g.BytesOut(), txns: transactionsCounter(g)}
	w.task = ictx.Context()
	w.ctx, w.cancel = context.WithCancel(w.task)
	if err := s.prepareWriter(ictx.Context()); err != nil {
		w.cancel()
		return nil, err
	}
	if err := s.probeSink(ictx); err != nil {
		w.cancel()
		return nil, err
	}
	if s.cfg.guarantee != ExactlyOnce {
		cl, err := kgo.NewClient(s.clientOpts(clientMetricOpts(g, "sink")...)...)
		if err != nil {
			w.cancel()
			return nil, fmt.Errorf("kafka sink: client: %w", err)
		}
		w.cl = cl
		return w, nil
	}
	if ci, ok := ictx.(connector.CommitterInfo); ok && !ci.CommitterRuns() {
		w.cancel()
		return nil, fmt.Errorf("kafka sink: exactly-once makes records visible only through its committer, and this writer runs without one, so nothing it writes would be committed: "+
			"the sink was added as a plain one (a wrapper around it passes on neither connector.TwoPhaseCapable nor connector.CommitterRequired to runtime.SinkTo); "+
			"pass TwoPhase on from the wrapper, or use WithAtLeastOnce(): %w", connector.ErrInvalidConfiguration)
	}
	if err := s.checkTimings(ictx); err != nil {
		w.cancel()
		return nil, err
	}
	// Before any id is touched: another job's are not this one's to abort.
	lease, err := s.acquireLease(ictx)
	if err != nil {
		w.cancel()
		return nil, err
	}
	w.lease = lease
	epoch := claimEpoch(ictx)
	pool, err := txn.NewPool(s.cfg.prefix, w.sub, txn.WithPoolSize(s.cfg.poolSize), txn.WithClaimEpoch(epoch),
		txn.WithTransactionTimeout(s.cfg.txnTimeout), txn.WithClientOpts(s.clientOpts(clientMetricOpts(g, "sink-txn")...)...))
	if err != nil {
		if lease != nil {
			s.releaseLease()
		}
		w.cancel()
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	s.mu.Lock()
	keep := s.restored[w.sub]
	for _, id := range s.spare[w.sub] {
		if !slices.Contains(keep, id) {
			keep = append(keep, id)
		}
	}
	delete(s.restored, w.sub)
	delete(s.spare, w.sub)
	// Before abortLingering: from here on an older writer of the subtask
	// is a zombie whose open transaction this writer aborts and counts.
	s.latest[w.sub]++
	w.gen = s.latest[w.sub]
	s.ended[w.sub] = false
	s.mu.Unlock()
	if err := s.abortLingering(ictx, epoch, keep, w.txns); err != nil {
		// This writer will never exist, so it counts no abort: an older
		// writer still closing is the latest again and counts its own.
		s.mu.Lock()
		if s.latest[w.sub] == w.gen {
			s.latest[w.sub]--
		}
		s.mu.Unlock()
		if lease != nil {
			s.releaseLease()
		}
		w.cancel()
		return nil, err
	}
	pool.Reserve(keep...)
	// The kept ids this subtask owns are registered anew once a checkpoint
	// taken after this start completes (see fenceRestored).
	own := txn.Lingering{Prefix: s.cfg.prefix, Subtask: w.sub, Parallelism: ictx.Parallelism(), Epoch: epoch}
	for _, id := range keep {
		if own.Owns(id) {
			w.fence = append(w.fence, id)
		}
	}
	w.fenceAfter = -1
	w.metrics = g
	w.claim, w.par = epoch, ictx.Parallelism()
	w.pool = pool
	s.mu.Lock()
	s.pools[w.sub] = pool
	s.mu.Unlock()
	return w, nil
}

// prepareWriter runs the configuration's prepare step, if any, with an
// admin client of its own.
func (s *Sink[T]) prepareWriter(ctx context.Context) error {
	if s.cfg.prepare == nil {
		return nil
	}
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("kafka sink: client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.cfg.prepare(ctx, cl, s.cfg.security)
}

// claimEpoch is the claim the subtask runs under (connector.ClaimInfo), 0
// outside a distributed job.
func claimEpoch(ictx connector.SinkInitContext) int64 {
	if ci, ok := ictx.(connector.ClaimInfo); ok {
		return ci.ClaimEpoch()
	}
	return 0
}

func (s *Sink[T]) abortLingering(ictx connector.SinkInitContext, epoch int64, keep []string, txns *prometheus.CounterVec) error {
	cl, err := kgo.NewClient(s.clientOpts(clientMetricOpts(metrics.GroupOf(ictx), "sink-admin")...)...)
	if err != nil {
		return fmt.Errorf("kafka sink: client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ictx.Context(), 2*time.Minute)
	defer cancel()
	if err := s.checkBrokerMaxTimeout(ctx, cl); err != nil {
		return err
	}
	began := time.Now()
	var kept []txn.Committable
	for _, id := range keep {
		kept = append(kept, txn.Committable{TransactionalID: id})
	}
	aborted, err := txn.AbortLingering(ctx, cl, txn.Lingering{
		Prefix: s.cfg.prefix, Subtask: ictx.SubtaskIndex(), Parallelism: ictx.Parallelism(), Epoch: epoch, ProbeIDs: s.cfg.poolSize,
		FenceAll: true, Keep: kept,
	})
	if err != nil {
		return fmt.Errorf("kafka sink: %w",
			authorizationOf(err, s.cfg.security, ResourceTransactionalID, s.txnIDACLPrefix(), true, "Write", useSinkTxnIDs))
	}
	s.cfg.logger.Debug("kafka sink: registered the subtask's transactional ids", "subtask", ictx.SubtaskIndex(), "attempt", ictx.AttemptNumber())
	if len(aborted) > 0 {
		txns.WithLabelValues("aborted").Add(float64(len(aborted)))
		s.cfg.logger.Info("kafka sink: aborted lingering transactions", "subtask", ictx.SubtaskIndex(),
			"transactional_ids", aborted, "took", time.Since(began))
	}
	return nil
}

// checkBrokerMaxTimeout fails when the transaction timeout exceeds the
// brokers' transaction.max.timeout.ms: the broker would refuse to register
// the ids (INVALID_TRANSACTION_TIMEOUT) on every attempt. A principal
// without DescribeConfigs on the cluster fails the start with an
// *AuthorizationError (WithoutBrokerTimeoutCheck skips the check); where
// the setting cannot be read for another reason, it logs so and goes on.
func (s *Sink[T]) checkBrokerMaxTimeout(ctx context.Context, cl *kgo.Client) error {
	if s.cfg.noBrokerTimeoutCheck {
		return nil
	}
	limit, err := brokerMaxTxnTimeout(ctx, kadm.NewClient(cl))
	if err := authorizationOf(err, s.cfg.security, ResourceCluster, "", false, "DescribeConfigs", useSinkConfigs); errors.Is(err, ErrNotAuthorized) || errors.Is(err, ErrAuthenticationFailed) {
		return fmt.Errorf("kafka sink: %w", err)
	}
	if err != nil && ctx.Err() != nil {
		// Cut short by the writer's cancellation: nothing was learned
		// about the brokers, and the task is going away.
		return fmt.Errorf("kafka sink: transaction timeout check: %w", context.Cause(ctx))
	}
	if err != nil {
		s.cfg.logger.Warn("kafka sink: cannot read the brokers' transaction.max.timeout.ms; the transaction timeout is checked against the checkpoint configuration only",
			"transaction_timeout", s.cfg.txnTimeout, "err", err)
		return nil
	}
	if s.cfg.txnTimeout > limit {
		return fmt.Errorf("kafka sink: transaction.timeout.ms (%s) exceeds the brokers' transaction.max.timeout.ms (%s), so they refuse to register the transactional ids; lower it with WithTransactionTimeout or raise transaction.max.timeout.ms on every broker: %w",
			s.cfg.txnTimeout, limit, connector.ErrInvalidConfiguration)
	}
	return nil
}

// brokerMaxTxnTimeout returns the lowest transaction.max.timeout.ms of the
// cluster's brokers.
func brokerMaxTxnTimeout(ctx context.Context, adm *kadm.Client) (time.Duration, error) {
	const key = "transaction.max.timeout.ms"
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return 0, err
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return 0, err
	}
	limit := time.Duration(-1)
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, fmt.Errorf("broker %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != key || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("broker %s: %s %q: %w", rc.Name, key, *c.Value, err)
			}
			if d := time.Duration(ms) * time.Millisecond; limit < 0 || d < limit {
				limit = d
			}
		}
	}
	if limit < 0 {
		return 0, fmt.Errorf("no broker reported %s", key)
	}
	return limit, nil
}

// noteRestored remembers an id whose restored committable was committed
// before the subtask's writer exists.
func (s *Sink[T]) noteRestored(subtask int, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.restored[subtask], id) {
		s.restored[subtask] = append(s.restored[subtask], id)
	}
}

// isLatest reports whether gen numbers the newest exactly-once writer of
// subtask. Only that writer counts the aborts of its own transactions: the
// open transaction of an older one was aborted, and counted, by a newer
// writer's abortLingering, and the older writer's own abort may still
// succeed or fail (it is fenced) without telling which.
func (s *Sink[T]) isLatest(subtask int, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest[subtask] == gen
}

// txnIDACLPrefix is the narrowest prefix of the sink's transactional ids
// (txn.IDPrefix: prefix:, which no other prefix's ids begin with), the one
// the documented ACL and an AuthorizationError name.
func (s *Sink[T]) txnIDACLPrefix() string { return txn.IDPrefix(s.cfg.prefix) }

// txnIDACLPrefixOf is txnIDACLPrefix for id, which may have the legacy
// layout of a restored checkpoint (txn.IsLegacyID): those are covered by
// the ACL on the ids prefixed prefix-, which the job needs until it
// completed a checkpoint of its own.
func (s *Sink[T]) txnIDACLPrefixOf(id string) string {
	if txn.IsLegacyID(s.cfg.prefix, id) {
		return s.cfg.prefix + "-"
	}
	return s.txnIDACLPrefix()
}

func (s *Sink[T]) pool(subtask int) *txn.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[subtask]
}

func (s *Sink[T]) dropPool(subtask int, p *txn.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pools[subtask] == p {
		delete(s.pools, subtask)
	}
}

// CreateCommitter returns the committer of one subtask.
func (s *Sink[T]) CreateCommitter(ictx connector.SinkInitContext) (connector.Committer[txn.Committable], error) {
	g := metrics.GroupOf(ictx)
	restoredFrom := int64(-1)
	if id, ok := ictx.RestoredCheckpointID(); ok {
		restoredFrom = id
	}
	sub := ictx.SubtaskIndex()
	return &committer[T]{s: s, sub: sub, metrics: g, txns: transactionsCounter(g), restoredFrom: restoredFrom, hanging: hangingCounter(g),
		watched: s.takeUnchecked(sub),
		latency: g.Histogram(metricCommitTime, "Time a Kafka sink committer took to commit one transaction, retries of transient answers included.",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30})}, nil
}

// CommittableSerializer encodes committables for the committer's state.
func (s *Sink[T]) CommittableSerializer() connector.VersionedSerializer[txn.Committable] {
	return CommittableSerializer{}
}

type sinkWriter[T any] struct {
	s   *Sink[T]
	sub int
	// ctx is the task's (SinkInitContext.Context), also cancelled by
	// Close: every blocking call of the writer takes it (a produce waiting
	// for buffer space, a flush, the producer id, registering ids), so a
	// failover or a hard stop unblocks a writer stuck on its broker.
	ctx    context.Context
	cancel context.CancelFunc
	task   context.Context

	cl *kgo.Client // AtLeastOnce and NoGuarantee

	pool  *txn.Pool  // ExactlyOnce
	lease *txn.Lease // the sink's, counted for this writer until Close
	tx    *txn.Txn
	gen   uint64 // see Sink.isLatest
	// fence lists the ids of restored committables this subtask owns,
	// which its start did not register anew; fenceAfter is the first
	// checkpoint this writer prepared (-1 before), whose completion
	// registers them (fenceRestored).
	fence      []string
	fenceAfter int64
	metrics    *metrics.Group
	// claim is the epoch of the slot's claim the writer runs under (0:
	// none) and par its parallelism; adm is the client that aborts older
	// claims' transactions at completed checkpoints (abortOlderClaims),
	// made at first use. Task goroutine only.
	claim int64
	par   int
	adm   *kgo.Client

	mu     sync.Mutex
	errOut error // first failed produce of AtLeastOnce and NoGuarantee

	// txTopics are the topics written in the open transaction (ExactlyOnce,
	// task goroutine only), lastTopic the latest of them: a refused write
	// names its topic (refusedWrite), and the transaction's promise does not
	// see the record.
	txTopics  []string
	lastTopic string

	// bytes counts what Write was given since the last publication to
	// bytesOut (task goroutine only), so that the counter is touched per
	// bytesPublishEvery records and at flushes, not per record.
	bytes    int64
	written  int
	bytesOut prometheus.Counter
	txns     *prometheus.CounterVec
}

// bytesPublishEvery is how many records a writer counts before it adds
// their bytes to its counter.
const bytesPublishEvery = 1024

func (w *sinkWriter[T]) publishBytes() {
	if w.bytes > 0 {
		w.bytesOut.Add(float64(w.bytes))
		w.bytes = 0
	}
	w.written = 0
}

func (w *sinkWriter[T]) count(rec *kgo.Record) {
	w.bytes += recordBytes(rec)
	if w.written++; w.written >= bytesPublishEvery {
		w.publishBytes()
	}
}

func (w *sinkWriter[T]) Write(v T, wc connector.WriteContext) error {
	rec, err := w.s.ser.Serialize(v, wc.Timestamp)
	if err != nil {
		return fmt.Errorf("kafka sink: serialize: %w", err)
	}
	if w.pool == nil {
		if err := w.err(); err != nil {
			return err
		}
		w.count(rec)
		w.cl.Produce(w.ctx, rec, w.promise)
		return nil
	}
	if w.tx == nil {
		if err := w.leaseErr(); err != nil {
			return err
		}
		if w.tx, err = w.pool.Begin(); err != nil {
			// A pooled id's client loads its producer id here, the first
			// request that a right revoked on the ids refuses.
			return fmt.Errorf("kafka sink: %w", w.refusedWrite(err, nil))
		}
	}
	w.count(rec)
	if rec.Topic != w.lastTopic || len(w.txTopics) == 0 {
		w.lastTopic = rec.Topic
		if !slices.Contains(w.txTopics, rec.Topic) {
			w.txTopics = append(w.txTopics, rec.Topic)
		}
	}
	w.tx.Produce(w.ctx, rec)
	return nil
}

func (w *sinkWriter[T]) promise(rec *kgo.Record, err error) {
	if err != nil {
		w.mu.Lock()
		if w.errOut == nil {
			w.errOut = fmt.Errorf("kafka sink: produce: %w", w.refusedWrite(err, []string{rec.Topic}))
		}
		w.mu.Unlock()
	}
}

// refusedWrite returns err as an *AuthorizationError when the broker
// refused a write for want of Write on a topic of topics (a right revoked
// after the start-up check) or a write or begin on the transactional ids,
// so that the job fails at once with the right named instead of
// restarting, only for the restarted writer's check to name it; err
// unchanged otherwise. Of several topics it names the one a fresh check
// finds without Write.
func (w *sinkWriter[T]) refusedWrite(err error, topics []string) error {
	sec := w.s.cfg.security
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		name := strings.Join(topics, ",")
		if len(topics) > 1 {
			if perr := w.s.probeTopicsWrite(w.task, topics); errors.Is(perr, ErrNotAuthorized) {
				return perr
			}
		}
		return authorizationOf(err, sec, ResourceTopic, name, false, "Write", useSinkTopic)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return authorizationOf(err, sec, ResourceTransactionalID, w.s.txnIDACLPrefix(), true, "Write", useSinkTxnIDs)
	}
	return err
}

func (w *sinkWriter[T]) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errOut
}

// Flush waits for buffered records: at every checkpoint for AtLeastOnce, at
// the end of input for NoGuarantee. Exactly-once flushes in PrepareCommit.
func (w *sinkWriter[T]) Flush(endOfInput bool) error {
	w.publishBytes()
	if endOfInput && w.pool != nil {
		w.s.setInputEnded(w.sub, true)
	}
	if w.pool != nil || (w.s.cfg.guarantee == NoGuarantee && !endOfInput) {
		return nil
	}
	if err := w.cl.Flush(w.ctx); err != nil {
		return fmt.Errorf("kafka sink: flush: %w", err)
	}
	return w.err()
}

// PrepareCommit flushes the open transaction and returns its committable;
// an empty or absent transaction yields none.
func (w *sinkWriter[T]) PrepareCommit(checkpointID int64) ([]txn.Committable, error) {
	if w.pool == nil {
		return nil, nil
	}
	// Commits confirmed before this point are not in the committer's
	// snapshot of this checkpoint, which follows this barrier.
	w.pool.SnapshotTaken(checkpointID)
	if w.fenceAfter < 0 {
		w.fenceAfter = checkpointID
	}
	if w.tx == nil {
		return nil, nil
	}
	if err := w.leaseErr(); err != nil {
		// Another job holds the prefix now and may abort the
		// transaction at any time: it is not handed to a checkpoint.
		_ = w.tx.Abort(w.ctx)
		w.tx, w.txTopics, w.lastTopic = nil, nil, ""
		return nil, err
	}
	tx, topics := w.tx, w.txTopics
	w.tx, w.txTopics, w.lastTopic = nil, nil, ""
	c, ok, err := tx.Prepare(w.ctx, checkpointID)
	if err != nil {
		// Prepare aborted the transaction.
		if w.s.isLatest(w.sub, w.gen) {
			w.txns.WithLabelValues("aborted").Inc()
		}
		return nil, fmt.Errorf("kafka sink: %w", w.refusedWrite(err, topics))
	}
	if !ok {
		return nil, nil
	}
	w.s.noteTopics(w.sub, topics)
	return []txn.Committable{c}, nil
}

// NotifyCheckpointComplete registers the restored committables' ids anew
// once that is safe, then lets the pool reuse the ids the checkpoint
// released.
func (w *sinkWriter[T]) NotifyCheckpointComplete(checkpointID int64) error {
	if w.pool == nil {
		return nil
	}
	if err := w.fenceRestored(checkpointID); err != nil {
		return err
	}
	w.pool.CheckpointComplete(checkpointID)
	w.abortOlderClaims(checkpointID)
	return nil
}

// abortOlderClaims aborts what older claims of the writer's slot opened
// after this writer's start (txn.AbortOlderClaims), at every completed
// checkpoint of a claim above the first. The start aborted what they had
// open then and fenced nothing else of theirs; an older owner still
// running (paused past the takeover, resumed) can open a transaction on
// another of its ids until it learns it lost the slot, and if it dies
// first the transaction pins every read_committed reader of its
// partitions until the broker's transaction timeout. The checkpoint is
// complete and recorded under this claim, so nothing an older claim has
// open is to be committed: the restored committables were committed
// before this writer started. A failure costs only the wait it would
// have spared, so it is logged and the next checkpoint tries again.
func (w *sinkWriter[T]) abortOlderClaims(checkpointID int64) {
	if w.claim <= 1 || w.fenceAfter < 0 || checkpointID < w.fenceAfter {
		// The first claim of a slot has no older one.
		return
	}
	if w.adm == nil {
		cl, err := kgo.NewClient(w.s.clientOpts(clientMetricOpts(w.metrics, "sink-admin")...)...)
		if err != nil {
			w.s.cfg.logger.Warn("kafka sink: client to abort older claims' transactions", "subtask", w.sub, "err", err)
			return
		}
		w.adm = cl
	}
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	aborted, err := txn.AbortOlderClaims(ctx, w.adm, txn.Lingering{Prefix: w.s.cfg.prefix, Subtask: w.sub, Parallelism: w.par, Epoch: w.claim})
	if len(aborted) > 0 {
		if w.s.isLatest(w.sub, w.gen) {
			w.txns.WithLabelValues("aborted").Add(float64(len(aborted)))
		}
		w.s.cfg.logger.Info("kafka sink: aborted transactions an older owner of the slot opened after this claim started", "subtask", w.sub,
			"claim", w.claim, "checkpoint", checkpointID, "transactional_ids", aborted)
	}
	if err != nil && w.ctx.Err() == nil {
		w.s.cfg.logger.Warn("kafka sink: aborting older claims' open transactions failed; the next checkpoint tries again, and the broker aborts them at their transaction timeout", "subtask", w.sub,
			"claim", w.claim, "checkpoint", checkpointID, "err",
			authorizationOf(err, w.s.cfg.security, ResourceTransactionalID, w.s.txnIDACLPrefix(), true, "Write", useSinkTxnIDs))
	}
}

// fenceRestored registers anew the ids of the restored committables this
// subtask owns, once a checkpoint this writer prepared has completed.
//
// The writer's start registers every other id of the subtask, but not
// these. Under transaction protocol v2 an EndTxn bumps the epoch and the
// client that sent it keeps the new one, so the previous attempt's producer
// that committed such a transaction may still hold a current epoch on its
// id. It is fenced here, in this order:
//
//  1. Checkpoint N completes; attempt 1 commits its committable c on id X
//     through its own client (epoch e+1 now) and fails.
//  2. Attempt 2 restores N: every committer commits the committables
//     handed to it (c again: committing a committed transaction with
//     epoch e succeeds), then the writers start. X is not registered:
//     should attempt 2 fail before a checkpoint of its own completes,
//     attempt 3 restores N and commits c once more, which a moved epoch
//     would refuse as PRODUCER_FENCED, a data loss that did not happen
//     (Pool.Reserve keeps X unused meanwhile).
//  3. A checkpoint M > N whose snapshot this writer took completes. Every
//     subtask acknowledged M after committing its restored committables,
//     and a restore goes to M or later, which holds no committable of X.
//  4. Here X is registered anew (its owner does it, also for ids of old
//     subtasks beyond the parallelism), which aborts whatever attempt 1
//     opened on it and fences its producer; only then does the pool
//     release X for use.
//
// Between 2 and 4 attempt 1's producer could still commit on X; it commits
// only once its own checkpoints complete, which a failed attempt in this
// process never sees again, and a second process cannot run the job from
// the same checkpoint directory (the directory lock refuses it at start).
func (w *sinkWriter[T]) fenceRestored(checkpointID int64) error {
	if len(w.fence) == 0 || w.fenceAfter < 0 || checkpointID < w.fenceAfter {
		return nil
	}
	cl, err := kgo.NewClient(w.s.clientOpts(clientMetricOpts(w.metrics, "sink-admin")...)...)
	if err != nil {
		return fmt.Errorf("kafka sink: client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	for len(w.fence) > 0 {
		id := w.fence[0]
		if _, err := txn.AbortAndFence(ctx, cl, id); err != nil {
			return fmt.Errorf("kafka sink: register transactional id %s anew after checkpoint %d, to fence the producers of earlier attempts: %w",
				id, checkpointID, authorizationOf(err, w.s.cfg.security, ResourceTransactionalID, w.s.txnIDACLPrefixOf(id), true, "Write", useSinkTxnIDs))
		}
		w.fence = w.fence[1:]
	}
	w.s.cfg.logger.Debug("kafka sink: registered the restored committables' ids anew", "subtask", w.sub, "checkpoint", checkpointID)
	return nil
}

// closeAbortTimeout bounds how long Close waits for the abort of the open
// transaction.
const closeAbortTimeout = 10 * time.Second

// Close aborts an open transaction (prepared ones stay for the committer or
// the next attempt) and closes the clients.
func (w *sinkWriter[T]) Close() error {
	w.cancel()
	w.publishBytes()
	if w.pool == nil {
		w.cl.Close()
		return nil
	}
	open := w.tx != nil
	w.s.dropPool(w.sub, w.pool)
	if w.lease != nil {
		defer w.s.releaseLease()
	}
	if w.adm != nil {
		w.adm.Close()
	}
	// Aborting the open transaction waits for the broker, a bounded time
	// even after a failover or a hard stop: a job that fails for good has
	// no next attempt to abort what is left open, and an open transaction
	// pins every read_committed consumer until the transaction timeout.
	ctx, cancel := context.WithTimeout(context.Background(), closeAbortTimeout)
	defer cancel()
	err := w.pool.Close(ctx) // aborts the open transaction
	if open && err == nil && w.s.isLatest(w.sub, w.gen) {
		// An abort that failed leaves the transaction to the next
		// writer's abortLingering, which counts it.
		w.txns.WithLabelValues("aborted").Inc()
	}
	return err
}

type committer[T any] struct {
	s   *Sink[T]
	sub int

	metrics *metrics.Group
	txns    *prometheus.CounterVec
	latency prometheus.Observer
	// restoredFrom is the checkpoint the committer's attempt restored
	// from, -1 for none. Its committables and older ones are restored:
	// the previous attempt may have committed them already.
	restoredFrom int64

	plain *kgo.Client // for committables no live pool holds, and the marker check

	// watched are the committed transactions whose commit markers are not
	// yet known to be all written (hanging.go); lastMarkerCheck is when
	// they were last checked, hanging counts the hanging commits ended.
	watched         []watchedCommit
	lastMarkerCheck time.Time
	checkFailed     bool // a check failed: later failures log at Debug
	watchFull       bool // the watch list overflowed: later overflows log at Debug
	markersOff      bool // transaction protocol v1: no checks
	hanging         prometheus.Counter
}

// Commit commits each committable through the live writer's pool of the
// subtask when there is one (the pool then reuses the id), else with a raw
// EndTxn. Transient failures are retried later; a transaction that can no
// longer be committed is a known-reason failure carrying a
// *txn.DataLossError.
func (c *committer[T]) Commit(ctx context.Context, reqs []connector.CommitRequest[txn.Committable]) error {
	var committed []txn.Committable
	for _, req := range reqs {
		cm := req.Committable()
		cctx, cancel := context.WithTimeout(ctx, c.s.cfg.commitTimeout)
		began := time.Now()
		var err error
		p := c.s.pool(c.sub)
		if p != nil {
			c.s.cfg.logger.Debug("kafka sink: commit through the writer's pool", "subtask", c.sub, "committable", cm.String())
			err = p.Commit(cctx, cm)
		} else {
			c.s.cfg.logger.Debug("kafka sink: commit with a raw EndTxn", "subtask", c.sub, "committable", cm.String())
			var cl *kgo.Client
			if cl, err = c.plainClient(); err != nil {
				cancel()
				return err
			}
			err = txn.Commit(cctx, cl, cm)
		}
		cancel()
		var dl *txn.DataLossError
		switch {
		case err == nil:
			// Committing an already committed transaction succeeds too, so
			// a restored committable cannot tell a first commit from a
			// repeat: it has an outcome of its own, and "committed" counts
			// each transaction of this attempt once.
			outcome := "committed"
			if cm.CheckpointID <= c.restoredFrom {
				outcome = "restored"
			}
			c.txns.WithLabelValues(outcome).Inc()
			c.latency.Observe(time.Since(began).Seconds())
			if p == nil {
				c.s.noteRestored(c.sub, cm.TransactionalID)
			}
			committed = append(committed, cm)
		case errors.As(err, &dl):
			c.s.cfg.logger.Error("kafka sink: transaction commit failed, its records are lost", "subtask", c.sub, "committable", cm.String(), "err", err)
			req.SignalFailedWithKnownReason(err)
		case ctx.Err() != nil:
			// The task is cancelled: the committables left are committed
			// after the restart, from the checkpoint.
			return fmt.Errorf("kafka sink: commit %s: %w", cm, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			c.s.cfg.logger.Warn("kafka sink: transaction commit timed out; retrying later", "subtask", c.sub, "committable", cm.String(), "retries", req.NumberOfRetries())
			req.RetryLater()
		default:
			// A commit refused for want of Write on the transactional ids
			// (revoked since the writer's start-up check) fails the job
			// with the right named, without restarts: the restarted
			// writer's check would only refuse it again. The transaction
			// stays open, so a restart once the right is back commits it.
			err = authorizationOf(err, c.s.cfg.security, ResourceTransactionalID, c.s.txnIDACLPrefixOf(cm.TransactionalID), true, "Write", useSinkTxnIDs)
			req.SignalFailedWithUnknownReason(fmt.Errorf("kafka sink: commit %s: %w", cm, err))
		}
	}
	c.watch(committed)
	return c.checkMarkers(ctx)
}

// RestoredCommittables keeps the ids of every committable of the restored
// checkpoint for the subtask's writer, whose cleanup must spare them.
func (c *committer[T]) RestoredCommittables(all []txn.Committable) {
	ids := make([]string, 0, len(all))
	for _, cm := range all {
		if !slices.Contains(ids, cm.TransactionalID) {
			ids = append(ids, cm.TransactionalID)
		}
	}
	c.s.mu.Lock()
	c.s.spare[c.sub] = ids
	c.s.mu.Unlock()
}

var _ connector.RestoredCommittablesListener[txn.Committable] = (*committer[string])(nil)

func (c *committer[T]) Close() error {
	c.closeMarkerCheck()
	if c.plain != nil {
		c.plain.Close()
		c.plain = nil
	}
	return nil
}

// CommittableSerializer encodes txn.Committable for checkpoints.
type CommittableSerializer struct{}

// Version 1: uvarint length and transactional id, int64 producer id, int16
// epoch, int64 checkpoint id, big-endian.
func (CommittableSerializer) Version() int { return 1 }

func (CommittableSerializer) Serialize(c txn.Committable) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(c.TransactionalID)))
	b = append(b, c.TransactionalID...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.ProducerID))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Epoch))
	return binary.BigEndian.AppendUint64(b, uint64(c.CheckpointID)), nil
}

func (CommittableSerializer) Deserialize(version int, data []byte) (txn.Committable, error) {
	if version != 1 {
		return txn.Committable{}, fmt.Errorf("kafka committable version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	n, k := binary.Uvarint(data)
	if k <= 0 || uint64(len(data)-k) != n+18 {
		return txn.Committable{}, fmt.Errorf("kafka committable: %d bytes do not hold one", len(data))
	}
	b := data[k:]
	return txn.Committable{
		TransactionalID: string(b[:n]),
		ProducerID:      int64(binary.BigEndian.Uint64(b[n:])),
		Epoch:           int16(binary.BigEndian.Uint16(b[n+8:])),
		CheckpointID:    int64(binary.BigEndian.Uint64(b[n+10:])),
	}, nil
}
