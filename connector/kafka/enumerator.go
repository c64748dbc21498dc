package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnumeratorState is the enumerator's checkpoint. A partition is either
// Assigned (its split, with its offset, is in one reader's checkpoint) or in
// Pending (resolved, not yet handed to its owner), never both (the one-place
// rule).
type EnumeratorState struct {
	Assigned             []TopicPartition
	Pending              []Split
	InitialDiscoveryDone bool
}

// ownerOf is the subtask that reads tp: a hash of the topic spreads topics'
// first partitions over subtasks, and consecutive partitions go to
// consecutive subtasks. It depends only on the names and the parallelism,
// so it is the same in every run and after every restore.
func ownerOf(tp TopicPartition, parallelism int) int {
	h := fnv.New32a()
	h.Write([]byte(tp.Topic))
	start := int(h.Sum32()&0x7fffffff) % parallelism
	return (start + int(tp.Partition)) % parallelism
}

// discovered is what one discovery run found, computed off the coordinator
// goroutine.
type discovered struct {
	current map[TopicPartition]bool // every partition that exists now
	splits  []Split                 // resolved splits of partitions unknown at the run's start
	initial bool
	err     error
}

// known is an immutable copy of the partitions the enumerator knows, which
// the coordinator goroutine publishes for discovery runs to read.
type known struct {
	tps         map[TopicPartition]bool
	initialDone bool
}

type enumerator struct {
	cfg *sourceConfig
	ctx connector.SplitEnumeratorContext[Split]
	cl  *kgo.Client

	// Owned by the coordinator goroutine.
	assigned    map[TopicPartition]bool
	pending     map[TopicPartition]Split
	initialDone bool
	noMoreSent  map[int]bool

	snapshot atomic.Pointer[known]
	// probed is set once this enumerator's discovery has checked the
	// principal's rights (probeSource); discoveries run off the
	// coordinator goroutine.
	probed atomic.Bool
	// prepared is set once the configuration's prepare step succeeded.
	prepared atomic.Bool

	// discoveredMetric is splitflow_kafka_source_partitions_discovered_total
	// of the source's coordinator; metrics for its client's kprom.
	discoveredMetric prometheus.Counter
	metrics          *metrics.Group

	// Counters, read by metrics from any goroutine.
	discoveredCount atomic.Int64
	removedCount    atomic.Int64
	failedRuns      atomic.Int64
}

func newEnumerator(cfg *sourceConfig, ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) *enumerator {
	e := &enumerator{
		cfg:         cfg,
		ctx:         ctx,
		assigned:    map[TopicPartition]bool{},
		pending:     map[TopicPartition]Split{},
		noMoreSent:  map[int]bool{},
		initialDone: st.InitialDiscoveryDone,
		metrics:     metrics.GroupOf(ctx),
	}
	e.discoveredMetric = e.metrics.Counter(metricDiscovered, "Partitions a Kafka source's enumerator discovered (the first discovery included).")
	for _, tp := range st.Assigned {
		e.assigned[tp] = true
	}
	for _, s := range st.Pending {
		e.pending[s.TopicPartition] = s
	}
	e.publish()
	return e
}

func (e *enumerator) publish() {
	k := &known{tps: make(map[TopicPartition]bool, len(e.assigned)+len(e.pending)), initialDone: e.initialDone}
	for tp := range e.assigned {
		k.tps[tp] = true
	}
	for tp := range e.pending {
		k.tps[tp] = true
	}
	e.snapshot.Store(k)
}

func (e *enumerator) Start() error {
	// franz-go answers metadata requests from a cache up to MetadataMinAge
	// old (5s by default), which would delay every discovery by as much;
	// keep it under the discovery interval. User options come after and win.
	minAge := 5 * time.Second
	if e.cfg.discovery > 0 {
		minAge = min(max(e.cfg.discovery/2, 10*time.Millisecond), minAge)
	}
	opts := append([]kgo.Opt{kgo.MetadataMinAge(minAge)}, e.cfg.kgoOpts...)
	opts = append(opts, clientMetricOpts(e.metrics, "enumerator")...)
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(e.cfg.seeds...))...)
	if err != nil {
		return fmt.Errorf("kafka source: enumerator client: %w", err)
	}
	e.cl = cl
	work := func(ctx context.Context) func() error {
		d := e.discover(ctx)
		return func() error { return e.handleDiscovery(d) }
	}
	if e.cfg.bounded || e.cfg.discovery == 0 {
		if e.cfg.bounded && e.initialDone {
			// A restored bounded source found its partitions before the
			// checkpoint; it finds none later.
			return e.assignPending()
		}
		e.ctx.CallAsync(work)
		return nil
	}
	e.ctx.CallAsyncPeriodically(work, 0, e.cfg.discovery)
	return nil
}

