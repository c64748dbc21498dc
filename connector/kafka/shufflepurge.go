package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// shuffleSource is the reading side of a shuffle channel: the Kafka
// source, whose readers in a slot of a distributed job purge their
// partitions of what no restore can need.
type shuffleSource struct {
	*Source[connector.ShuffleRecord]
	channel    string
	purgeEvery time.Duration // < 0: never
}

// CreateEnumerator returns the Kafka source's enumerator, which in a slot
// of a distributed job starts its splits where the job's start record
// says (connector.ShuffleStarts), not at the channel's earliest offsets:
// records there before the job started are an earlier run's.
func (s *shuffleSource) CreateEnumerator(ctx connector.SplitEnumeratorContext[Split]) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(s.startingAt(ctx), ctx, EnumeratorState{}), nil
}

// RestoreEnumerator is CreateEnumerator's restored form: an enumerator
// checkpointed before its first discovery resolves its splits' starts
// then, from the same positions.
func (s *shuffleSource) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(s.startingAt(ctx), ctx, st), nil
}

// startingAt is the source's configuration with the starting offsets the
// enumerator's context gives the channel, if it gives any; partitions it
// gives none start at the earliest offset.
func (s *shuffleSource) startingAt(ctx connector.SplitEnumeratorContext[Split]) *sourceConfig {
	ss, ok := ctx.(connector.ShuffleStarts)
	if !ok {
		return &s.Source.cfg
	}
	starts := ss.ShuffleStart(s.channel)
	if starts == nil {
		return &s.Source.cfg
	}
	topic := ShuffleTopic(s.channel)
	specific := make(map[TopicPartition]int64, len(starts))
	for p, o := range starts {
		specific[TopicPartition{Topic: topic, Partition: int32(p)}] = o
	}
	cfg := s.Source.cfg
	cfg.starting = SpecificOffsets(specific, ResetEarliest)
	return &cfg
}

// CreateReader returns the Kafka source's reader, which in a slot of a
// distributed job (the context is a connector.ClaimInfo with a claim)
// also deletes the records below each completed checkpoint's offsets.
//
// Why that is safe there, and only there. The records of partition i of
// a channel are read by one reader: slot i's subtask of the channel's
// reading side (one partition per slot, subtask i reading partition i,
// and a channel per cut input). Whatever restores slot i's reader
// restores one of slot i's checkpoints, and in a distributed job that is
// always the one its log names: a new owner restores the log's restore
// point, a restart within a claim the last checkpoint it recorded, a
// slot's checkpoint given as a savepoint is refused, and a distributed
// job's savepoint holds no shuffle offset (it is taken with the shuffles
// drained, and leaves the shuffles' state out). A checkpoint is notified complete only once
// its record is in the log under the governing claim, so every later
// restore point is that checkpoint or a newer one, whose offsets are at
// or above its offsets (a reader's offsets only grow, and a restored
// reader starts from its checkpoint's). Retained older checkpoints are
// never restored. A zombie's notification is no exception: it was
// notified only if its record counted, before the newer claim.
//
// Outside a distributed job a retained checkpoint or a savepoint may be
// restored, at offsets below the latest completed checkpoint's, so
// nothing is purged. Should distributed jobs take savepoints one day, a
// purge must stay below the offsets of every savepoint still wanted.
func (s *shuffleSource) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[connector.ShuffleRecord, Split], error) {
	r, err := s.Source.CreateReader(ctx)
	if err != nil {
		return nil, err
	}
	ci, ok := ctx.(connector.ClaimInfo)
	if s.purgeEvery < 0 || !ok || ci.ClaimEpoch() == 0 {
		return r, nil
	}
	kr, ok := r.(*Reader[connector.ShuffleRecord])
	if !ok {
		return r, nil
	}
	cfg := &s.Source.cfg
	opts := append(append([]kgo.Opt(nil), cfg.kgoOpts...), kgo.SeedBrokers(cfg.seeds...))
	return &purgingReader{Reader: kr, offsets: map[int64]map[TopicPartition]int64{},
		purger: startPurger(opts, s.purgeEvery, cfg.logger)}, nil
}

// purgingReader is a shuffle reader of a slot that hands each completed
// checkpoint's offsets to its purger.
type purgingReader struct {
	*Reader[connector.ShuffleRecord]
	// offsets holds the next offset of every split at each snapshot not
	// yet completed; task goroutine only.
	offsets map[int64]map[TopicPartition]int64
	purger  *shufflePurger
}

