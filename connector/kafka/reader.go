package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
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
}

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
		r.parts[s.TopicPartition] = &partState{id: s.SplitID(), stop: s.StoppingOffset}
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
		r.lag.remove(s.TopicPartition)
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
	r.cancel = cancel
	r.wakeMu.Unlock()
	fetches := r.cl.PollFetches(pollCtx)
	r.wakeMu.Lock()
	r.cancel = nil
	r.woken = false
	r.wakeMu.Unlock()
	cancel()

	var errs []error
	fetches.EachError(func(topic string, p int32, err error) {
		switch {
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
				r.lag.remove(tp)
			}
		default:
			var dl *kgo.ErrDataLoss
			if errors.As(err, &dl) {
				// Retention removed records before they were read; the
				// client resets as Kafka's auto.offset.reset would.
				r.cfg.logger.Error("kafka source: records were deleted before they were read", "topic", topic, "partition", p, "err", err)
				return
			}
			errs = append(errs, fmt.Errorf("fetch %s-%d: %w", topic, p, err))
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
		next := int64(-1)
		for _, rec := range fp.Records {
			if ps.stop != NoStoppingOffset && rec.Offset >= ps.stop {
				next = ps.stop
				break
			}
			next = rec.Offset + 1
			if !rec.Attrs.IsControl() {
				batch.Add(ps.id, rec)
				bytes += recordBytes(rec)
			}
		}
		if next >= 0 {
			end := fp.HighWatermark
			if r.cfg.readCommitted {
				end = fp.LastStableOffset
			}
			r.lag.set(tp, end-next)
		}
		// A bounded split ends when the position reaches its stopping
		// offset: a position, since markers take offsets too.
		if ps.stop != NoStoppingOffset && next >= ps.stop {
			batch.AddFinishedSplit(ps.id)
			delete(r.parts, tp)
			r.cl.RemoveConsumePartitions(map[string][]int32{tp.Topic: {tp.Partition}})
		}
	})
	return batch, nil
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

// lagTable holds per-partition lag (records between the read position and
// the end a consumer of this isolation level can read), written by the
// fetcher and read by metrics.
type lagTable struct {
	mu sync.Mutex
	m  map[TopicPartition]int64
}

func (l *lagTable) set(tp TopicPartition, v int64) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[TopicPartition]int64{}
	}
	l.m[tp] = max(v, 0)
	l.mu.Unlock()
}

func (l *lagTable) remove(tp TopicPartition) {
	l.mu.Lock()
	delete(l.m, tp)
	l.mu.Unlock()
}

func (l *lagTable) snapshot() map[TopicPartition]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[TopicPartition]int64, len(l.m))
	for k, v := range l.m {
		m[k] = v
	}
	return m
}

// splitState is a split being read: Next is the offset after the last
// emitted record.
type splitState struct {
	split Split
	next  int64
}

// emitter deserializes a record, emits it with its timestamp, and advances
// its split's state; on the task goroutine.
type emitter[T any] struct {
	deser   Deserializer[T]
	skip    bool
	skipped *atomic.Int64
}

func (e *emitter[T]) Emit(rec *kgo.Record, out connector.SourceOutput[T], st *splitState) error {
	v, err := e.deser.Deserialize(rec)
	if err != nil {
		if !e.skip {
			return &BadRecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err}
		}
		e.skipped.Add(1)
	} else {
		out.CollectWithTimestamp(v, rec.Timestamp.UnixMilli())
	}
	st.next = rec.Offset + 1
	return nil
}

// BadRecordError is a record the deserializer rejected.
type BadRecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("kafka source: cannot deserialize the record at %s-%d offset %d: %v (WithSkipBadRecords drops such records)",
		e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *BadRecordError) Unwrap() error { return e.Err }
