package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/internal/kfetch"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Change is one step of a member's slot ownership, as the job's consumer
// group decided it: a rebalance that assigned slots, revoked them, or
// found them lost.
type Change struct {
	// Member is this process's member id in the group.
	Member string
	// Generation is the group generation of the step, in which the
	// slots in Assigned were assigned.
	Generation int64
	// Assigned are the slots newly assigned to this member, sorted; each
	// is claimed (Ownership, with Generation and Confirm) before it is
	// restored.
	Assigned []int
	// Revoked are the slots taken from this member, sorted. Unless Lost,
	// the group waits for Done before another member may have them: the
	// slots stop with a final checkpoint and commit first.
	Revoked []int
	// Lost: the member's session ended (it was expired or fenced) and the
	// Revoked slots may already be another member's. They stop at once
	// and commit nothing more; Done need not be called.
	Lost bool
	// Owned are the slots this member owns after the step, with the
	// generation in which each was assigned (a slot kept across
	// rebalances keeps it).
	Owned map[int]int64

	done chan struct{}
	once *sync.Once
}

// Done tells the group that the Revoked slots are released. Safe to call
// more than once and on any Change.
func (c Change) Done() {
	if c.once != nil {
		c.once.Do(func() { close(c.done) })
	}
}

// MembershipOption configures Join.
type MembershipOption interface{ applyMembership(*membershipConfig) }

type membershipOptionFunc func(*membershipConfig)

func (f membershipOptionFunc) applyMembership(c *membershipConfig) { f(c) }

type membershipConfig struct {
	sessionTimeout   time.Duration
	heartbeat        time.Duration
	rebalanceTimeout time.Duration
	kafka            []kgo.Opt
	// logger is WithMembershipLogger's; nil when none was given (Join
	// then logs to slog.Default() with job=<job>).
	logger      *slog.Logger
	loggerGiven bool
	// replication is the replication factor <job>.slots is created with
	// (-1: the broker's default).
	replication int16
	// identity is the job every member must run (WithIdentity); nil:
	// any.
	identity *Identity
	// process is what the proofs of this member's slots name it by.
	process Process
}

func defaultMembershipConfig() membershipConfig {
	return membershipConfig{
		sessionTimeout:   10 * time.Second,
		heartbeat:        3 * time.Second,
		rebalanceTimeout: DefaultRebalanceTimeout,
		replication:      -1,
		process:          ThisProcess(),
	}
}

func (c *membershipConfig) validate() error {
	switch {
	case c.sessionTimeout <= 0:
		return fmt.Errorf("slots: session timeout %v; it must be positive (default 10s)", c.sessionTimeout)
	case c.heartbeat <= 0 || 3*c.heartbeat > c.sessionTimeout:
		return fmt.Errorf("slots: heartbeat interval %v with session timeout %v; heartbeat at least three times per session timeout", c.heartbeat, c.sessionTimeout)
	case c.rebalanceTimeout <= 0:
		return fmt.Errorf("slots: rebalance timeout %v; it must be positive (default 60s)", c.rebalanceTimeout)
	case c.loggerGiven && c.logger == nil:
		return errors.New("slots: nil logger; pass slog.New(slog.DiscardHandler) to drop logs")
	case c.replication == 0 || c.replication < -1:
		return fmt.Errorf("slots: replication factor %d; give 1 or more, or -1 for the broker's default", c.replication)
	}
	return nil
}

// WithSessionTimeout is how long the group coordinator waits for a silent
// member (crashed, paused, cut off) before it gives its slots to others
// (default 10s, so a crash is noticed within about ten seconds; Kafka's
// session.timeout.ms, which must lie within the broker's
// group.min.session.timeout.ms (6s by default) and
// group.max.session.timeout.ms).
func WithSessionTimeout(d time.Duration) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.sessionTimeout = d })
}

// WithHeartbeatInterval is how often the member heartbeats (default 3s;
// Kafka's heartbeat.interval.ms); at most a third of the session timeout.
func WithHeartbeatInterval(d time.Duration) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.heartbeat = d })
}

// DefaultRebalanceTimeout is WithRebalanceTimeout's default.
const DefaultRebalanceTimeout = 60 * time.Second