// SnapshotState remembers the splits' offsets of the checkpoint.
func (r *purgingReader) SnapshotState(checkpointID int64) ([]Split, error) {
	splits, err := r.Reader.SnapshotState(checkpointID)
	if err != nil {
		return splits, err
	}
	m := make(map[TopicPartition]int64, len(splits))
	for _, sp := range splits {
		// A split not read yet may hold a symbolic start (the earliest
		// offset): nothing to purge below it.
		if sp.StartingOffset > 0 {
			m[sp.TopicPartition] = sp.StartingOffset
		}
	}
	r.offsets[checkpointID] = m
	return splits, nil
}

// NotifyCheckpointComplete hands the checkpoint's offsets to the purger;
// the engine never notifies an older checkpoint after a newer one.
func (r *purgingReader) NotifyCheckpointComplete(checkpointID int64) error {
	err := r.Reader.NotifyCheckpointComplete(checkpointID)
	if m, ok := r.offsets[checkpointID]; ok && len(m) > 0 {
		r.purger.offer(m)
	}
	for id := range r.offsets {
		if id <= checkpointID {
			delete(r.offsets, id)
		}
	}
	return err
}

// Close stops the purger (a purge in flight is cancelled: the next owner
// of the slot purges as far) and closes the reader.
func (r *purgingReader) Close() error {
	r.purger.stop()
	return r.Reader.Close()
}

// shufflePurger deletes the records of its reader's partitions below the
// offsets it is offered, at most every interval, on a goroutine of its
// own, so that a slow broker never holds the task. Offers made while it
// waits are merged: only the newest offset of each partition is sent.
type shufflePurger struct {
	opts   []kgo.Opt
	every  time.Duration
	logger *slog.Logger

	mu      sync.Mutex
	pending map[TopicPartition]int64

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func startPurger(opts []kgo.Opt, every time.Duration, logger *slog.Logger) *shufflePurger {
	p := &shufflePurger{opts: opts, every: every, logger: logger, kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p
}

func (p *shufflePurger) offer(m map[TopicPartition]int64) {
	p.mu.Lock()
	if p.pending == nil {
		p.pending = map[TopicPartition]int64{}
	}
	for tp, o := range m {
		p.pending[tp] = max(p.pending[tp], o)
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *shufflePurger) stop() {
	p.cancel()
	<-p.done
}

func (p *shufflePurger) run() {
	defer close(p.done)
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	purged := map[TopicPartition]int64{}
	warned := false
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		}
		p.mu.Lock()
		want := p.pending
		p.pending = nil
		p.mu.Unlock()
		offs := kadm.Offsets{}
		for tp, o := range want {
			if o > purged[tp] {
				offs.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: o, LeaderEpoch: -1})
			}
		}
		if len(offs) == 0 {
			continue
		}
		if cl == nil {
			var err error
			if cl, err = kgo.NewClient(p.opts...); err != nil {
				p.logger.Warn("kafka shuffle: client to delete read records", "err", err)
				cl = nil
				continue
			}
		}
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		resp, err := kadm.NewClient(cl).DeleteRecords(ctx, offs)
		cancel()
		if p.ctx.Err() != nil {
			return
		}
		var failed error
		if err != nil {
			failed = err
		}
		resp.Each(func(r kadm.DeleteRecordsResponse) {
			tp := TopicPartition{Topic: r.Topic, Partition: r.Partition}
			o, _ := offs.Lookup(r.Topic, r.Partition)
			switch {
			case r.Err == nil:
				purged[tp] = o.At
			case errors.Is(r.Err, kerr.OffsetOutOfRange):
				// The reader read up to o, so o is not above the high
				// watermark: it is below the log start already (kfake
				// refuses that, Kafka does not), an earlier purge of
				// another owner of the slot went as far.
				purged[tp] = o.At
			case failed == nil:
				failed = r.Err
			}
		})
		if failed != nil && !warned {
			below := map[string]int64{}
			offs.Each(func(o kadm.Offset) { below[TopicPartition{o.Topic, o.Partition}.String()] = o.At })
			// Once per reader: the purge runs again at the next
			// checkpoint and would repeat the same refusal.
			warned = true
			p.logger.Warn("kafka shuffle: deleting records every reader has passed failed; the shuffle topic keeps them until a later purge succeeds "+
				"(the purge needs Delete on the topic; WithShufflePurgeInterval(-1) turns it off)",
				"offsets", below, "err", failed)
		}
		if p.every > 0 {
			t := time.NewTimer(p.every)
			select {
			case <-p.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}
