package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
	"github.com/splitflow/splitflow/internal/kfetch"
	"github.com/splitflow/splitflow/metrics"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// splitReader reads the assigned partitions with one franz-go client using
// direct partition assignment. It runs on one fetcher goroutine; only WakeUp
// is called from elsewhere.
type splitReader struct {
	cfg *sourceConfig
	cl  *kgo.Client
	// bytesIn counts the bytes of the records fetched, once per fetch.
	bytesIn prometheus.Counter
	pool    *base.RecordsBySplitsPool[*kgo.Record]
	lag     *lagTable
	parts   map[TopicPartition]*partState // fetcher goroutine only
	// topicIDs caches the ids of topics probed (probeEnded); fetcher
	// goroutine only.
	topicIDs map[string][16]byte
	// finished holds splits that ended outside a fetch (empty bounded
	// splits, deleted partitions); the next Fetch reports them.
	finished []string

	wakeMu sync.Mutex
	cancel context.CancelFunc // of the Fetch in progress, nil between fetches
	woken  bool               // a WakeUp arrived between fetches
}

type partState struct {
	id   string
	stop int64
	// next is the offset after the last record the client delivered,
	// control records included (the split's starting offset before the
	// first); quietSince is when the client last delivered records of
	// the partition, or when it was added.
	next       int64
	quietSince time.Time
	// paused: PauseOrResumeSplits stopped its fetching, so its quiet
	// says nothing.
	paused bool
}

// boundedQuietProbe is how long a bounded split that has not reached its
// stopping offset may go without records before the reader asks the
// partition's leader whether anything is left before the stop
// (probeEnded). While a bounded split is read, Fetch waits at most this
// long for records.
const boundedQuietProbe = time.Second

func newSplitReader(cfg *sourceConfig, lag *lagTable, g *metrics.Group) (*splitReader, error) {
	// A partition assigned while a fetch waits on the broker is fetched only
	// after that fetch returns: franz-go waits up to 5s by default, Kafka's
	// consumers 500ms (fetch.max.wait.ms), which we use. User options win.
	opts := append([]kgo.Opt{kgo.FetchMaxWait(500 * time.Millisecond)}, cfg.kgoOpts...)
	opts = append(opts, kgo.SeedBrokers(cfg.seeds...),
		// Control records (transaction markers) come through so the
		// position is known past them; they are never emitted.
		kgo.KeepControlRecords())
	if cfg.readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	// The client never moves a partition by itself when its offset is no
	// longer in the log: it reports OFFSET_OUT_OF_RANGE, and Fetch fails
	// the split or moves it as WithOutOfRangeReset says (outOfRange).
	// franz-go's default would resume a restored split below the log
	// start at the log start, skipping what retention deleted without a
	// word. After the user's options, so that theirs cannot undo it.
	opts = append(opts, kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	opts = append(opts, clientMetricOpts(g, "source-reader")...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka source: reader client: %w", err)
	}
	return &splitReader{
		cfg:     cfg,
		cl:      cl,
		bytesIn: g.BytesIn(),
		pool:    base.NewRecordsBySplitsPool[*kgo.Record](4),
		lag:     lag,
		parts:   map[TopicPartition]*partState{},
	}, nil
}

// HandleSplitsChanges adds and removes partitions without blocking.
func (r *splitReader) HandleSplitsChanges(ch base.SplitsChange[Split]) error {
	add := map[string]map[int32]kgo.Offset{}
	for _, s := range ch.Added {
		if s.Bounded() && s.StartingOffset >= s.StoppingOffset {
			r.finished = append(r.finished, s.SplitID()) // nothing to read
			continue
		}
		r.parts[s.TopicPartition] = &partState{id: s.SplitID(), stop: s.StoppingOffset, next: s.StartingOffset, quietSince: time.Now()}
		if add[s.Topic] == nil {
			add[s.Topic] = map[int32]kgo.Offset{}
		}
		add[s.Topic][s.Partition] = kgo.NewOffset().At(s.StartingOffset)
	}
	if len(add) > 0 {
		r.cl.AddConsumePartitions(add)
	}
	rm := map[string][]int32{}
	for _, s := range ch.Removed {
		// A removed split is reported neither as records nor as finished.
		r.finished = slices.DeleteFunc(r.finished, func(id string) bool { return id == s.SplitID() })
		delete(r.parts, s.TopicPartition)
		rm[s.Topic] = append(rm[s.Topic], s.Partition)
	}
	if len(rm) > 0 {
		r.cl.RemoveConsumePartitions(rm)
	}
	return nil
}

// PauseOrResumeSplits stops and restarts fetching of partitions.
func (r *splitReader) PauseOrResumeSplits(pause, resume []Split) error {
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(tpMap(pause))
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(tpMap(resume))
	}
	for _, s := range pause {
		if ps := r.parts[s.TopicPartition]; ps != nil {
			ps.paused = true
		}
	}
	for _, s := range resume {
		if ps := r.parts[s.TopicPartition]; ps != nil {
			ps.paused, ps.quietSince = false, time.Now()
		}
	}
	return nil
}