// WithRebalanceTimeout bounds a rebalance, so also how long a revoked
// slot may take to stop with its final checkpoint before Done (default
// 60s; Kafka's max.poll.interval.ms for the group protocol).
func WithRebalanceTimeout(d time.Duration) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.rebalanceTimeout = d })
}

// WithKafka adds franz-go options for the membership's clients: the
// seed brokers (required), security, a client id. Group, topic and
// balancer options are the membership's own and must not be given.
func WithKafka(opts ...kgo.Opt) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.kafka = append(c.kafka, opts...) })
}

// WithReplicationFactor is the replication factor the topic <job>.slots is
// created with when it is missing (default -1: the broker's
// default.replication.factor). An existing topic is used as it is.
func WithReplicationFactor(n int16) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.replication = n })
}

// WithMembershipLogger is where rebalances are logged (default
// slog.Default() with the attribute job=<job>). A given logger is used as
// it is, its lines with no job attribute of the membership's own: the
// runtime's names the job already, and a line that names it twice
// (job=clicks job=clicks) is one a log pipeline keeps the first or the
// last of, or refuses.
func WithMembershipLogger(l *slog.Logger) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.logger, c.loggerGiven = l, true })
}

// WithProcess is what this member's proofs (Confirm) name the process
// by (default ThisProcess(): the host name and the pid), for tools that
// tell which process holds which slot.
func WithProcess(p Process) MembershipOption {
	return membershipOptionFunc(func(c *membershipConfig) { c.process = p })
}

// Process names the OS process behind a member of the job's group. The
// group knows a member by its member id (kgo-<uuid>: franz-go's client id
// and a random suffix) and the address the broker saw it connect from,
// neither of which tells an operator which process on which host it is.
type Process struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
}

// ThisProcess is the running process: os.Hostname() ("" if it fails) and
// os.Getpid().
func ThisProcess() Process {
	host, _ := os.Hostname()
	return Process{Host: host, PID: os.Getpid()}
}

// String is "pid N on HOST".
func (p Process) String() string {
	host := p.Host
	if host == "" {
		host = "an unknown host"
	}
	return fmt.Sprintf("pid %d on %s", p.PID, host)
}

// Proof is what a member publishes when it proves its assignment of a
// slot (Confirm): the metadata of its offset commit of the slot's
// partition of <job>.slots, which the group keeps for each slot and
// anyone allowed to describe the group reads back (kadm's FetchOffsets).
// So the group holds, for every slot, the member that last proved it and
// the process that member is.
type Proof struct {
	// V is the form's version, 1.
	V       int    `json:"v"`
	Member  string `json:"member"`
	Process `json:"process"`
}

// proofVersion is the version of Proof's form this build writes.
const proofVersion = 1

// encode is the proof as an offset commit's metadata: compact JSON, far
// below the broker's offset.metadata.max.bytes (4096 by default) for any
// host name.
func (p Proof) encode() string {
	p.V = proofVersion
	b, _ := json.Marshal(p)
	return string(b)
}

// ParseProof reads the metadata of a slot's committed offset. It reports
// false for what is not a proof: the empty metadata of a build that
// published none, or a form it does not know.
func ParseProof(metadata string) (Proof, bool) {
	var p Proof
	if err := json.Unmarshal([]byte(metadata), &p); err != nil || p.V != proofVersion || p.Member == "" {
		return Proof{}, false
	}
	return p, true
}

// Membership is this process's membership in the job's slot group: a
// franz-go group consumer of the topic <job>.slots, one partition per
// slot, with the cooperative-sticky balancer, which consumes nothing and
// commits only Confirm's proofs. The group decides which member owns which slots; the
// Kafka group coordinator expires members that stop heartbeating and
// gives their slots to the others in a later generation.
type Membership struct {
	job   string
	slots int
	cfg   membershipConfig
	// topicID is <job>.slots's topic id, which offset commits from
	// version 10 on name the topic by.
	topicID [16]byte
	cl      *kgo.Client
	changes chan Change
	closing chan struct{}
	stopped chan struct{}
	// failed receives the refusal that ends the membership (a right
	// missing), once.
	failed chan error

	mu    sync.Mutex
	owned map[int]int64
	once  sync.Once
}

