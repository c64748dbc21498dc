package kafka

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/metrics"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source reads Kafka topics as a splitflow source: one split per
// topic-partition, read_committed by default, offsets kept in checkpoints.
type Source[T any] struct {
	cfg   sourceConfig
	deser Deserializer[T]
}

var _ connector.Source[string, Split, EnumeratorState] = (*Source[string])(nil)
var _ connector.LagReporter = (*Reader[string])(nil)

// NewSource returns a source that turns records into T with deser. It
// checks the options and fails with every problem it finds (no brokers, an
// empty broker address or one without a valid port among them), in an
// error wrapping connector.ErrInvalidConfiguration.
func NewSource[T any](deser Deserializer[T], opts ...SourceOption) (*Source[T], error) {
	if deser == nil {
		return nil, errors.New("kafka source: nil deserializer")
	}
	cfg := defaultSourceConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Source[T]{cfg: cfg, deser: deser}, nil
}

// Boundedness is Bounded with WithBounded, ContinuousUnbounded otherwise.
// SplitsOwnedBySubtask says that every partition goes to the subtask its
// owner rule names, from the partition and the parallelism alone
// (connector.SlotPartitionedSource), so a distributed job reads each
// partition in one slot.
func (s *Source[T]) SplitsOwnedBySubtask() bool { return true }

func (s *Source[T]) Boundedness() connector.Boundedness {
	if s.cfg.bounded {
		return connector.Bounded
	}
	return connector.ContinuousUnbounded
}

// CreateEnumerator returns the partition-discovering enumerator of a new job.
func (s *Source[T]) CreateEnumerator(ctx connector.SplitEnumeratorContext[Split]) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(&s.cfg, ctx, EnumeratorState{}), nil
}

// RestoreEnumerator returns the enumerator of a restored job.
func (s *Source[T]) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(&s.cfg, ctx, st), nil
}

// SplitSerializer encodes splits for checkpoints.
func (s *Source[T]) SplitSerializer() connector.VersionedSerializer[Split] { return SplitSerializer{} }

// EnumeratorStateSerializer encodes the enumerator's checkpoint.
func (s *Source[T]) EnumeratorStateSerializer() connector.VersionedSerializer[EnumeratorState] {
	return EnumeratorStateSerializer{}
}

// CreateReader returns a reader for one subtask: a single fetcher goroutine
// with one franz-go client for all the subtask's partitions.
func (s *Source[T]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, Split], error) {
	cfg := &s.cfg
	// The dead-letter output is checked first: nothing is started yet.
	var dead func(any, int64)
	if cfg.deadLettersSet {
		so, ok := ctx.(connector.SideOutputs)
		if !ok {
			return nil, fmt.Errorf("kafka source: WithDeadLetterOutput(%q): the engine offers the reader no side outputs", cfg.deadLetters)
		}
		var err error
		if dead, err = so.SideOutput(cfg.deadLetters, reflect.TypeFor[DeadLetter]()); err != nil {
			return nil, fmt.Errorf("kafka source: WithDeadLetterOutput: %w", err)
		}
	}
	lag := &lagTable{}
	g := metrics.GroupOf(ctx)
	mgr, err := base.NewSingleFetcherManager(func() (base.SplitReader[*kgo.Record, Split], error) {
		return newSplitReader(cfg, lag, g)
	})
	if err != nil {
		return nil, err
	}
	r := &Reader[T]{cfg: cfg, lag: lag, held: map[string]*partLag{}, offsets: map[int64]map[TopicPartition]int64{},
		finishedAt: map[TopicPartition]int64{}, metrics: g}
	r.subtask, r.parallelism = ctx.SubtaskIndex(), ctx.Parallelism()
	r.bgCtx, r.bgCancel = context.WithCancel(context.Background())
	r.em = &emitter[T]{deser: s.deser, skip: cfg.skipBadRecords, skipped: &r.skipped}
	r.em.dead = dead
	r.em.timestampOf = cfg.timestampOf
	r.em.logger = cfg.logger
	hooks := base.SplitStateFuncs[Split, splitState]{
		Initialize: func(sp Split) splitState {
			pl := lag.track(sp.TopicPartition, sp.StartingOffset, sp.StoppingOffset)
			r.held[sp.SplitID()] = pl
			delete(r.finishedAt, sp.TopicPartition)
			return splitState{split: sp, next: sp.StartingOffset, lag: pl}
		},
		Convert: func(_ string, st splitState) Split {
			return NewSplit(st.split.TopicPartition, st.next, st.split.StoppingOffset)
		},
		Finished: func(finished map[string]splitState) error {
			for id, st := range finished {
				lag.untrack(st.split.TopicPartition, st.lag)
				delete(r.held, id)
				if st.split.Bounded() {
					// Read up to its stopping offset: the group's offset
					// goes there with the next checkpoint.
					r.finishedAt[st.split.TopicPartition] = max(st.next, st.split.StoppingOffset)
				}
			}
			return nil
		},
	}
	r.SourceReaderBase, err = base.NewSourceReaderBase[*kgo.Record, T, Split, splitState](ctx, mgr, r.em, hooks)
	if err != nil {
		r.bgCancel()
		return nil, err
	}
	r.unregister = registerReaderMetrics(g, r.lagForMetrics, r.skipped.Load, r.failed.Load)
	return r, nil
}