func tpMap(ss []Split) map[string][]int32 {
	m := map[string][]int32{}
	for _, s := range ss {
		m[s.Topic] = append(m[s.Topic], s.Partition)
	}
	return m
}

// Fetch polls the client until records arrive, a WakeUp, or ctx ends.
func (r *splitReader) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[*kgo.Record], error) {
	batch := r.pool.Get()
	for _, id := range r.finished {
		batch.AddFinishedSplit(id)
	}
	r.finished = r.finished[:0]
	if batch.Len() > 0 || len(batch.FinishedSplits()) > 0 {
		return batch, nil
	}

	r.wakeMu.Lock()
	if r.woken {
		r.woken = false
		r.wakeMu.Unlock()
		return batch, nil
	}
	pollCtx, cancel := context.WithCancel(ctx)
	if r.readsBounded() {
		// The client delivers nothing for a partition whose remaining
		// offsets before the stop hold no record it would deliver, so
		// the wait is cut short to look at such partitions.
		pollCtx, cancel = context.WithTimeout(ctx, boundedQuietProbe)
	}
	r.cancel = cancel
	r.wakeMu.Unlock()
	// At most maxPollRecords: the client keeps the rest of its buffered
	// fetch and sends the next only once that is taken, so the records
	// the reader holds are about one fetch plus the queued batches. All
	// of a fetch taken at once would leave the client free to buffer the
	// next while the queue still held batches of the previous ones: with
	// small records, a few hundred MB of decompressed records.
	fetches := r.cl.PollRecords(pollCtx, r.cfg.maxPollRecords)
	r.wakeMu.Lock()
	r.cancel = nil
	r.woken = false
	r.wakeMu.Unlock()
	cancel()

	var errs []error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if !errors.Is(fp.Err, kerr.OffsetOutOfRange) {
			return
		}
		tp := TopicPartition{Topic: fp.Topic, Partition: fp.Partition}
		if ps, ok := r.parts[tp]; ok {
			if err := r.outOfRange(batch, tp, ps, fp.LogStartOffset, fp.HighWatermark); err != nil {
				errs = append(errs, err)
			}
		}
	})
	fetches.EachError(func(topic string, p int32, err error) {
		switch {
		case errors.Is(err, kerr.OffsetOutOfRange):
			// Handled above, with the partition's log start and end.
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// WakeUp or shutdown: return what we have.
		case errors.Is(err, kgo.ErrClientClosed):
			errs = append(errs, err)
		case errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID):
			// The partition was deleted: it has nothing more to give.
			tp := TopicPartition{Topic: topic, Partition: p}
			if ps, ok := r.parts[tp]; ok {
				r.cfg.logger.Warn("kafka source: partition no longer exists; finishing its split", "partition", tp.String(), "err", err)
				batch.AddFinishedSplit(ps.id)
				delete(r.parts, tp)
				r.cl.RemoveConsumePartitions(map[string][]int32{topic: {p}})
			}
		default:
			var dl *kgo.ErrDataLoss
			if errors.As(err, &dl) {
				// The broker lost records the client had already read
				// (an unclean leader election truncated the log), and
				// the client went back to where the log diverged:
				// nothing unread is skipped, records read are gone.
				// Offsets no longer in the log never come here: the
				// client resets nothing by itself (NoResetOffset).
				r.cfg.logger.Error("kafka source: the broker lost records that were already read", "topic", topic, "partition", p, "err", err)
				return
			}
			// A right revoked while the job runs fails it as a missing
			// one does at start (AuthorizationError), not by restarts.
			errs = append(errs, fmt.Errorf("fetch %s-%d: %w", topic, p,
				authorizationOf(err, r.cfg.security, ResourceTopic, topic, false, "Read", useSourceTopic)))
		}
	})
	if len(errs) > 0 {
		batch.Recycle()
		return nil, errors.Join(errs...)
	}
	var bytes int64
	defer func() {
		if bytes > 0 {
			r.bytesIn.Add(float64(bytes))
		}
	}()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		tp := TopicPartition{Topic: fp.Topic, Partition: fp.Partition}
		ps, ok := r.parts[tp]
		if !ok {
			return // removed while the fetch was in flight
		}
		next, dataNext := int64(-1), int64(-1)
		for _, rec := range fp.Records {
			if ps.stop != NoStoppingOffset && rec.Offset >= ps.stop {
				next = ps.stop
				break
			}
			next = rec.Offset + 1
			if !rec.Attrs.IsControl() {
				batch.Add(ps.id, rec)
				bytes += recordBytes(rec)
				dataNext = next
			}
		}
		if fp.Err == nil { // a failed partition's offsets mean nothing
			end := fp.HighWatermark
			if r.cfg.readCommitted {
				end = fp.LastStableOffset
			}
			r.lag.fetched(tp, end, next, dataNext)
		}
		if next >= 0 {
			ps.next, ps.quietSince = next, time.Now()
		}
		// A bounded split ends when the position reaches its stopping
		// offset: a position, since markers take offsets too.
		if ps.stop != NoStoppingOffset && next >= ps.stop {
			r.finish(batch, tp, ps)
		}
	})
	for tp, ps := range r.parts {
		if ps.stop == NoStoppingOffset || ps.paused || time.Since(ps.quietSince) < boundedQuietProbe || ctx.Err() != nil {
			continue
		}
		ended, err := r.probeEnded(ctx, tp, ps)
		ps.quietSince = time.Now()
		switch {
		case err != nil:
			// The client's own fetches report lasting failures; a probe
			// that failed is made again after the next quiet spell.
			r.cfg.logger.Debug("kafka source: asking whether a bounded split has ended", "partition", tp.String(), "err", err)
		case ended:
			r.cfg.logger.Info("kafka source: no records left before the stopping offset; finishing the split",
				"partition", tp.String(), "position", ps.next, "stop", ps.stop)
			r.finish(batch, tp, ps)
		}
	}
	return batch, nil
}