// Join joins the job's slot group, creating the topic <job>.slots with
// one partition per slot if it is missing (an existing one must have
// exactly that many partitions); ctx bounds that check and creation. The
// membership then runs until Close; rebalances are reported on Changes.
func Join(ctx context.Context, job string, slots int, opts ...MembershipOption) (*Membership, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	if slots < 1 {
		return nil, fmt.Errorf("slots: %d slots; a job has at least 1 (default %d)", slots, DefaultSlots)
	}
	cfg := defaultMembershipConfig()
	for _, o := range opts {
		o.applyMembership(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !cfg.loggerGiven {
		cfg.logger = slog.Default().With(slog.String("job", job))
	}
	topicID, err := ensureSlotsTopic(ctx, cfg.kafka, job, slots, cfg.replication)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		job: job, slots: slots, cfg: cfg, topicID: topicID,
		changes: make(chan Change),
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
		failed:  make(chan error, 1),
		owned:   map[int]int64{},
	}
	balancer := kgo.CooperativeStickyBalancer()
	if cfg.identity != nil {
		balancer = newJobBalancer(*cfg.identity)
	}
	kopts := append(slices.Clone(cfg.kafka),
		kgo.ConsumerGroup(Group(job)),
		kgo.ConsumeTopics(Topic(job)),
		kgo.Balancers(balancer),
		kgo.SessionTimeout(cfg.sessionTimeout),
		kgo.HeartbeatInterval(cfg.heartbeat),
		kgo.RebalanceTimeout(cfg.rebalanceTimeout),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(m.revoked),
		kgo.OnPartitionsLost(m.lost),
	)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("slots: job %s: group client: %w", job, err)
	}
	m.cl = cl
	// The group runs while the client polls; the topic holds no records,
	// so polling only keeps the consumer going. A refusal for want of a
	// right ends it: the group would never assign a slot, and the client
	// reports the refusal at every poll.
	go func() {
		defer close(m.stopped)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			var refused error
			fs.EachError(func(topic string, p int32, err error) {
				if refused == nil {
					refused = m.refusal(err)
				}
				if refused == nil {
					cfg.logger.Warn("slots: group consumer error", slog.String("topic", topic), slog.Int("partition", int(p)), slog.Any("error", err))
				}
			})
			if refused != nil {
				m.failed <- refused
				<-m.closing
				return
			}
		}
	}()
	return m, nil
}