// Reader is the Kafka source's reader: a base.SourceReaderBase that also
// commits offsets to the consumer group once a checkpoint's output is
// committed, and reports lag and skipped records.
type Reader[T any] struct {
	*base.SourceReaderBase[*kgo.Record, T, Split, splitState]
	cfg     *sourceConfig
	em      *emitter[T]
	lag     *lagTable
	skipped atomic.Int64

	// held is the lag entry of every split the base reader holds, by
	// split id; task goroutine only.
	held map[string]*partLag

	// offsets taken at each snapshot, committed when that checkpoint
	// completes; task goroutine only.
	offsets map[int64]map[TopicPartition]int64
	// finishedAt is where each bounded split that finished ended. A
	// finished split is in no snapshot, yet its offset belongs in every
	// later commit: without it, the group of a bounded job would never
	// reach the stopping offsets, since the final checkpoint comes after
	// every split finished. Task goroutine only.
	finishedAt map[TopicPartition]int64

	// commitMu guards the client of group offset commits and end offset
	// lists, and the background work that uses it (bg).
	commitMu    sync.Mutex
	commitCl    *kgo.Client
	closed      bool
	refreshing  bool           // a ListOffsets for lag is in flight
	lastRefresh time.Time      // when it was sent
	bg          sync.WaitGroup // end offset lists
	// bgCtx bounds the end offset lists; Close cancels it before waiting
	// for bg, so that a broker that never answers cannot hold the task
	// (and with it cancellation and failover) for a request's timeout.
	// Lists serve the lag only: dropping them costs nothing.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	failed   atomic.Int64 // offset commits that failed
	// refused is the *AuthorizationError of a group offset commit the
	// broker refused for want of Read on the group; the next checkpoint
	// completion returns it. Guarded by commitMu.
	refused error
	// Group offset commits go out one at a time (commitBusy while one is
	// in flight, of checkpoint commitAt); commitNext holds the newest
	// offsets waiting behind it, committedTo the highest offset handed to
	// a commit per partition. Guarded by commitMu. commits counts the
	// goroutine that sends them. Their context (commitCtx, made at the
	// first commit) is the task's, so a failover or hard stop cancels
	// them; Close waits for them (the last checkpoint's offsets are the
	// ones a new job from CommittedOffsets starts at) up to
	// WithCloseCommitTimeout, then cancels them too.
	commitBusy   bool
	commitAt     int64
	commitNext   *groupCommit
	committedTo  map[TopicPartition]int64
	commits      sync.WaitGroup
	commitCtx    context.Context
	commitCancel context.CancelFunc

	metrics    *metrics.Group
	unregister func() // removes the reader's scrape-time metrics

	// subtask and parallelism are the reader's, for the owner rule's
	// check in AddSplits.
	subtask, parallelism int
}