// outOfRange handles a partition whose position is no longer in its log,
// which starts at logStart and ends at end (-1: not known): retention or
// DeleteRecords removed records before they were read (position below
// the start), or the log holds less than was read (the topic was deleted
// and created again, an unclean leader election). By default it returns
// an *OffsetOutOfRangeError, which fails the job: the exactly-once
// source never skips records by itself. Under WithOutOfRangeReset it logs
// the gap and moves the split where the strategy says.
func (r *splitReader) outOfRange(batch *base.RecordsBySplits[*kgo.Record], tp TopicPartition, ps *partState, logStart, end int64) error {
	e := &OffsetOutOfRangeError{Topic: tp.Topic, Partition: tp.Partition, Offset: ps.next, LogStart: logStart, LogEnd: end}
	to := logStart
	switch r.cfg.outOfRange {
	case ResetLatest:
		to = end
	case ResetEarliest:
	default:
		return e
	}
	if to < 0 {
		return fmt.Errorf("%w; the broker did not say where the log starts and ends, so WithOutOfRangeReset cannot move the split", e)
	}
	r.cfg.logger.Error("kafka source: the split's offset is no longer in the log; moving it as WithOutOfRangeReset says, records are skipped or read again",
		"partition", tp.String(), "offset", ps.next, "log_start", logStart, "log_end", end, "resumed_at", to, "err", e)
	ps.next, ps.quietSince = to, time.Now()
	if ps.stop != NoStoppingOffset && to >= ps.stop {
		r.finish(batch, tp, ps)
		return nil
	}
	// The client holds the partition as failed; taking it out and
	// adding it again at the new offset makes it fetch anew.
	r.cl.RemoveConsumePartitions(map[string][]int32{tp.Topic: {tp.Partition}})
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{tp.Topic: {tp.Partition: kgo.NewOffset().At(to)}})
	return nil
}