// refusal is the membership's error for err when err is a refusal for want
// of a right, or of the group's members running another job, nil
// otherwise.
func (m *Membership) refusal(err error) error {
	switch {
	case errors.Is(err, kerr.InconsistentGroupProtocol) && m.cfg.identity != nil:
		return m.differentJob()
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return NotAllowed(m.job, "Read", "group", Group(m.job), "every process joins the job's group, which assigns the slots", err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return NotAllowed(m.job, "Read", "topic", Topic(m.job), "every process consumes the slots topic in the job's group and commits to it to confirm its claims", err)
	}
	return nil
}

// NotAllowed is the error of a distributed job whose principal lacks a
// right (docs/security.md lists them). It wraps
// connector.ErrInvalidConfiguration, as the connectors' refusals do: the
// job fails without restarts.
func NotAllowed(job, operation, resource, name, why string, err error) error {
	return fmt.Errorf("slots: job %s: not allowed to %s %s %q (%s); grant it as docs/security.md, \"The ACLs a distributed job needs besides\", says: %w: %w",
		job, operation, resource, name, why, connector.ErrInvalidConfiguration, err)
}

// Failed receives the refusal that ended the membership, if one did: a
// right the job needs is missing. The driver stops and Closes it.
func (m *Membership) Failed() <-chan error { return m.failed }

func ensureSlotsTopic(ctx context.Context, kopts []kgo.Opt, job string, slots int, replication int16) ([16]byte, error) {
	topic := Topic(job)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return [16]byte{}, fmt.Errorf("slots: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for attempt := 0; ; attempt++ {
		// Asked of a broker, not of the client's metadata cache: after a
		// lost creation race the cache says "missing" for seconds.
		n, id, err := describeTopic(ctx, cl, topic)
		if errors.Is(err, kerr.TopicAuthorizationFailed) {
			return [16]byte{}, NotAllowed(job, "Describe", "topic", topic, "every process reads the slots topic's partitions at start", err)
		}
		if err != nil {
			return [16]byte{}, fmt.Errorf("slots: describe topic %s: %w", topic, err)
		}
		if n > 0 {
			if n != slots {
				return [16]byte{}, fmt.Errorf("slots: topic %s has %d partitions but the job has %d slots; a job's slot count is fixed: use that many slots, or a new job name", topic, n, slots)
			}
			return id, nil
		}
		resp, err := adm.CreateTopic(ctx, int32(slots), replication, nil, topic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil && resp.ID != [16]byte{}:
			return resp.ID, nil
		case (err == nil || errors.Is(err, kerr.TopicAlreadyExists)) && attempt < 50:
			// Created, by another member meanwhile perhaps: read it once
			// its metadata is out.
			select {
			case <-ctx.Done():
				return [16]byte{}, fmt.Errorf("slots: topic %s: %w", topic, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			return [16]byte{}, NotAllowed(job, "Create", "topic", topic, "every process creates the slots topic when it is missing", err)
		default:
			return [16]byte{}, fmt.Errorf("slots: create topic %s with %d partitions: %w", topic, slots, err)
		}
	}
}

// describeTopic asks a broker for topic's partition count and id; 0
// partitions when it does not exist (yet).
func describeTopic(ctx context.Context, cl *kgo.Client, topic string) (int, [16]byte, error) {
	t, err := kfetch.Topic(ctx, cl, topic)
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.LeaderNotAvailable):
		return 0, [16]byte{}, nil
	case err != nil:
		return 0, [16]byte{}, err
	}
	return len(t.Partitions), t.TopicID, nil
}

// Changes delivers every rebalance that concerns this member, in order.
// It is closed by Close. The group's callbacks wait for their Change to be
// received, so one goroutine must read Changes for as long as the
// membership runs; a Change with Revoked slots (not Lost) holds the
// rebalance until its Done, for at most the rebalance timeout.
func (m *Membership) Changes() <-chan Change { return m.changes }

// Confirm proves that the group gives this member (member: the
// Change.Member of the slot's assignment) the slot in its current
// generation, for Ownership's Confirm. The proof is an offset commit of
// the slot's partition of <job>.slots under the member id and the
// generation the member is in, which the group coordinator accepts only
// from a member of its current generation (ILLEGAL_GENERATION otherwise),
// and only outside the hand-out of a new generation's assignment: so at
// the moment it is accepted the group's current assignment is the one
// this member holds the slot in.
//
// It returns nil once a commit is accepted while the member holds the
// slot; an error wrapping ErrNotAssigned when the member no longer holds
// it (revoked, lost, or the member id is no longer this process's); and,
// while the group is rebalancing or the coordinator moves, it tries again
// until ctx ends, then returns ctx's error (Ownership's Fail: the driver
// starts the claim again).
//
// The commit's metadata is a Proof naming the member and its process
// (WithProcess), which `splitflow job status` reads back for each slot.
//
// The commit keeps the group from being deleted while its offsets are
// retained (offsets.retention.minutes after it became empty); the log's
// epochs do not depend on that.
func (m *Membership) Confirm(ctx context.Context, slot int, member string) error {
	for {
		id, gen := m.cl.GroupMetadata()
		m.mu.Lock()
		_, holds := m.owned[slot]
		m.mu.Unlock()
		switch {
		case !holds:
			return fmt.Errorf("slots: job %s, slot %d: this member does not hold it: %w", m.job, slot, ErrNotAssigned)
		case id != "" && id != member:
			return fmt.Errorf("slots: job %s, slot %d: assigned to member %s, this process is now member %s: %w", m.job, slot, member, id, ErrNotAssigned)
		}
		var err error
		if id != "" && gen >= 1 {
			if err = m.prove(ctx, slot, id, gen); err == nil {
				return nil
			}
			if refused := m.refusal(err); refused != nil {
				return refused
			}
			if !errors.Is(err, kerr.IllegalGeneration) && !errors.Is(err, kerr.RebalanceInProgress) &&
				!errors.Is(err, kerr.UnknownMemberID) && !kerr.IsRetriable(err) {
				return fmt.Errorf("slots: job %s, slot %d: confirm the assignment: %w", m.job, slot, err)
			}
		}
		// Rebalancing, or between generations: the membership learns the
		// new generation, or that the slot is gone, shortly.
		select {
		case <-ctx.Done():
			return fmt.Errorf("slots: job %s, slot %d: confirm the assignment (last answer: %v): %w", m.job, slot, err, ctx.Err())
		case <-m.closing:
			return fmt.Errorf("slots: job %s, slot %d: membership closed: %w", m.job, slot, ErrNotAssigned)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// prove commits offset 0 of the slot's partition under member and
// generation gen, with the member's Proof as metadata, returning the
// coordinator's error for it.
func (m *Membership) prove(ctx context.Context, slot int, member string, gen int32) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = Group(m.job)
	req.MemberID = member
	req.Generation = gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = Topic(m.job)
	t.TopicID = m.topicID
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition = int32(slot)
	p.Offset = 0
	meta := Proof{Member: member, Process: m.cfg.process}.encode()
	p.Metadata = &meta
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition == int32(slot) {
				return kerr.ErrorForCode(p.ErrorCode)
			}
		}
	}
	return fmt.Errorf("slots: offset commit answered without partition %d", slot)
}

// Owned returns the slots this member owns now, with the generation in
// which each was assigned.
func (m *Membership) Owned() map[int]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.owned)
}

