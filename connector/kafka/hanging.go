package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/txn"
)

// An exactly-once committer watches the transactions it committed until
// every partition they wrote has its commit marker (txn.HangingCommit: Kafka
// loses the marker of a partition that has no leader at the moment the
// coordinator sends it, and the partition then holds the transaction open
// for ever, stalling every read_committed reader of it). The check runs
// after a commit and at every completed checkpoint (also one with nothing
// to commit, so that an idle input does not leave a hanging commit alone),
// at most every markerCheckEvery, on the transactions committed at least
// markerGrace before (markers normally land within milliseconds); and,
// once the input has ended, after every commit on all of them, waiting up
// to the commit timeout for markers still on their way; and at close, on
// all of them, since the next attempt restores only the committables its
// checkpoint still holds (those a close cannot check go to the subtask's
// next committer in the process). A check that fails (a broker away) is
// repeated at a later commit or checkpoint. A
// hanging commit found is ended with the marker the broker did not write;
// when that fails, Commit fails, naming the partition (without ClusterAction,
// with an *AuthorizationError and without restarts). On a cluster that runs
// transaction protocol v1 the check stops at the first open transaction it
// cannot tell for sure (txn.ErrProtocolV1), with a warning.
const (
	markerCheckEvery = 30 * time.Second
	markerGrace      = 2 * time.Second
	// markerWatchMax bounds the watched transactions while checks fail
	// (a broker away for long); the oldest are dropped first.
	markerWatchMax = 4096
	// closeMarkerTimeout bounds the marker check at close, which comes
	// after the writer's abort (closeAbortTimeout).
	closeMarkerTimeout = 5 * time.Second
)

// metricHanging counts the hanging commits the sink ended.
const metricHanging = "kafka_sink_hanging_commits_ended_total"

func hangingCounter(g *metrics.Group) prometheus.Counter {
	return g.Counter(metricHanging, "Committed transactions a Kafka sink found open in a partition whose broker lost their commit marker (the partition had no leader when the coordinator wrote it), and ended by writing the marker.")
}

// watchedCommit is a committed transaction whose markers are not yet
// known to be all written.
type watchedCommit struct {
	c  txn.Committable
	at time.Time
}

// noteTopics records the topics a writer of subtask wrote in a transaction
// it prepared: the partitions the committer's marker check reads.
func (s *Sink[T]) noteTopics(subtask int, topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range topics {
		if !slices.Contains(s.written[subtask], t) {
			s.written[subtask] = append(s.written[subtask], t)
		}
	}
}