// readsBounded reports whether a bounded split is being read.
func (r *splitReader) readsBounded() bool {
	for _, ps := range r.parts {
		if ps.stop != NoStoppingOffset {
			return true
		}
	}
	return false
}

// finish ends a bounded split: reported finished in batch, no longer
// fetched.
func (r *splitReader) finish(batch *base.RecordsBySplits[*kgo.Record], tp TopicPartition, ps *partState) {
	batch.AddFinishedSplit(ps.id)
	delete(r.parts, tp)
	r.cl.RemoveConsumePartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

// probeEnded tells whether a bounded split has nothing left to read
// before its stopping offset although its position has not reached it.
//
// The position moves with the records the client delivers, and the
// client delivers none for offsets that hold nothing it would deliver:
// the records at the end of a compacted partition that the cleaner
// removed, or, under read_committed, a transaction's records aborted
// after another transaction began, which leaves the abort marker past
// the last stable offset and so past a stop taken there. Fetching from
// such offsets returns nothing (or only later records), so the position
// would never reach the stop. The client keeps the offset it has
// fetched to to itself, so the reader asks the partition's leader with a
// fetch of its own from the position, with the client's isolation: when
// the partition's end (the high watermark, or the last stable offset
// under read_committed) is at or past the stop and the answer holds no
// record before the stop that the client would deliver, nothing is left
// and the split ends. An end before the stop means records may still
// come, and the split goes on waiting. A position below the log start
// is no end: records were deleted before they were read, which the
// client's own fetch reports (outOfRange).
func (r *splitReader) probeEnded(ctx context.Context, tp TopicPartition, ps *partState) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := r.topicID(ctx, tp.Topic)
	if err != nil {
		return false, err
	}
	leader, _, err := r.cl.PartitionLeader(tp.Topic, tp.Partition)
	if err != nil {
		return false, err
	}
	part := kfetch.Partition{Topic: tp.Topic, TopicID: id, Partition: tp.Partition}
	from := ps.next
	// A byte at most: the leader still returns the first batch whole
	// (KIP-74), which is all the answer needs. A batch may end before the
	// stop and hold nothing the client would deliver (all aborted, or
	// emptied by the cleaner); the next fetch goes on from its end. A few
	// rounds at most: a later probe goes on from there.
	for range 8 {
		p, err := kfetch.Fetch(ctx, r.cl, leader, part, from, kfetch.Opts{MaxBytes: 1, ReadCommitted: r.cfg.readCommitted})
		if err != nil {
			return false, err
		}
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			// Out of range included: the client's own fetch reports
			// it, with the partition's log start, and Fetch fails the
			// split or moves it (outOfRange).
			return false, err
		}
		end := p.HighWatermark
		if r.cfg.readCommitted {
			end = p.LastStableOffset
		}
		if end < ps.stop {
			return false, nil
		}
		if len(p.RecordBatches) == 0 {
			return true, nil
		}
		recs, next, err := kfetch.Records(part, from, r.cfg.readCommitted, p)
		if err != nil {
			return false, err
		}
		for _, rec := range recs {
			if rec.Offset < ps.stop {
				return false, nil // the client delivers it
			}
		}
		if next >= ps.stop {
			return true, nil
		}
		if next <= from {
			return false, nil // a batch cut short: ask again later
		}
		from = next
	}
	return false, nil
}