// SnapshotState returns the splits with their next offsets, and remembers
// those offsets for the group commit on completion.
func (r *Reader[T]) SnapshotState(checkpointID int64) ([]Split, error) {
	splits, err := r.SourceReaderBase.SnapshotState(checkpointID)
	if err != nil || r.cfg.groupID == "" || !r.cfg.commitOnCheckpt {
		return splits, err
	}
	m := make(map[TopicPartition]int64, len(splits)+len(r.finishedAt))
	for tp, o := range r.finishedAt {
		m[tp] = o
	}
	for _, s := range splits {
		m[s.TopicPartition] = s.StartingOffset
	}
	r.offsets[checkpointID] = m
	return splits, nil
}

// NotifyCheckpointComplete commits the offsets of that checkpoint to the
// consumer group, in the background: for monitoring only, so a failure is
// logged and counted, never fatal, and a slow broker never holds the task.
//
// The engine calls it only once the sinks committed the checkpoint's
// output, and never for an older checkpoint after a newer one, so the
// group's offsets never run ahead of the committed output: a new job that
// starts from them (CommittedOffsets) skips nothing. Commits go out one at
// a time in checkpoint order; while one is in flight only the newest
// offsets wait behind it, and no partition's offset is ever committed
// below one this reader committed before.
//
// The exception is a commit the broker refused for want of Read on the
// group (revoked while the job runs): the next checkpoint completion
// fails the reader with that *AuthorizationError, as the start-up check
// would have, instead of the job running on with only a warning.
func (r *Reader[T]) NotifyCheckpointComplete(checkpointID int64) error {
	r.commitMu.Lock()
	refused := r.refused
	r.commitMu.Unlock()
	if refused != nil {
		return refused
	}
	m, ok := r.offsets[checkpointID]
	for id := range r.offsets {
		if id <= checkpointID {
			delete(r.offsets, id)
		}
	}
	if !ok || len(m) == 0 {
		return nil
	}
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	if r.closed {
		return nil
	}
	if r.committedTo == nil {
		r.committedTo = map[TopicPartition]int64{}
	}
	next := groupCommit{checkpoint: checkpointID, offsets: map[TopicPartition]int64{}}
	if r.commitNext != nil {
		// Subsumed: the newest offsets of every partition go in one commit.
		next.offsets = r.commitNext.offsets
	}
	for tp, o := range m {
		if o >= r.committedTo[tp] {
			next.offsets[tp] = o
			r.committedTo[tp] = o
		}
	}
	if len(next.offsets) == 0 {
		return nil
	}
	if r.commitBusy {
		r.commitNext = &next
		return nil
	}
	cl, err := r.offsetsClient()
	if err != nil {
		r.failed.Add(1)
		r.cfg.logger.Warn("kafka source: offset commit client", "err", err)
		return nil
	}
	if r.commitCtx == nil {
		r.commitCtx, r.commitCancel = context.WithCancel(r.Context().Context())
	}
	r.commitBusy, r.commitAt = true, next.checkpoint
	r.commits.Add(1)
	go r.commitOffsets(cl, next)
	return nil
}

// groupCommit is one commit of offsets to the consumer group.
type groupCommit struct {
	checkpoint int64
	offsets    map[TopicPartition]int64
}

