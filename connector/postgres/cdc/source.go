package cdc

import (
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// ErrSlotLost is wrapped by the error of a split whose slot is gone or can
// no longer give what the checkpoint needs: the slot was dropped, its WAL
// was removed (max_slot_wal_keep_size), or it was confirmed past the
// restored checkpoint. Changes may be missing; the source never
// re-snapshots on its own. The error names the slot and also wraps
// connector.ErrInvalidConfiguration, so the job fails at once.
var ErrSlotLost = errors.New("replication slot lost")

// Source is a connector.Source of the changes of the tables of one
// publication, read through one logical replication slot (pgoutput). It is
// a description: it connects to nothing until a job runs it.
type Source struct {
	cfg      config
	replConf *pgconn.Config // replication=database
	sqlConf  *pgx.ConnConfig
}

var _ connector.Source[Change, Split, EnumeratorState] = (*Source)(nil)

// NewSource returns a source capturing, from the database connString names
// (a pgx connection string or URL), the tables of the publication. The
// role needs the REPLICATION attribute, SELECT on the tables, and to
// create a missing publication, ownership of them.
func NewSource(connString string, opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sqlConf, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres cdc: connection string: %w", err)
	}
	replConf, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres cdc: connection string: %w", err)
	}
	replConf.RuntimeParams["replication"] = "database"
	return &Source{cfg: cfg, replConf: replConf, sqlConf: sqlConf}, nil
}

// enumOptions: the one split is pushed to subtask 0, a rule of the split
// alone; the source is unbounded.
var enumOptions = []base.SourceOption{
	base.WithUnbounded(),
	base.WithSplitOwner(func(Split, int) int { return 0 }),
}

// Boundedness implements connector.Source: a change stream never ends.
func (s *Source) Boundedness() connector.Boundedness { return connector.ContinuousUnbounded }

// CreateEnumerator implements connector.Source: one split, new.
func (s *Source) CreateEnumerator(ctx connector.SplitEnumeratorContext[Split]) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, []Split{{Slot: s.cfg.slot}})
}

// RestoreEnumerator implements connector.Source.
func (s *Source) RestoreEnumerator(ctx connector.SplitEnumeratorContext[Split], st EnumeratorState) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	return newEnumerator(ctx, st.Pending)
}

func newEnumerator(ctx connector.SplitEnumeratorContext[Split], pending []Split) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	e, err := base.NewStaticEnumerator(ctx, pending, enumOptions...)
	if err != nil {
		return nil, fmt.Errorf("postgres cdc: %w", err)
	}
	return e, nil
}

// SplitSerializer implements connector.Source.
func (s *Source) SplitSerializer() connector.VersionedSerializer[Split] {
	return base.JSONSerializer[Split]()
}

// EnumeratorStateSerializer implements connector.Source.
func (s *Source) EnumeratorStateSerializer() connector.VersionedSerializer[EnumeratorState] {
	return base.StaticEnumeratorStateSerializer[Split]{Splits: base.JSONSerializer[Split]()}
}

// CreateReader implements connector.Source.
func (s *Source) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[Change, Split], error) {
	conf := &confirmation{}
	r, err := base.NewSimpleReader(ctx, func() (base.SplitReader[event, Split], error) {
		return newSlotReader(s, ctx, conf), nil
	}, emit, append([]base.SourceOption{base.WithManagerOptions(base.WithElementQueueCapacity(2))}, enumOptions...)...)
	if err != nil {
		return nil, err
	}
	return &Reader{SourceReaderBase: r, conf: conf, flushAt: map[int64]pglogrepl.LSN{}}, nil
}

// confirmation is the position the slot may be confirmed at, handed from
// the task goroutine (NotifyCheckpointComplete) to the fetcher goroutine
// that owns the replication connection.
type confirmation struct {
	mu  sync.Mutex
	lsn pglogrepl.LSN
}

func (c *confirmation) raise(lsn pglogrepl.LSN) {
	c.mu.Lock()
	c.lsn = max(c.lsn, lsn)
	c.mu.Unlock()
}

func (c *confirmation) get() pglogrepl.LSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lsn
}

// Reader is the source's reader: a base reader that remembers the resume
// position of each checkpoint and confirms it to the slot when the
// checkpoint completes.
type Reader struct {
	*base.SourceReaderBase[event, Change, Split, Split]
	conf *confirmation
	// flushAt is the split's FlushLSN at each checkpoint not yet
	// complete; task goroutine only.
	flushAt map[int64]pglogrepl.LSN
}

// SnapshotState implements connector.SourceReader and remembers the
// checkpoint's resume position.
func (r *Reader) SnapshotState(checkpointID int64) ([]Split, error) {
	splits, err := r.SourceReaderBase.SnapshotState(checkpointID)
	if err == nil && len(splits) == 1 && splits[0].Phase != PhaseNew {
		r.flushAt[checkpointID] = splits[0].FlushLSN
	}
	return splits, err
}

// NotifyCheckpointComplete implements connector.SourceReader: the slot is
// confirmed at the checkpoint's resume position, so that the server frees
// the WAL before it. It is the only place the slot is confirmed: the
// engine calls it once the sinks committed the checkpoint's output, so
// the slot never runs ahead of it, and a restore from the latest
// completed checkpoint finds every change after it still in the slot.
// The fetcher sends the confirmation with its next status update, within
// a second.
func (r *Reader) NotifyCheckpointComplete(checkpointID int64) error {
	lsn, ok := r.flushAt[checkpointID]
	for id := range r.flushAt {
		if id <= checkpointID {
			delete(r.flushAt, id)
		}
	}
	if ok {
		r.conf.raise(lsn)
	}
	return r.SourceReaderBase.NotifyCheckpointComplete(checkpointID)
}