// topicID returns topic's id, which fetch requests from version 13 on
// name topics by.
func (r *splitReader) topicID(ctx context.Context, topic string) ([16]byte, error) {
	if id, ok := r.topicIDs[topic]; ok {
		return id, nil
	}
	t, err := kfetch.Topic(ctx, r.cl, topic)
	if err != nil {
		return [16]byte{}, err
	}
	if r.topicIDs == nil {
		r.topicIDs = map[string][16]byte{}
	}
	r.topicIDs[topic] = t.TopicID
	return t.TopicID, nil
}

// WakeUp makes a blocked Fetch return promptly, or the next one if none is
// blocked.
func (r *splitReader) WakeUp() {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	if r.cancel != nil {
		r.cancel()
		return
	}
	r.woken = true
}

func (r *splitReader) Close() error {
	r.cl.Close()
	return nil
}

// lagTable tells, per partition a reader holds, how many records lie
// between what the task has emitted and the end of the partition it can
// read (the high watermark, or the last stable offset under
// read_committed), capped at the stopping offset of a bounded split. It is
// computed when read, from values three parties keep up to date:
//
//   - the task goroutine adds an entry when it takes a split and removes it
//     when the split finishes or is removed, and publishes the position
//     after the records it emitted (emitter.publish, per batch);
//   - the fetcher records the end each fetch response reports, and how far
//     it fetched;
//   - the reader asks the broker for the end of partitions no fetch has
//     reported on lately (Reader.refreshEnds). A fetcher parked on a full
//     elements queue fetches nothing, yet the lag of a backpressured reader
//     is what an operator most wants to see grow.
//
// Measuring from what the task emitted, not from what the fetcher fetched,
// counts the records waiting in the elements queue as lag too: they have
// not left the source.
type lagTable struct {
	mu sync.Mutex
	m  map[TopicPartition]*partLag
}

// partLag is one partition's entry. emitted is the task's; the other
// fields are guarded by lagTable.mu.
type partLag struct {
	stop int64 // the split's stopping offset, or NoStoppingOffset
	end  int64 // -1 until known
	// endAt is when a fetch or a ListOffsets answer last gave end.
	endAt time.Time
	// fetched is the position after the last record fetched, control
	// records included; dataNext the offset after the last data record
	// fetched. Once the task has emitted up to dataNext, everything up to
	// fetched was transaction markers, and the position is fetched.
	fetched, dataNext int64
	emitted           atomic.Int64
}

// track adds the entry of a split that starts at start; task goroutine.
func (l *lagTable) track(tp TopicPartition, start, stop int64) *partLag {
	pl := &partLag{stop: stop, end: -1, fetched: start, dataNext: start}
	pl.emitted.Store(start)
	l.mu.Lock()
	if l.m == nil {
		l.m = map[TopicPartition]*partLag{}
	}
	l.m[tp] = pl
	l.mu.Unlock()
	return pl
}

// untrack removes tp's entry if it is still pl; task goroutine.
func (l *lagTable) untrack(tp TopicPartition, pl *partLag) {
	l.mu.Lock()
	if l.m[tp] == pl {
		delete(l.m, tp)
	}
	l.mu.Unlock()
}