// discover lists the subscribed partitions and resolves the offsets of those
// the enumerator did not know when the run began. It runs off the
// coordinator goroutine and touches only the published snapshot.
func (e *enumerator) discover(ctx context.Context) discovered {
	k := e.snapshot.Load()
	d := discovered{current: map[TopicPartition]bool{}, initial: !k.initialDone}
	adm := kadm.NewClient(e.cl)
	if e.cfg.prepare != nil && !e.prepared.Load() {
		if err := e.cfg.prepare(ctx, e.cl, e.cfg.security); err != nil {
			d.err = err
			return d
		}
		e.prepared.Store(true)
	}
	if d.initial && !e.probed.Load() {
		// A fresh job's first contact: an address no broker listens on
		// is reported as such within seconds, not as a failed listing
		// the job restarts on.
		if err := reachSeeds(ctx, e.cl, e.cfg.seeds, true); err != nil {
			d.err = fmt.Errorf("kafka source: %w", err)
			return d
		}
	}
	var topics kadm.TopicDetails
	var err error
	if e.cfg.topicRegex != nil {
		topics, err = adm.ListTopics(ctx)
	} else {
		topics, err = adm.ListTopics(ctx, e.cfg.topics...)
	}
	if err != nil {
		d.err = fmt.Errorf("kafka source: list topics: %w", e.listTopicsError(ctx, err))
		return d
	}
	for name, t := range topics {
		if e.cfg.topicRegex != nil {
			if strings.HasPrefix(name, "__") || !fullMatch(e.cfg.topicRegex.FindStringIndex(name), name) {
				continue
			}
		}
		if t.Err != nil {
			if e.cfg.topicRegex == nil && d.initial && e.cfg.prepare == nil && errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
				// A named input topic missing at the start is a
				// configuration error: waiting and restarting do not
				// create it. (The shuffle creates its topic in its
				// prepare step, and a broker may not know it yet.)
				d.err = fmt.Errorf("kafka source: topic %q does not exist; create it or correct WithTopics (WithTopicRegex reads topics created later): %w",
					name, connector.ErrInvalidConfiguration)
				return d
			}
			if e.cfg.topicRegex == nil && d.initial {
				d.err = fmt.Errorf("kafka source: topic %q: %w", name,
					authorizationOf(t.Err, e.cfg.security, ResourceTopic, name, false, "Read", useSourceTopic))
				return d
			}
			continue // deleted meanwhile, or not created yet
		}
		for p := range t.Partitions {
			d.current[TopicPartition{Topic: name, Partition: p}] = true
		}
	}
	if !e.probed.Load() {
		// Before the first split is assigned, so a missing right fails the
		// job before any record is read.
		if err := e.probeSource(ctx, d.current); err != nil {
			d.err = fmt.Errorf("kafka source: %w", err)
			return d
		}
		e.probed.Store(true)
	}
	var fresh []TopicPartition
	for tp := range d.current {
		if !k.tps[tp] {
			fresh = append(fresh, tp)
		}
	}
	slices.SortFunc(fresh, compareTP)
	if len(fresh) == 0 {
		return d
	}
	starting := EarliestOffsets()
	if d.initial {
		starting = e.cfg.starting
	}
	starts, err := starting.resolve(ctx, adm, e.cfg.groupID, e.cfg.readCommitted, fresh)
	if err != nil {
		d.err = err
		return d
	}
	var stops map[TopicPartition]int64
	if e.cfg.bounded {
		if stops, err = e.cfg.stopping.resolve(ctx, adm, e.cfg.groupID, e.cfg.readCommitted, fresh); err != nil {
			d.err = err
			return d
		}
	}
	for _, tp := range fresh {
		stop := NoStoppingOffset
		if stops != nil {
			stop = stops[tp]
		}
		d.splits = append(d.splits, NewSplit(tp, starts[tp], stop))
	}
	return d
}

// maxDiscoveryLines is how many partitions one discovery run logs a line
// each for at info level.
const maxDiscoveryLines = 8

func fullMatch(loc []int, s string) bool { return loc != nil && loc[0] == 0 && loc[1] == len(s) }

func compareTP(a, b TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition - b.Partition)
}