// Close leaves the group, so that the other members take its slots at
// once rather than after the session timeout. The driver stops the slots
// (final checkpoints) before; revocations during Close are reported but
// not waited for. Changes is closed once Close returns.
func (m *Membership) Close() {
	m.once.Do(func() {
		close(m.closing)
		m.cl.Close()
		<-m.stopped
		close(m.changes)
	})
}

func slotsOf(parts map[string][]int32, topic string) []int {
	var out []int
	for _, p := range parts[topic] {
		out = append(out, int(p))
	}
	slices.Sort(out)
	return out
}

func (m *Membership) assigned(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	slots := slotsOf(parts, Topic(m.job))
	if len(slots) == 0 {
		return
	}
	member, gen := cl.GroupMetadata()
	m.mu.Lock()
	for _, s := range slots {
		m.owned[s] = int64(gen)
	}
	owned := maps.Clone(m.owned)
	m.mu.Unlock()
	m.cfg.logger.Info("slots: assigned", slog.String("member", member), slog.Int("generation", int(gen)), slog.Any("slots", slots))
	m.deliver(Change{Member: member, Generation: int64(gen), Assigned: slots, Owned: owned}, false)
}

func (m *Membership) revoked(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	m.release(cl, parts, false)
}

func (m *Membership) lost(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	m.release(cl, parts, true)
}

func (m *Membership) release(cl *kgo.Client, parts map[string][]int32, lost bool) {
	slots := slotsOf(parts, Topic(m.job))
	if len(slots) == 0 {
		return
	}
	member, gen := cl.GroupMetadata()
	m.mu.Lock()
	for _, s := range slots {
		delete(m.owned, s)
	}
	owned := maps.Clone(m.owned)
	m.mu.Unlock()
	m.cfg.logger.Info("slots: released", slog.String("member", member), slog.Bool("lost", lost), slog.Any("slots", slots))
	m.deliver(Change{Member: member, Generation: int64(gen), Revoked: slots, Lost: lost, Owned: owned}, !lost)
}

// deliver hands c to the reader of Changes and, when wait, holds the
// group's callback until Done: the rebalance (and so the slots' next
// owner) waits for the slots' final checkpoint. Close ends both waits.
func (m *Membership) deliver(c Change, wait bool) {
	c.done, c.once = make(chan struct{}), new(sync.Once)
	select {
	case m.changes <- c:
	case <-m.closing:
		return
	}
	if !wait {
		return
	}
	select {
	case <-c.done:
	case <-m.closing:
	}
}