// fetched records what a fetch response said of tp: its end, and the
// positions after the last record and the last data record it returned
// (-1: none).
func (l *lagTable) fetched(tp TopicPartition, end, next, dataNext int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pl := l.m[tp]
	if pl == nil {
		return
	}
	if end >= 0 {
		// A ListOffsets answer (listedEnd) may have given a newer end than
		// a response fetched before it: the end never moves back.
		pl.end, pl.endAt = max(pl.end, end), time.Now()
	}
	if next >= 0 {
		pl.fetched = next
	}
	if dataNext >= 0 {
		pl.dataNext = dataNext
	}
}

// listedEnd records an end a ListOffsets request returned. A fetch
// response may have reported a newer one meanwhile, so it only moves the
// end forward.
func (l *lagTable) listedEnd(tp TopicPartition, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pl := l.m[tp]; pl != nil && end > pl.end {
		pl.end, pl.endAt = end, time.Now()
	}
}

// staleTopics returns the topics with a partition whose end is older than
// maxAge.
func (l *lagTable) staleTopics(maxAge time.Duration) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var topics []string
	for tp, pl := range l.m {
		if time.Since(pl.endAt) >= maxAge && !slices.Contains(topics, tp.Topic) {
			topics = append(topics, tp.Topic)
		}
	}
	return topics
}

// snapshot returns the lag of every partition whose end is known.
func (l *lagTable) snapshot() map[TopicPartition]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[TopicPartition]int64, len(l.m))
	for tp, pl := range l.m {
		if pl.end < 0 {
			continue
		}
		pos := pl.emitted.Load()
		if pos >= pl.dataNext {
			pos = max(pos, pl.fetched)
		}
		end := pl.end
		if pl.stop != NoStoppingOffset {
			end = min(end, pl.stop)
		}
		m[tp] = max(end-pos, 0)
	}
	return m
}

// splitState is a split being read: next is the offset after the last
// emitted record.
type splitState struct {
	split Split
	next  int64
	lag   *partLag
	// dirty: next moved since it was last published to lag.
	dirty bool
}

// lagPublishEvery is how many records the emitter emits before it
// publishes positions; the reader also publishes whenever it runs out of
// records to emit.
const lagPublishEvery = 256

// emitter deserializes a record, emits it with its timestamp, and advances
// its split's state; on the task goroutine.
type emitter[T any] struct {
	deser   Deserializer[T]
	skip    bool
	skipped *atomic.Int64
	// dead emits a rejected record's DeadLetter (WithDeadLetterOutput);
	// nil: none.
	dead func(record any, timestamp int64)
	// timestampOf is the configuration's; nil: the record's timestamp.
	timestampOf func(*kgo.Record) int64
	// logger logs a panicking deserializer's stack; nil: not logged.
	logger *slog.Logger

	// Splits whose position moved since the last publication, and the
	// records emitted since then; task goroutine only.
	dirty   []*splitState
	emitted int
}

func (e *emitter[T]) Emit(rec *kgo.Record, out connector.SourceOutput[T], st *splitState) error {
	v, err := e.deserialize(rec)
	if err != nil {
		switch {
		case errors.Is(err, ErrDeserializerUnavailable):
			// Not the record's fault: no policy may drop it.
			return fmt.Errorf("kafka source: cannot deserialize the record at %s-%d offset %d, which is not at fault: %w",
				rec.Topic, rec.Partition, rec.Offset, err)
		case e.dead != nil:
			e.dead(DeadLetter{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value,
				Headers: rec.Headers, Timestamp: rec.Timestamp, Err: err.Error()}, rec.Timestamp.UnixMilli())
		case !e.skip:
			return &BadRecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err}
		}
		e.skipped.Add(1)
	} else {
		ts := rec.Timestamp.UnixMilli()
		if e.timestampOf != nil {
			ts = e.timestampOf(rec)
		}
		out.CollectWithTimestamp(v, ts)
	}
	st.next = rec.Offset + 1
	if !st.dirty {
		st.dirty = true
		e.dirty = append(e.dirty, st)
	}
	if e.emitted++; e.emitted >= lagPublishEvery {
		e.publish()
	}
	return nil
}