// markerTopics are the topics the marker check of subtask reads: those its
// writers wrote, and every topic of a serializer that names its topics
// (TopicsSerializer), so that committables restored after a restart are
// checked before the new writer has written.
func (s *Sink[T]) markerTopics(subtask int) []string {
	s.mu.Lock()
	topics := slices.Clone(s.written[subtask])
	s.mu.Unlock()
	if ts, ok := s.ser.(TopicsSerializer); ok {
		for _, t := range ts.Topics() {
			if !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	return topics
}

func (s *Sink[T]) setInputEnded(subtask int, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[subtask] = ended
}

func (s *Sink[T]) inputEnded(subtask int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended[subtask]
}

// watch adds committed transactions to the marker check.
func (c *committer[T]) watch(cms []txn.Committable) {
	now := time.Now()
	for _, cm := range cms {
		c.watched = append(c.watched, watchedCommit{c: cm, at: now})
	}
	if n := len(c.watched) - markerWatchMax; n > 0 {
		log := c.s.cfg.logger.Debug
		if !c.watchFull {
			log, c.watchFull = c.s.cfg.logger.Warn, true
		}
		log("kafka sink: too many committed transactions wait for their markers to be checked; the oldest are no longer checked",
			"subtask", c.sub, "dropped", n)
		c.watched = slices.Delete(c.watched, 0, n)
	}
}

// CheckpointCompleted runs the marker check when it is due, so that
// committed transactions are checked while nothing else is committed. At
// the end of input every commit checks already.
func (c *committer[T]) CheckpointCompleted(ctx context.Context, _ int64) error {
	if c.s.inputEnded(c.sub) {
		return nil
	}
	return c.checkMarkers(ctx)
}

var _ connector.CommitterCheckpointListener = (*committer[string])(nil)

// checkMarkers runs the marker check when it is due: at the end of input
// every time (waiting for markers on their way), otherwise every
// markerCheckEvery once a watched transaction is markerGrace old. It
// returns an error only for a hanging commit it could not end.
func (c *committer[T]) checkMarkers(ctx context.Context) error {
	final := c.s.inputEnded(c.sub)
	if c.markersOff || len(c.watched) == 0 || !final && time.Since(c.lastMarkerCheck) < markerCheckEvery {
		return nil
	}
	err := c.markerCheck(ctx, final, final)
	if err != nil && !errors.Is(err, errHangingNotEnded) {
		if ctx.Err() == nil {
			// Once at Warn: a missing right fails every check.
			log := c.s.cfg.logger.Debug
			if !c.checkFailed {
				log, c.checkFailed = c.s.cfg.logger.Warn, true
			}
			log("kafka sink: checking the commit markers of committed transactions failed; a later commit or checkpoint checks again (it needs Read on the sink's topics)", "subtask", c.sub, "err", err)
		}
		return nil
	}
	return err
}

// closeMarkerCheck checks every watched transaction once when the
// committer closes (a failover, a slot taken over, a stop): the next
// attempt restores only the committables its checkpoint still holds, so a
// transaction committed since would be nobody's to check. It waits for
// markers on their way for at most closeMarkerTimeout. The transactions it
// could not check (a broker away) go to the subtask's next committer in
// this process, and are named in a warning.
func (c *committer[T]) closeMarkerCheck() {
	if c.markersOff || len(c.watched) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeMarkerTimeout)
	defer cancel()
	err := c.markerCheck(ctx, true, true)
	if len(c.watched) == 0 {
		return
	}
	if err == nil {
		err = ctx.Err()
	}
	c.s.cfg.logger.Warn("kafka sink: committed transactions left unchecked at close: a partition whose broker lost one's commit marker holds it open, stopping its read_committed readers, until a later committer of the subtask in this process checks it (kafka-transactions.sh find-hanging finds it)",
		"subtask", c.sub, "transactions", fmt.Sprint(c.watchedCommits()), "err", err)
	c.s.leaveUnchecked(c.sub, c.watched)
	c.watched = nil
}

// leaveUnchecked keeps ws for the subtask's next committer; takeUnchecked
// hands them over. Bounded as the watch list is.
func (s *Sink[T]) leaveUnchecked(sub int, ws []watchedCommit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := append(s.unchecked[sub], ws...)
	if n := len(all) - markerWatchMax; n > 0 {
		all = all[n:]
	}
	s.unchecked[sub] = all
}

func (s *Sink[T]) takeUnchecked(sub int) []watchedCommit {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.unchecked[sub]
	delete(s.unchecked, sub)
	return ws
}

func (c *committer[T]) watchedCommits() []txn.Committable {
	cs := make([]txn.Committable, len(c.watched))
	for i, w := range c.watched {
		cs[i] = w.c
	}
	return cs
}

// errHangingNotEnded marks the failure to end a hanging commit found.
var errHangingNotEnded = errors.New("kafka sink: a hanging commit was not ended")

// markerCheck checks the watched transactions, all of them or those
// committed at least markerGrace before, and ends the hanging commits it
// finds. With wait it checks again until none is pending or the commit
// timeout has passed. A hanging commit it could not end is an error
// wrapping errHangingNotEnded; others are failures of the check.
func (c *committer[T]) markerCheck(ctx context.Context, all, wait bool) error {
	due := c.dueMarkers(all)
	if len(due) == 0 {
		// Not counted as a check: the first transaction old enough is
		// checked at the next commit or checkpoint.
		return nil
	}
	topics := c.s.markerTopics(c.sub)
	if len(topics) == 0 {
		return nil
	}
	// Counted from the check's end: one that waited for a broker away is
	// not due again at once.
	defer func() { c.lastMarkerCheck = time.Now() }()
	cl, err := c.plainClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.s.cfg.commitTimeout)
	for ; len(due) > 0; due = c.dueMarkers(all) {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		hanging, pending, err := txn.FindHangingCommits(cctx, cl, due, topics)
		if err == nil && len(hanging) > 0 {
			c.s.cfg.logger.Warn("kafka sink: committed transactions are open in partitions whose broker lost their commit markers; writing the markers",
				"subtask", c.sub, "transactions", fmt.Sprint(hanging))
			if err = txn.EndHangingCommits(cctx, cl, hanging); err != nil {
				cancel()
				// Without ClusterAction: an *AuthorizationError, which
				// fails the job without restarts.
				err = authorizationOf(err, c.s.cfg.security, ResourceCluster, "", false, "ClusterAction", useSinkMarkerWrite)
				return fmt.Errorf("%w: %w; the partitions' read_committed readers stop at these transactions until their commit markers are written", errHangingNotEnded, err)
			}
			c.hanging.Add(float64(len(hanging)))
		}
		cancel()
		if errors.Is(err, txn.ErrProtocolV1) {
			c.s.cfg.logger.Warn("kafka sink: committed transactions are open in partitions, and the cluster runs transaction protocol v1, where the sink cannot tell them for sure from later, aborted ones: not ended; look for hanging transactions with kafka-transactions.sh find-hanging",
				"subtask", c.sub)
			c.markersOff, c.watched = true, nil
			return nil
		}
		if err != nil {
			return err
		}
		// Every due transaction but the pending ones has all its markers
		// now.
		c.watched = slices.DeleteFunc(c.watched, func(w watchedCommit) bool {
			return slices.Contains(due, w.c) && !slices.Contains(pending, w.c)
		})
		if len(pending) == 0 || !wait {
			return nil
		}
		if time.Now().After(deadline) {
			c.s.cfg.logger.Warn("kafka sink: committed transactions still wait for their commit markers", "subtask", c.sub, "transactions", fmt.Sprint(pending))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// dueMarkers are the watched transactions to check: all, or those
// committed at least markerGrace before.
func (c *committer[T]) dueMarkers(all bool) []txn.Committable {
	var due []txn.Committable
	for _, w := range c.watched {
		if all || time.Since(w.at) >= markerGrace {
			due = append(due, w.c)
		}
	}
	return due
}

// plainClient returns the committer's client for raw requests, made at
// first use.
func (c *committer[T]) plainClient() (*kgo.Client, error) {
	if c.plain == nil {
		cl, err := kgo.NewClient(c.s.clientOpts(clientMetricOpts(c.metrics, "sink-committer")...)...)
		if err != nil {
			return nil, fmt.Errorf("kafka sink: committer client: %w", err)
		}
		c.plain = cl
	}
	return c.plain, nil
}