// handleDiscovery runs on the coordinator goroutine.
func (e *enumerator) handleDiscovery(d discovered) error {
	log := e.cfg.logger
	if d.err != nil {
		e.failedRuns.Add(1)
		if d.initial {
			// Nothing is being read yet; a source that cannot find its
			// input must say so rather than wait silently.
			return d.err
		}
		if errors.Is(d.err, ErrNotAuthorized) || errors.Is(d.err, ErrAuthenticationFailed) ||
			errors.Is(d.err, connector.ErrInvalidConfiguration) {
			// A missing right (found by a restored enumerator's probe, or
			// revoked meanwhile) or a wrong configuration (a shuffle topic
			// with another number of partitions) does not come back by
			// waiting: every later discovery would fail the same way and
			// assign nothing.
			return d.err
		}
		log.Warn("kafka source: partition discovery failed; retrying at the next interval", "err", d.err)
		return nil
	}
	// Partitions that vanished (topic or partition deleted) are dropped
	// from the enumerator; readers finish their splits when the broker
	// reports them unknown.
	for tp := range e.pending {
		if !d.current[tp] {
			delete(e.pending, tp)
			e.removedCount.Add(1)
			log.Warn("kafka source: partition disappeared before it was assigned", "partition", tp.String())
		}
	}
	for tp := range e.assigned {
		if !d.current[tp] {
			delete(e.assigned, tp)
			e.removedCount.Add(1)
			log.Warn("kafka source: assigned partition disappeared", "partition", tp.String())
		}
	}
	var fresh []Split
	for _, s := range d.splits {
		if e.assigned[s.TopicPartition] {
			continue // a later run already handled it
		}
		if _, ok := e.pending[s.TopicPartition]; ok {
			continue
		}
		e.pending[s.TopicPartition] = s
		e.discoveredCount.Add(1)
		e.discoveredMetric.Inc()
		fresh = append(fresh, s)
	}
	// A partition a line, unless one run finds many (a topic of many
	// partitions): then one line, the partitions at debug level.
	level := slog.LevelInfo
	if len(fresh) > maxDiscoveryLines {
		level = slog.LevelDebug
		topics := map[string]int{}
		for _, s := range fresh {
			topics[s.Topic]++
		}
		log.Info("kafka source: partitions discovered", "partitions", len(fresh), "by_topic", topics)
	}
	for _, s := range fresh {
		var stop any = "unbounded"
		if s.Bounded() {
			stop = s.StoppingOffset
		}
		log.Log(context.Background(), level, "kafka source: partition discovered", "partition", s.SplitID(), "start", s.StartingOffset, "stop", stop)
	}
	if d.initial {
		e.initialDone = true
	}
	return e.assignPending()
}

// assignPending pushes every pending split to its owner if that reader is
// registered, and in bounded mode tells readers with nothing more to come.
func (e *enumerator) assignPending() error {
	par := e.ctx.CurrentParallelism()
	readers := e.ctx.RegisteredReaders()
	batch := map[int][]Split{}
	waiting := map[int]bool{} // owners of pending splits not assigned now
	for tp, s := range e.pending {
		owner, err := e.owner(tp, par)
		if err != nil {
			return err
		}
		if _, ok := readers[owner]; ok {
			batch[owner] = append(batch[owner], s)
		} else {
			waiting[owner] = true
		}
	}
	if len(batch) > 0 {
		for _, ss := range batch {
			slices.SortFunc(ss, func(a, b Split) int { return compareTP(a.TopicPartition, b.TopicPartition) })
		}
		if err := e.ctx.AssignSplits(connector.SplitsAssignment[Split]{Assignment: batch}); err != nil {
			return fmt.Errorf("kafka source: assign splits: %w", err)
		}
		for _, ss := range batch {
			for _, s := range ss {
				delete(e.pending, s.TopicPartition)
				e.assigned[s.TopicPartition] = true
			}
		}
	}
	e.publish()
	if e.cfg.bounded && e.initialDone {
		for sub := range readers {
			if !e.noMoreSent[sub] && !waiting[sub] {
				if err := e.ctx.SignalNoMoreSplits(sub); err != nil {
					return fmt.Errorf("kafka source: signal no more splits to subtask %d: %w", sub, err)
				}
				e.noMoreSent[sub] = true
			}
		}
	}
	return nil
}

// owner is the subtask that reads tp at parallelism par: the
// configuration's owner rule if it has one, ownerOf otherwise. A rule
// answering outside [0, par) fails the source: no reader could take the
// split, and a job waiting for it would stall silently.
func (e *enumerator) owner(tp TopicPartition, par int) (int, error) {
	if e.cfg.owner == nil {
		return ownerOf(tp, par), nil
	}
	o := e.cfg.owner(tp, par)
	if o < 0 || o >= par {
		return 0, fmt.Errorf("kafka source: the split owner rule gives %s to subtask %d, outside [0, %d) at parallelism %d: %w",
			tp, o, par, par, connector.ErrInvalidConfiguration)
	}
	return o, nil
}

// HandleSplitRequest is ignored: splits are pushed to their owners.
func (e *enumerator) HandleSplitRequest(int) error { return nil }