// deserialize runs the deserializer on rec. A panic in it rejects the
// record as a returned error does, so that the bad-record policy
// (WithSkipBadRecords, WithDeadLetterOutput, or failing with a
// *BadRecordError) decides: failing the task with the panic would restart
// it onto the same record forever, and neither option could help. The
// stack goes to the log, where the code at fault is looked for; the
// error, which reaches dead letters and the job's status, carries the
// panic's value only.
func (e *emitter[T]) deserialize(rec *kgo.Record) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("the deserializer panicked: %v", p)
			if e.logger != nil {
				e.logger.Error("kafka source: the deserializer panicked; the record is handled as a bad record",
					"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}
	}()
	return e.deser.Deserialize(rec)
}

// publish makes the positions of the splits emitted from visible to the lag
// table: one atomic store per split, not per record.
func (e *emitter[T]) publish() {
	for i, st := range e.dirty {
		st.lag.emitted.Store(st.next)
		st.dirty = false
		e.dirty[i] = nil
	}
	e.dirty = e.dirty[:0]
	e.emitted = 0
}

// OffsetOutOfRangeError is a split whose next offset is no longer in its
// partition's log. Offset below LogStart: records Offset to LogStart-1
// were deleted (retention, DeleteRecords, deleted internal topics) before
// the source read them. Offset past LogEnd: the log holds less than the
// source read (the topic was deleted and created again, an unclean leader
// election). It wraps connector.ErrInvalidConfiguration: a restart would
// restore the same offset, so the job fails at once. WithOutOfRangeReset
// accepts the loss instead.
type OffsetOutOfRangeError struct {
	Topic     string
	Partition int32
	// Offset is the split's next offset to read.
	Offset int64
	// LogStart and LogEnd are the partition's log start offset and high
	// watermark as the broker reported them (-1: not reported).
	LogStart, LogEnd int64
}

func (e *OffsetOutOfRangeError) Error() string {
	const fix = "the job stops rather than skip records; WithOutOfRangeReset(ResetEarliest) accepts the loss and resumes at the log start"
	switch {
	case e.LogStart >= 0 && e.Offset < e.LogStart:
		return fmt.Sprintf("kafka source: %s-%d: offset %d, where the split goes on, is no longer in the log, which starts at %d: "+
			"records %d to %d (%d) were deleted before they were read (retention, DeleteRecords or a deleted topic); %s",
			e.Topic, e.Partition, e.Offset, e.LogStart, e.Offset, e.LogStart-1, e.LogStart-e.Offset, fix)
	case e.LogEnd >= 0 && e.Offset > e.LogEnd:
		return fmt.Sprintf("kafka source: %s-%d: offset %d, where the split goes on, is past the end of the log (%d): "+
			"the log holds less than the source read (the topic was deleted and created again, or an unclean leader election lost records); %s",
			e.Topic, e.Partition, e.Offset, e.LogEnd, fix)
	}
	return fmt.Sprintf("kafka source: %s-%d: offset %d, where the split goes on, is out of range (log start %d, end %d); %s",
		e.Topic, e.Partition, e.Offset, e.LogStart, e.LogEnd, fix)
}

// Unwrap makes the error match kerr.OffsetOutOfRange and
// connector.ErrInvalidConfiguration.
func (e *OffsetOutOfRangeError) Unwrap() []error {
	return []error{kerr.OffsetOutOfRange, connector.ErrInvalidConfiguration}
}

// BadRecordError is a record the deserializer rejected.
type BadRecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("kafka source: cannot deserialize the record at %s-%d offset %d: %v (WithSkipBadRecords drops such records, WithDeadLetterOutput sends them to a side output)",
		e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *BadRecordError) Unwrap() error { return e.Err }