// commitOffsets commits c, then whatever offsets were queued meanwhile,
// until none wait; offsets queued before Close still go out, since Close
// waits for them.
func (r *Reader[T]) commitOffsets(cl *kgo.Client, c groupCommit) {
	defer r.commits.Done()
	for {
		offs := kadm.Offsets{}
		for tp, o := range c.offsets {
			offs.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: o, LeaderEpoch: -1})
		}
		ctx, cancel := context.WithTimeout(r.commitCtx, 30*time.Second)
		resp, err := kadm.NewClient(cl).CommitOffsets(ctx, r.cfg.groupID, offs)
		cancel()
		if err == nil {
			err = resp.Error()
		}
		var refused error
		if err != nil {
			r.cfg.logger.Warn("kafka source: committing offsets to the group failed (monitoring only; progress is in the checkpoint)",
				"group", r.cfg.groupID, "checkpoint", c.checkpoint, "err", err)
			if ae := authorizationOf(err, r.cfg.security, ResourceGroup, r.cfg.groupID, false, "Read", useSourceGroup); errors.Is(ae, ErrNotAuthorized) {
				refused = fmt.Errorf("kafka source: commit offsets to the group: %w", ae)
			}
		}
		r.commitMu.Lock()
		if refused != nil && r.refused == nil {
			r.refused = refused
		}
		if err != nil {
			// Counted once its refusal is kept: a caller that saw the
			// count sees the refusal at the next checkpoint completion.
			r.failed.Add(1)
		}
		if r.commitNext == nil || r.commitCtx.Err() != nil {
			r.commitBusy, r.commitNext = false, nil
			r.commitMu.Unlock()
			return
		}
		c, r.commitNext = *r.commitNext, nil
		r.commitAt = c.checkpoint
		r.commitMu.Unlock()
	}
}

// offsetsClient returns the client of group offset commits and end offset
// lists, creating it on first use; commitMu held.
func (r *Reader[T]) offsetsClient() (*kgo.Client, error) {
	if r.commitCl == nil {
		opts := append(append([]kgo.Opt(nil), r.cfg.kgoOpts...), kgo.SeedBrokers(r.cfg.seeds...))
		cl, err := kgo.NewClient(append(opts, clientMetricOpts(r.metrics, "source-offsets")...)...)
		if err != nil {
			return nil, err
		}
		r.commitCl = cl
	}
	return r.commitCl, nil
}

// endRefreshAfter is how old the end of a partition may grow, for want of
// fetch responses, before a scrape of the lag asks the broker for it.
const endRefreshAfter = time.Second

// lagForMetrics is the lag a scrape reports. It also asks the broker, in
// the background, for the ends no fetch has reported on lately: the next
// scrape sees them. With records flowing, fetch responses keep every end
// fresh and no request is sent.
func (r *Reader[T]) lagForMetrics() map[TopicPartition]int64 {
	r.refreshEnds()
	return r.lag.snapshot()
}

// refreshEnds lists the end offsets of stale partitions, one request at a
// time and at most one per endRefreshAfter.
func (r *Reader[T]) refreshEnds() {
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	if r.closed || r.refreshing || time.Since(r.lastRefresh) < endRefreshAfter {
		return
	}
	topics := r.lag.staleTopics(endRefreshAfter)
	if len(topics) == 0 {
		return
	}
	cl, err := r.offsetsClient()
	if err != nil {
		return // lag keeps its last known ends
	}
	r.refreshing, r.lastRefresh = true, time.Now()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		ctx, cancel := context.WithTimeout(r.bgCtx, 10*time.Second)
		defer cancel()
		adm := kadm.NewClient(cl)
		list := adm.ListEndOffsets
		if r.cfg.readCommitted {
			list = adm.ListCommittedOffsets // the last stable offsets
		}
		// A partial answer (err set) still holds the partitions it could
		// list.
		offs, _ := list(ctx, topics...)
		offs.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				r.lag.listedEnd(TopicPartition{Topic: o.Topic, Partition: o.Partition}, o.Offset)
			}
		})
		r.commitMu.Lock()
		r.refreshing = false
		r.commitMu.Unlock()
	}()
}