// AddSplitsBack takes back splits assigned to a failed subtask after its
// last checkpoint; they go to their owner again when it registers.
func (e *enumerator) AddSplitsBack(splits []Split, subtask int) error {
	for _, s := range splits {
		delete(e.assigned, s.TopicPartition)
		e.pending[s.TopicPartition] = s
	}
	delete(e.noMoreSent, subtask)
	e.cfg.logger.Info("kafka source: splits returned by a failed subtask", "subtask", subtask, "splits", len(splits))
	e.publish()
	return nil
}

// AddReader hands a (re)registered reader its pending splits.
func (e *enumerator) AddReader(subtask int) error {
	delete(e.noMoreSent, subtask) // a restarted reader needs the signal again
	return e.assignPending()
}

func (e *enumerator) SnapshotState(int64) (EnumeratorState, error) {
	st := EnumeratorState{InitialDiscoveryDone: e.initialDone}
	for tp := range e.assigned {
		st.Assigned = append(st.Assigned, tp)
	}
	for _, s := range e.pending {
		st.Pending = append(st.Pending, s)
	}
	slices.SortFunc(st.Assigned, compareTP)
	slices.SortFunc(st.Pending, func(a, b Split) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	return st, nil
}

func (e *enumerator) NotifyCheckpointComplete(int64) error { return nil }

func (e *enumerator) HandleSourceEvent(int, connector.SourceEvent) error { return nil }

func (e *enumerator) Close() error {
	if e.cl != nil {
		e.cl.Close()
	}
	return nil
}

// EnumeratorStateSerializer encodes the enumerator's checkpoint.
type EnumeratorStateSerializer struct{}

var _ connector.VersionedSerializer[EnumeratorState] = EnumeratorStateSerializer{}

// Version 1: flags byte (bit 0: initial discovery done), uvarint count and
// topic-partitions of Assigned, uvarint count and splits of Pending.
func (EnumeratorStateSerializer) Version() int { return 1 }

func (EnumeratorStateSerializer) Serialize(st EnumeratorState) ([]byte, error) {
	var b []byte
	flags := byte(0)
	if st.InitialDiscoveryDone {
		flags = 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(st.Assigned)))
	for _, tp := range st.Assigned {
		b = appendTP(b, tp)
	}
	b = binary.AppendUvarint(b, uint64(len(st.Pending)))
	for _, s := range st.Pending {
		b = appendSplit(b, s)
	}
	return b, nil
}

func (EnumeratorStateSerializer) Deserialize(version int, data []byte) (EnumeratorState, error) {
	if version != 1 {
		return EnumeratorState{}, fmt.Errorf("kafka enumerator state version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	fail := func(err error) (EnumeratorState, error) {
		return EnumeratorState{}, fmt.Errorf("kafka enumerator state: %w", err)
	}
	if len(data) < 1 {
		return fail(errShort)
	}
	st := EnumeratorState{InitialDiscoveryDone: data[0]&1 == 1}
	b := data[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return fail(errShort)
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		tp, rest, err := readTP(b)
		if err != nil {
			return fail(err)
		}
		st.Assigned, b = append(st.Assigned, tp), rest
	}
	n, k = binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return fail(errShort)
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		s, rest, err := readSplit(b)
		if err != nil {
			return fail(err)
		}
		st.Pending, b = append(st.Pending, s), rest
	}
	if len(b) != 0 {
		return fail(fmt.Errorf("%d trailing bytes", len(b)))
	}
	return st, nil
}

// MergeSlotEnumeratorStates is connector.SlotEnumeratorStateMerger: the
// enumerator state of a job in one process at parallelism len(states)
// from its slots' (a distributed job's savepoint). Every slot's
// enumerator holds all the partitions, and only what it says of the
// partitions its own slot reads (ownerOf at the slot count) is its to
// say: those assigned to its reader, and those pending for it. The
// others it holds pending for readers that never register there.
func (s *Source[T]) MergeSlotEnumeratorStates(states []EnumeratorState) (EnumeratorState, error) {
	n := len(states)
	merged := EnumeratorState{InitialDiscoveryDone: n > 0}
	for i, st := range states {
		merged.InitialDiscoveryDone = merged.InitialDiscoveryDone && st.InitialDiscoveryDone
		for _, tp := range st.Assigned {
			if ownerOf(tp, n) == i {
				merged.Assigned = append(merged.Assigned, tp)
			}
		}
		for _, sp := range st.Pending {
			if ownerOf(sp.TopicPartition, n) == i {
				merged.Pending = append(merged.Pending, sp)
			}
		}
	}
	slices.SortFunc(merged.Assigned, compareTP)
	slices.SortFunc(merged.Pending, func(a, b Split) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	return merged, nil
}