// PollNext emits as SourceReaderBase does, and publishes the positions
// emitted whenever it runs out of records to emit, so that an idle reader
// shows no lag.
func (r *Reader[T]) PollNext(out connector.ReaderOutput[T]) (connector.InputStatus, error) {
	st, err := r.SourceReaderBase.PollNext(out)
	if st != connector.MoreAvailable {
		r.em.publish()
	}
	return st, err
}

// AddSplits adds splits as SourceReaderBase does. A bounded source
// (WithBounded) given splits without a stopping offset, which only a
// checkpoint or savepoint of an unbounded job holds, first gives them the
// stopping offsets its initializer resolves now, as of the restore: the
// job reads the backlog up to there and ends, instead of reading on
// forever, and its checkpoints record the stop, so a later restore ends
// at the same place. The resolution asks the broker on the task
// goroutine (bounded by restoreStopTimeout); a failure fails the task.
//
// With an owner rule (the shuffle's source) it first checks that each
// split is this subtask's: the enumerator assigns by the rule, but the
// engine deals splits restored at another parallelism out round-robin
// unless the job runs with runtime.WithRescaledSplitsToEnumerator, and a
// partition read by another subtask breaks the rule that subtask i reads
// exactly the partitions the owner rule gives it. Such a restore fails
// without restarts, naming the option.
func (r *Reader[T]) AddSplits(splits []Split) error {
	if r.cfg.owner != nil {
		for _, sp := range splits {
			if o := r.cfg.owner(sp.TopicPartition, r.parallelism); o != r.subtask {
				return fmt.Errorf("kafka source: split %s came to subtask %d of %d, and the owner rule gives it to subtask %d; "+
					"a job restored at another parallelism must run with runtime.WithRescaledSplitsToEnumerator, so that the enumerator assigns the splits by the rule: %w",
					sp.TopicPartition, r.subtask, r.parallelism, o, connector.ErrInvalidConfiguration)
			}
		}
	}
	if r.cfg.bounded {
		var err error
		if splits, err = r.boundRestored(splits); err != nil {
			return err
		}
	}
	return r.SourceReaderBase.AddSplits(splits)
}

// restoreStopTimeout bounds the stopping offset lookup of restored
// unbounded splits in a bounded source.
const restoreStopTimeout = time.Minute

// boundRestored returns splits with a stopping offset for every split
// that had none.
func (r *Reader[T]) boundRestored(splits []Split) ([]Split, error) {
	var open []TopicPartition
	for _, s := range splits {
		if !s.Bounded() {
			open = append(open, s.TopicPartition)
		}
	}
	if len(open) == 0 {
		return splits, nil
	}
	r.commitMu.Lock()
	cl, err := r.offsetsClient()
	r.commitMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("kafka source: stopping offsets of restored unbounded splits: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.Context().Context(), restoreStopTimeout)
	defer cancel()
	stops, err := r.cfg.stopping.resolve(ctx, kadm.NewClient(cl), r.cfg.groupID, r.cfg.readCommitted, open)
	if err != nil {
		return nil, fmt.Errorf("kafka source: the bounded source was restored with splits of an unbounded job (%v), and their stopping offsets could not be resolved: %w", open, err)
	}
	out := make([]Split, len(splits))
	for i, s := range splits {
		if !s.Bounded() {
			s = NewSplit(s.TopicPartition, s.StartingOffset, stops[s.TopicPartition])
			r.cfg.logger.Info("kafka source: restored unbounded split bounded at the stopping offset as of the restore", "split", s.SplitID(), "start", s.StartingOffset, "stop", s.StoppingOffset)
		}
		out[i] = s
	}
	return out, nil
}

// RemoveSplits stops reading splits as SourceReaderBase does, and drops
// the lag of those it held. When the base reader fails, the lag stays: it
// can no longer tell which splits are being read.
func (r *Reader[T]) RemoveSplits(splits []Split) error {
	if err := r.SourceReaderBase.RemoveSplits(splits); err != nil {
		return err
	}
	for _, s := range splits {
		id := s.SplitID()
		if pl, ok := r.held[id]; ok {
			r.lag.untrack(s.TopicPartition, pl)
			delete(r.held, id)
		}
	}
	return nil
}

// Close stops the fetcher and cancels the end offset lists in flight. It
// waits for the group offset commit in flight and the one queued behind it,
// up to WithCloseCommitTimeout, so that the group gets the offsets of the
// job's last checkpoint (the final one of a bounded job, the one a drain
// takes): a new job from CommittedOffsets would otherwise write that
// checkpoint's output again. Past the timeout it cancels them and logs it.
// A failover or hard stop cancels them at once (the task's context). A
// commit the broker refused for want of Read on the group is Close's error
// when no checkpoint completion returned it since.
func (r *Reader[T]) Close() error {
	err := r.SourceReaderBase.Close()
	r.unregister()
	r.commitMu.Lock()
	// A scrape that began before unregister may still call refreshEnds,
	// and a checkpoint notification may come after Close: neither starts
	// anything now.
	r.closed = true
	r.commitMu.Unlock()
	r.bgCancel()
	r.waitCommits()
	r.bg.Wait()
	r.commitMu.Lock()
	if r.commitCl != nil {
		r.commitCl.Close()
		r.commitCl = nil
	}
	// A refusal that no later checkpoint completion returned (a bounded
	// job's last commit) fails the close, so the job does not end as a
	// success with the right gone.
	err = errors.Join(err, r.refused)
	r.commitMu.Unlock()
	return err
}

// waitCommits waits for the group offset commits up to the close commit
// timeout, then cancels them and waits for them to return.
func (r *Reader[T]) waitCommits() {
	r.commitMu.Lock()
	cancel := r.commitCancel
	r.commitMu.Unlock()
	if cancel == nil {
		return // no commit was ever started
	}
	defer cancel()
	done := make(chan struct{})
	go func() {
		r.commits.Wait()
		close(done)
	}()
	timer := time.NewTimer(r.cfg.closeCommitTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	r.commitMu.Lock()
	at, queued := r.commitAt, r.commitNext
	r.commitMu.Unlock()
	if queued != nil {
		at = queued.checkpoint
	}
	r.cfg.logger.Warn("kafka source: gave up waiting for the group offset commit at close; "+
		"the group's offsets stay behind the job's last checkpoint, so a new job started from CommittedOffsets writes output since then again "+
		"(raise WithCloseCommitTimeout if the broker is slow)",
		"group", r.cfg.groupID, "checkpoint", at, "waited", r.cfg.closeCommitTimeout)
	cancel()
	<-done
}

// Lag returns, per partition read, how many records lie between the
// records emitted and the end (the last stable offset under
// read_committed; at most the stopping offset of a bounded split), as of
// the newest end known. A partition whose end is not known yet is absent.
func (r *Reader[T]) Lag() map[TopicPartition]int64 { return r.lag.snapshot() }

// LagRecords is the sum of Lag over the partitions read: the reader's
// share of its job's lag gauge (connector.LagReporter). Like a scrape of
// the per-partition lag, it asks the broker in the background for ends no
// fetch has reported on lately, which a later call sees.
func (r *Reader[T]) LagRecords() int64 {
	var n int64
	for _, v := range r.lagForMetrics() {
		n += v
	}
	return n
}

// Skipped returns how many records WithSkipBadRecords dropped.
func (r *Reader[T]) Skipped() int64 { return r.skipped.Load() }

// FailedOffsetCommits returns how many group offset commits failed.
func (r *Reader[T]) FailedOffsetCommits() int64 { return r.failed.Load() }

func (r *Reader[T]) String() string {
	return fmt.Sprintf("kafka reader (subtask %d)", r.Context().SubtaskIndex())
}
