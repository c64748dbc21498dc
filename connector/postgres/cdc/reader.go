package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// eventKind is what a fetched event does to the split.
type eventKind uint8

const (
	// evSnapshotStart: the slot was made at lsn; the snapshot begins.
	evSnapshotStart eventKind = iota
	// evSnapshotResume: a snapshot interrupted by a failure goes on with
	// the read seg.
	evSnapshotResume
	// evRow: a snapshot row of table, whose primary key is key (text;
	// nil without one).
	evRow
	// evTableDone: the snapshot read table to its end.
	evTableDone
	// evSnapshotDone: the snapshot is emitted; the stream follows.
	evSnapshotDone
	// evChange: the index-th change (from 1) of the transaction
	// committing at lsn.
	evChange
	// evCommit: the transaction committing at lsn ended at end.
	evCommit
	// evProgress: every transaction committed before end was sent.
	evProgress
)

// event is what the slot reader fetches: a change to emit, or a move of
// the split's position.
type event struct {
	kind   eventKind
	change Change
	lsn    pglogrepl.LSN
	end    pglogrepl.LSN
	index  int64
	table  TableName
	key    []string
	seg    SnapshotSegment
}

// emit is the source's emit function, on the task goroutine: it emits
// the change, if any, and moves the split past the event.
func emit(e event, out connector.SourceOutput[Change], s *Split) error {
	switch e.kind {
	case evSnapshotStart:
		*s = Split{Slot: s.Slot, Phase: PhaseSnapshot, ConsistentLSN: e.lsn, FlushLSN: e.lsn,
			Segments: []SnapshotSegment{{LSN: e.lsn}}}
	case evSnapshotResume:
		s.Segments = append(s.Segments, e.seg)
	case evRow:
		out.CollectWithTimestamp(e.change, e.change.CommitTime.UnixMilli())
		s.SnapshotRows++
		if s.SnapshotTable != e.table {
			s.SnapshotTable, s.SnapshotTableRows = e.table, 0
		}
		s.SnapshotKey, s.SnapshotTableDone = e.key, false
		s.SnapshotTableRows++
	case evTableDone:
		if s.SnapshotTable != e.table {
			s.SnapshotTable, s.SnapshotTableRows, s.SnapshotKey = e.table, 0, nil
		}
		s.SnapshotTableDone = true
	case evSnapshotDone:
		s.Phase = PhaseStream
	case evChange:
		out.CollectWithTimestamp(e.change, e.change.CommitTime.UnixMilli())
		s.TxLSN, s.TxEmitted = e.lsn, e.index
	case evCommit:
		s.FlushLSN = max(s.FlushLSN, e.end)
		s.TxLSN, s.TxEmitted = 0, 0
		s.dropSegmentsBehind()
	case evProgress:
		if s.TxLSN == 0 {
			s.FlushLSN = max(s.FlushLSN, e.end)
			s.dropSegmentsBehind()
		}
	}
	return nil
}

// dropSegmentsBehind forgets the snapshot's reads and position once the
// stream's resume point is past every read's LSN: no change still to
// come committed before one of them.
func (s *Split) dropSegmentsBehind() {
	if s.Phase != PhaseStream || len(s.Segments) == 0 || s.FlushLSN < lastSegmentLSN(s.Segments) {
		return
	}
	s.Segments, s.SnapshotTable, s.SnapshotKey, s.SnapshotTableRows, s.SnapshotTableDone = nil, TableName{}, nil, 0, false
}

// lastSegmentLSN is the highest LSN of the reads.
func lastSegmentLSN(segs []SnapshotSegment) pglogrepl.LSN {
	var m pglogrepl.LSN
	for _, g := range segs {
		m = max(m, g.LSN)
	}
	return m
}

// relation is what the reader knows of a table from the stream.
type relation struct {
	msg *pglogrepl.RelationMessage
	key []string
	// above compares two primary keys given as text (a > b), in the
	// key's order; made when a change of the table must be placed
	// against a snapshot read's boundary key.
	above string
}

// txn is the transaction being received.
type txn struct {
	commit pglogrepl.LSN
	xid    uint32
	time   time.Time
	n      int64 // changes received
	skip   bool  // emitted before the restored checkpoint
	skipN  int64 // its first skipN changes were
}

// snapshotRead is the snapshot being read, in one REPEATABLE READ
// transaction on the exported snapshot of the slot.
type snapshotRead struct {
	tx     pgx.Tx
	tables []tableRef
	next   int      // the table to open next
	rows   pgx.Rows // the table being read, nil between tables
	cur    tableRef // its name
	cols   []string // its columns
	key    []string // its primary key
	at     pglogrepl.LSN
	time   time.Time
	// from is where the read starts: the first table's rows after
	// from.AfterKey when it is from.Table (a resumed snapshot).
	from SnapshotSegment
	// tempSlot is the temporary slot that exported a resumed
	// snapshot; dropped when the read ends.
	tempSlot string
}

type tableRef struct {
	oid          uint32
	schema, name string
}

func (t tableRef) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

func (t tableRef) table() TableName { return TableName{Schema: t.schema, Name: t.name} }

// slotReader is the source's base.SplitReader: it makes the slot and reads
// the snapshot, then streams the slot. Everything but WakeUp runs on the
// fetcher goroutine.
type slotReader struct {
	src  *Source
	conf *confirmation

	life   context.Context // ends at Close
	cancel context.CancelFunc

	split   *Split // the fetch-side copy of the split, nil until assigned
	started bool
	repl    *pgconn.PgConn
	sql     *pgx.Conn
	types   *pgtype.Map
	snap    *snapshotRead
	rels    map[uint32]*relation
	// segs are the snapshot's reads (Split.Segments) and lastSeg the
	// highest of their LSNs: changes that committed before it are
	// placed against the read of their row.
	segs    []SnapshotSegment
	lastSeg pglogrepl.LSN

	// from is where streaming started: the restored resume point or the
	// consistent point; the slot is confirmed there until a checkpoint
	// completes. resumeTx and resumeTxN are the restored partial
	// transaction.
	from      pglogrepl.LSN
	resumeTx  pglogrepl.LSN
	resumeTxN int64
	inTx      bool
	tx        txn
	progress  pglogrepl.LSN // last progress event
	sent      pglogrepl.LSN // last position confirmed to the server
	lastSent  time.Time

	// busySince is when the reader found its slot held by another
	// connection, zero while it is not waiting for the slot.
	busySince time.Time

	mu    sync.Mutex // guards wake and woken, which WakeUp touches
	wake  context.CancelFunc
	woken bool
}

func newSlotReader(src *Source, _ connector.SourceReaderContext, conf *confirmation) *slotReader {
	life, cancel := context.WithCancel(context.Background())
	return &slotReader{src: src, conf: conf, life: life, cancel: cancel, types: pgtype.NewMap(), rels: map[uint32]*relation{}}
}

// HandleSplitsChanges implements base.SplitReader.
func (r *slotReader) HandleSplitsChanges(c base.SplitsChange[Split]) error {
	for _, s := range c.Added {
		s := s
		r.split = &s
	}
	if len(c.Removed) > 0 {
		r.split = nil
		r.closeConns()
	}
	return nil
}

// WakeUp implements base.SplitReader: it ends a wait for the server.
func (r *slotReader) WakeUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake != nil {
		r.wake()
	} else {
		r.woken = true
	}
}

// Close implements base.SplitReader.
func (r *slotReader) Close() error {
	r.closeConns()
	r.cancel()
	return nil
}

func (r *slotReader) closeConns() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.snap != nil {
		if r.snap.rows != nil {
			r.snap.rows.Close()
		}
		_ = r.snap.tx.Rollback(ctx)
		r.snap = nil
	}
	if r.repl != nil {
		_ = r.repl.Close(ctx)
		r.repl = nil
	}
	if r.sql != nil {
		_ = r.sql.Close(ctx)
		r.sql = nil
	}
	r.started = false
}

// Fetch implements base.SplitReader.
func (r *slotReader) Fetch(ctx context.Context) (base.RecordsWithSplitIDs[event], error) {
	if r.split == nil {
		return nil, nil
	}
	r.mu.Lock()
	if r.woken {
		r.woken = false
		r.mu.Unlock()
		return nil, nil
	}
	wctx, wake := context.WithCancel(ctx)
	r.wake = wake
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.wake = nil
		r.mu.Unlock()
		wake()
	}()

	b := &batch{id: r.split.SplitID(), max: r.src.cfg.batchSize, recs: &base.RecordsBySplits[event]{}}
	var err error
	switch {
	case !r.started:
		if err = r.start(b); err == nil {
			r.busySince = time.Time{}
		}
	case r.snap != nil:
		err = r.readSnapshot(b)
	default:
		err = r.receive(wctx, b)
	}
	if err != nil {
		r.closeConns()
		// Nil when the slot is held and the reader waits for it: an empty
		// fetch, and the next one starts again.
		return nil, r.waitForSlot(wctx, err)
	}
	return b.recs, nil
}

// slotRetryPause is the pause between two attempts to start on a slot
// another connection holds.
const slotRetryPause = 200 * time.Millisecond

// waitForSlot takes the error of a fetch. When it says that another
// connection holds the slot (SQLSTATE 55006, object_in_use: the walsender
// of the attempt before has not exited yet, or the server has not yet
// found its peer dead), the reader waits: it pauses and returns nil, and
// the next fetch starts again, until WithSlotWait has passed since it
// first found the slot held; then the error says so. Any other error is
// returned as it is.
func (r *slotReader) waitForSlot(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
		return err
	}
	if r.busySince.IsZero() {
		r.busySince = time.Now()
	}
	if waited := time.Since(r.busySince); waited >= r.src.cfg.slotWait {
		return fmt.Errorf("%w; waited %v for the connection holding it to let go (WithSlotWait): is another job reading the slot?",
			err, waited.Round(time.Millisecond))
	}
	select {
	case <-ctx.Done():
	case <-time.After(slotRetryPause):
	}
	return nil
}

// batch is one fetch's events.
type batch struct {
	id   string
	max  int
	n    int
	recs *base.RecordsBySplits[event]
}

func (b *batch) add(e event) {
	b.recs.Add(b.id, e)
	b.n++
}

func (b *batch) full() bool { return b.n >= b.max }

// slotErr names the slot in err.
func (r *slotReader) slotErr(what string, err error) error {
	return fmt.Errorf("postgres cdc: slot %q: %s: %w", r.split.Slot, what, err)
}

// lost is the error of a slot that cannot give what the split needs.
func (r *slotReader) lost(why string) error {
	return fmt.Errorf("postgres cdc: slot %q %s; changes may be missing, so the source stops rather than take a new snapshot: "+
		"drop the slot (SELECT pg_drop_replication_slot('%s')) and start the job without its checkpoints to capture the tables anew: %w (%w)",
		r.split.Slot, why, r.split.Slot, ErrSlotLost, connector.ErrInvalidConfiguration)
}

// start connects and, for a new split, makes the slot and opens the
// snapshot; for a streaming split, checks the slot and starts streaming.
func (r *slotReader) start(b *batch) error {
	s := r.split
	resume := s.Phase == PhaseSnapshot && s.SnapshotRows > 0
	if resume && !resumable(s) && !r.src.cfg.restartSnapshot {
		why := fmt.Sprintf("table %s has no primary key, so its rows cannot be read again from where the failure cut them", s.SnapshotTable)
		if len(s.Segments) == 0 {
			why = "the checkpoint was written by a version of the source that did not record where the snapshot was"
		}
		return fmt.Errorf("postgres cdc: slot %q: the job failed in the snapshot after %d rows of it were in a completed checkpoint, "+
			"and the snapshot cannot be resumed: %s; "+
			"give the source WithSnapshotRestartAfterFailure(true) to take it again (its output then holds those rows twice), "+
			"or drop the slot (SELECT pg_drop_replication_slot('%s')) and start the job without its checkpoints: %w",
			s.Slot, s.SnapshotRows, why, s.Slot, connector.ErrInvalidConfiguration)
	}
	r.segs, r.lastSeg = s.Segments, lastSegmentLSN(s.Segments)
	var err error
	if r.sql, err = pgx.ConnectConfig(r.life, r.src.sqlConf.Copy()); err != nil {
		return fmt.Errorf("postgres cdc: connect to %s:%d database %q as %q: %w", r.src.sqlConf.Host, r.src.sqlConf.Port, r.src.sqlConf.Database, r.src.sqlConf.User, err)
	}
	if r.repl, err = pgconn.ConnectConfig(r.life, r.src.replConf.Copy()); err != nil {
		return fmt.Errorf("postgres cdc: replication connection to %s:%d database %q as %q (the role needs REPLICATION): %w",
			r.src.replConf.Host, r.src.replConf.Port, r.src.replConf.Database, r.src.replConf.User, err)
	}
	r.started = true
	if s.Phase == PhaseStream {
		if err := r.checkSlot(); err != nil {
			return err
		}
		r.from, r.resumeTx, r.resumeTxN = s.FlushLSN, s.TxLSN, s.TxEmitted
		return r.startStream()
	}
	if resume && resumable(s) {
		if err := r.checkSlot(); err != nil {
			return err
		}
		return r.resumeSnapshot(b)
	}
	return r.startSnapshot(b)
}

// resumable reports whether the snapshot of a split restored in it can
// go on from where it stopped: its reads are recorded, and it stopped
// after the last row of a table or at a row with a primary key.
func resumable(s *Split) bool {
	return len(s.Segments) > 0 && (s.SnapshotTableDone || s.SnapshotKey != nil)
}

// resumeSnapshot goes on with a snapshot a failure interrupted: the rows
// after the split's position, read in a snapshot of their own, exported
// by a temporary slot made for it; the stream then starts at the slot's
// consistent point, and each change committed before the new read's
// consistent point is placed against the read of its row (see the
// package doc, "Resuming a snapshot").
func (r *slotReader) resumeSnapshot(b *batch) error {
	s := r.split
	seg := SnapshotSegment{Table: s.SnapshotTable, AfterTable: s.SnapshotTableDone}
	if !s.SnapshotTableDone {
		seg.AfterKey = s.SnapshotKey
	}
	temp := tempSlotName(s.Slot)
	res, err := pglogrepl.CreateReplicationSlot(r.life, r.repl, temp, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return r.slotErr(fmt.Sprintf("create the temporary slot %q that exports the resumed snapshot (is max_replication_slots reached?)", temp), err)
	}
	if seg.LSN, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
		return r.slotErr("consistent point of the temporary slot", err)
	}
	snap, err := r.openSnapshot(res.SnapshotName, seg.LSN)
	if err != nil {
		return err
	}
	snap.from, snap.tempSlot = seg, temp
	tables := snap.tables[:0]
	for _, t := range snap.tables {
		if c := t.table().compare(seg.Table); c > 0 || c == 0 && !seg.AfterTable {
			tables = append(tables, t)
		}
	}
	snap.tables = tables
	r.segs = append(r.segs, seg)
	r.lastSeg = max(r.lastSeg, seg.LSN)
	r.split.Segments = r.segs
	r.from = s.FlushLSN
	b.add(event{kind: evSnapshotResume, seg: seg})
	return nil
}

// tempSlotName names the temporary slot of a resumed snapshot of slot:
// unique on the server (slots are the server's), within PostgreSQL's 63
// characters.
func tempSlotName(slot string) string {
	return fmt.Sprintf("%s_resume_%x", slot[:min(len(slot), 45)], uint32(time.Now().UnixNano()))
}

// checkSlot refuses a slot that is gone, lost its WAL, or was confirmed
// past the split's resume point.
func (r *slotReader) checkSlot() error {
	var confirmed pglogrepl.LSN
	var walStatus *string
	err := r.sql.QueryRow(r.life,
		"SELECT confirmed_flush_lsn, wal_status FROM pg_replication_slots WHERE slot_name = $1", r.split.Slot).Scan(&confirmed, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return r.lost("does not exist (it was dropped, or the database failed over to a server without it)")
	}
	if err != nil {
		return r.slotErr("read pg_replication_slots", err)
	}
	if walStatus != nil && *walStatus == "lost" {
		return r.lost("lost WAL it needs (max_slot_wal_keep_size)")
	}
	if confirmed > r.split.FlushLSN {
		return r.lost(fmt.Sprintf("is confirmed at %v, past the checkpoint's position %v (was the job restored from an older checkpoint, or is another job reading the slot?)",
			confirmed, r.split.FlushLSN))
	}
	return nil
}

// startSnapshot makes the publication if needed and the slot anew,
// exporting its snapshot, and opens that snapshot in a REPEATABLE READ
// transaction. A slot of the same name is dropped first: the split is new,
// or its snapshot emitted nothing that a completed checkpoint holds (so
// nothing read from the slot before was committed downstream), or
// WithSnapshotRestartAfterFailure allows taking the snapshot again.
func (r *slotReader) startSnapshot(b *batch) error {
	if err := r.ensurePublication(); err != nil {
		return err
	}
	slot := r.split.Slot
	var exists bool
	if err := r.sql.QueryRow(r.life, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", slot).Scan(&exists); err != nil {
		return r.slotErr("read pg_replication_slots", err)
	}
	if exists {
		if _, err := r.sql.Exec(r.life, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			return r.slotErr("drop the slot of a run that checkpointed none of its changes (is another job reading it?)", err)
		}
	}
	res, err := pglogrepl.CreateReplicationSlot(r.life, r.repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return r.slotErr("create (is max_replication_slots reached, or wal_level not logical?)", err)
	}
	at, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return r.slotErr("consistent point", err)
	}
	if _, err := r.openSnapshot(res.SnapshotName, at); err != nil {
		return err
	}
	r.split.Phase, r.split.FlushLSN = PhaseSnapshot, at
	r.segs, r.lastSeg = []SnapshotSegment{{LSN: at}}, at
	r.split.Segments = r.segs
	r.from = at
	b.add(event{kind: evSnapshotStart, lsn: at})
	return nil
}

// openSnapshot imports the exported snapshot name, whose consistent
// point is at, into a REPEATABLE READ READ ONLY transaction and lists the
// publication's tables in it, in the order they are read.
func (r *slotReader) openSnapshot(name string, at pglogrepl.LSN) (*snapshotRead, error) {
	tx, err := r.sql.BeginTx(r.life, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, r.slotErr("begin the snapshot's transaction", err)
	}
	snap := &snapshotRead{tx: tx, at: at, time: time.Now()}
	r.snap = snap
	if _, err := tx.Exec(r.life, "SET TRANSACTION SNAPSHOT '"+name+"'"); err != nil {
		return nil, r.slotErr("import the slot's snapshot", err)
	}
	rows, err := tx.Query(r.life, `SELECT c.oid, n.nspname, c.relname
		FROM pg_publication_tables p
		JOIN pg_namespace n ON n.nspname = p.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
		WHERE p.pubname = $1 ORDER BY n.nspname, c.relname`, r.src.cfg.publication)
	if err != nil {
		return nil, r.slotErr("list the publication's tables", err)
	}
	for rows.Next() {
		var t tableRef
		if err := rows.Scan(&t.oid, &t.schema, &t.name); err != nil {
			rows.Close()
			return nil, r.slotErr("list the publication's tables", err)
		}
		snap.tables = append(snap.tables, t)
	}
	if err := rows.Err(); err != nil {
		return nil, r.slotErr("list the publication's tables", err)
	}
	return snap, nil
}

// ensurePublication makes the publication, FOR TABLE the configured
// tables, if it is missing.
func (r *slotReader) ensurePublication() error {
	pub := r.src.cfg.publication
	var exists bool
	if err := r.sql.QueryRow(r.life, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return fmt.Errorf("postgres cdc: publication %q: %w", pub, err)
	}
	if exists {
		return nil
	}
	if !r.src.cfg.createPublication || len(r.src.cfg.tables) == 0 {
		return fmt.Errorf("postgres cdc: publication %q does not exist; create it (CREATE PUBLICATION %s FOR TABLE ...) or give the tables to create it for: %w",
			pub, pgx.Identifier{pub}.Sanitize(), connector.ErrInvalidConfiguration)
	}
	idents := make([]string, len(r.src.cfg.tables))
	for i, t := range r.src.cfg.tables {
		schema, name, _ := splitTable(t)
		idents[i] = pgx.Identifier{schema, name}.Sanitize()
	}
	if _, err := r.sql.Exec(r.life, "CREATE PUBLICATION "+pgx.Identifier{pub}.Sanitize()+" FOR TABLE "+strings.Join(idents, ", ")); err != nil {
		return fmt.Errorf("postgres cdc: create publication %q for %s (the role must own the tables): %w", pub, strings.Join(r.src.cfg.tables, ", "), err)
	}
	return nil
}

// readSnapshot reads up to a batch of snapshot rows; after the last table
// it ends the snapshot and starts streaming from the consistent point.
func (r *slotReader) readSnapshot(b *batch) error {
	snap := r.snap
	for !b.full() {
		if snap.rows == nil {
			if snap.next == len(snap.tables) {
				if err := snap.tx.Commit(r.life); err != nil {
					return r.slotErr("end the snapshot's transaction", err)
				}
				r.snap = nil
				if snap.tempSlot != "" {
					// The snapshot it exported is no longer needed; the
					// replication connection goes on to stream.
					if err := pglogrepl.DropReplicationSlot(r.life, r.repl, snap.tempSlot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
						return r.slotErr(fmt.Sprintf("drop the temporary slot %q of the resumed snapshot", snap.tempSlot), err)
					}
				}
				b.add(event{kind: evSnapshotDone})
				r.split.Phase = PhaseStream
				return r.startStream()
			}
			if err := r.openTable(snap); err != nil {
				return err
			}
		}
		if !snap.rows.Next() {
			err := snap.rows.Err()
			snap.rows.Close()
			snap.rows = nil
			if err != nil {
				return fmt.Errorf("postgres cdc: snapshot of %s.%s: %w", snap.cur.schema, snap.cur.name, err)
			}
			snap.next++
			b.add(event{kind: evTableDone, table: snap.cur.table()})
			continue
		}
		vals, err := snap.rows.Values()
		if err != nil {
			return fmt.Errorf("postgres cdc: snapshot of %s.%s: decode a row: %w", snap.cur.schema, snap.cur.name, err)
		}
		// The first len(key) values are the key as text, then the row.
		var key []string
		if n := len(snap.key); n > 0 {
			key = make([]string, n)
			for i := range key {
				key[i], _ = vals[i].(string)
			}
			vals = vals[n:]
		}
		after := make(map[string]any, len(vals))
		for i, v := range vals {
			after[snap.cols[i]] = v
		}
		b.add(event{kind: evRow, table: snap.cur.table(), key: key, change: Change{
			Op: OpRead, Schema: snap.cur.schema, Table: snap.cur.name, After: after, Key: snap.key,
			LSN: snap.at, CommitLSN: snap.at, CommitTime: snap.time,
		}})
	}
	return nil
}

// openTable starts reading the next table of the snapshot: a table with
// a primary key in the key's order, its key as text first, so that the
// split records the last key emitted; a resumed read's first table from
// the row after the recorded key.
func (r *slotReader) openTable(snap *snapshotRead) error {
	t := snap.tables[snap.next]
	kcols, err := keyColumns(r.life, snap.tx, t.oid)
	if err != nil {
		return fmt.Errorf("postgres cdc: snapshot of %s.%s: primary key: %w", t.schema, t.name, err)
	}
	query, args := "SELECT * FROM "+t.ident(), []any(nil)
	if len(kcols) == 0 && snap.from.AfterKey != nil && t.table() == snap.from.Table {
		return fmt.Errorf("postgres cdc: resume the snapshot of %s.%s after key (%s): the table has no primary key now, so the rows after it cannot be told from the others: was the key dropped while the job was away? %w",
			t.schema, t.name, strings.Join(snap.from.AfterKey, ", "), connector.ErrInvalidConfiguration)
	}
	if len(kcols) > 0 {
		var asText, order []string
		for _, k := range kcols {
			asText = append(asText, "t."+pgx.Identifier{k.name}.Sanitize()+"::text")
			order = append(order, "t."+pgx.Identifier{k.name}.Sanitize())
		}
		query = "SELECT " + strings.Join(asText, ", ") + ", t.* FROM " + t.ident() + " t"
		if from := snap.from; from.AfterKey != nil && t.table() == from.Table {
			if len(from.AfterKey) != len(kcols) {
				return fmt.Errorf("postgres cdc: resume the snapshot of %s.%s: the checkpoint's key has %d columns, the table's primary key (%s) %d: was the key changed while the job was away?",
					t.schema, t.name, len(from.AfterKey), strings.Join(order, ", "), len(kcols))
			}
			query += " WHERE (" + strings.Join(order, ", ") + ") > (" + keyParams(kcols, 1) + ")"
			for _, v := range from.AfterKey {
				args = append(args, v)
			}
		}
		query += " ORDER BY " + strings.Join(order, ", ")
	}
	rows, err := snap.tx.Query(r.life, query, args...)
	if err != nil {
		return fmt.Errorf("postgres cdc: snapshot of %s.%s (the role needs SELECT on it): %w", t.schema, t.name, err)
	}
	snap.rows, snap.cur, snap.key, snap.cols = rows, t, nil, nil
	for _, k := range kcols {
		snap.key = append(snap.key, k.name)
	}
	for _, fd := range rows.FieldDescriptions()[len(kcols):] {
		snap.cols = append(snap.cols, fd.Name)
	}
	return nil
}

// keyColumn is a primary key column: its name, its type as SQL names it,
// and the collation to compare it in when the column's is not its
// type's default.
type keyColumn struct {
	name, typ, collation string
}

// keyColumns returns the primary key columns of the table, in the key's
// order; none when it has no primary key.
func keyColumns(ctx context.Context, q querier, oid uint32) ([]keyColumn, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
			CASE WHEN a.attcollation <> 0 AND a.attcollation <> ty.typcollation
				THEN pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) ELSE '' END
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		JOIN pg_type ty ON ty.oid = a.atttypid
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, oid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyColumn, error) {
		var k keyColumn
		err := row.Scan(&k.name, &k.typ, &k.collation)
		return k, err
	})
}

// keyParams is a key's parameters from $first on, each text cast to its
// column's type and collation, so that they compare as the column's
// values do (the order of ORDER BY on the key).
func keyParams(kcols []keyColumn, first int) string {
	ps := make([]string, len(kcols))
	for i, k := range kcols {
		ps[i] = fmt.Sprintf("$%d::text::%s", first+i, k.typ)
		if k.collation != "" {
			ps[i] += " COLLATE " + k.collation
		}
	}
	return strings.Join(ps, ", ")
}

// querier is a pgx.Conn or a pgx.Tx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// primaryKey returns the primary key columns of the table, in the key's
// order; none when it has no primary key.
func primaryKey(ctx context.Context, q querier, oid uint32) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, oid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// startStream starts streaming the slot from r.from.
func (r *slotReader) startStream() error {
	pub := strings.ReplaceAll(pgx.Identifier{r.src.cfg.publication}.Sanitize(), "'", "''")
	err := pglogrepl.StartReplication(r.life, r.repl, r.split.Slot, r.from, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	})
	if err != nil {
		if lost := r.lostError(err); lost != nil {
			return lost
		}
		return r.slotErr(fmt.Sprintf("start streaming at %v", r.from), err)
	}
	r.sent, r.lastSent = 0, time.Time{}
	return nil
}

// lostError returns the lost-slot error for a server error saying the slot
// or its WAL is gone, nil for another error.
func (r *slotReader) lostError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch {
	case pgErr.Code == "42704": // undefined_object
		return r.lost("does not exist (it was dropped, or the database failed over to a server without it): " + pgErr.Message)
	case pgErr.Code == "58P01", strings.Contains(pgErr.Message, "invalidated"), strings.Contains(pgErr.Message, "has already been removed"):
		return r.lost("lost WAL it needs: " + pgErr.Message)
	}
	return nil
}

// receive reads the stream until the batch is full, a second passed, or
// WakeUp; every status interval, and as soon as a checkpoint completed, it
// sends the server the confirmed position first.
func (r *slotReader) receive(wctx context.Context, b *batch) error {
	deadline := time.Now().Add(time.Second)
	for !b.full() {
		if err := r.sendStatus(false); err != nil {
			return err
		}
		rctx, cancel := context.WithDeadline(wctx, deadline)
		msg, err := r.repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if rctx.Err() != nil && !r.repl.IsClosed() {
				return nil // the deadline, or WakeUp
			}
			if lost := r.lostError(err); lost != nil {
				return lost
			}
			return r.slotErr("receive", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.handleCopyData(m.Data, b); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			err := pgconn.ErrorResponseToPgError(m)
			if lost := r.lostError(err); lost != nil {
				return lost
			}
			return r.slotErr("stream", err)
		}
		if b.n > 0 {
			// Something to hand over: wait only briefly for more.
			if soon := time.Now().Add(20 * time.Millisecond); soon.Before(deadline) {
				deadline = soon
			}
		}
	}
	return nil
}

// sendStatus confirms the position of the latest completed checkpoint
// (the streaming start until one completes) when it moved or the status
// interval passed, or now with force.
func (r *slotReader) sendStatus(force bool) error {
	lsn := max(r.conf.get(), r.from)
	if !force && lsn == r.sent && time.Since(r.lastSent) < r.src.cfg.statusInterval {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(r.life, r.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn,
	})
	if err != nil {
		return r.slotErr(fmt.Sprintf("confirm %v", lsn), err)
	}
	r.sent, r.lastSent = lsn, time.Now()
	return nil
}

func (r *slotReader) handleCopyData(data []byte, b *batch) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return r.slotErr("keepalive", err)
		}
		if !r.inTx && k.ServerWALEnd > r.progress {
			r.progress = k.ServerWALEnd
			b.add(event{kind: evProgress, end: k.ServerWALEnd})
		}
		if k.ReplyRequested {
			return r.sendStatus(true)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return r.slotErr("XLogData", err)
		}
		return r.handleMessage(x, b)
	}
	return nil
}

func (r *slotReader) handleMessage(x pglogrepl.XLogData, b *batch) error {
	msg, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		return r.slotErr(fmt.Sprintf("decode pgoutput message at %v", x.WALStart), err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r.rels[m.RelationID] = &relation{msg: m}
	case *pglogrepl.BeginMessage:
		r.inTx = true
		r.tx = txn{commit: m.FinalLSN, xid: m.Xid, time: m.CommitTime, skip: m.FinalLSN < r.from}
		if m.FinalLSN == r.resumeTx {
			r.tx.skipN = r.resumeTxN
		}
	case *pglogrepl.InsertMessage:
		return r.change(b, x.WALStart, OpCreate, m.RelationID, 0, nil, m.Tuple)
	case *pglogrepl.UpdateMessage:
		return r.change(b, x.WALStart, OpUpdate, m.RelationID, m.OldTupleType, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		return r.change(b, x.WALStart, OpDelete, m.RelationID, m.OldTupleType, m.OldTuple, nil)
	case *pglogrepl.CommitMessage:
		r.inTx = false
		if !r.tx.skip {
			b.add(event{kind: evCommit, lsn: m.CommitLSN, end: m.TransactionEndLSN})
		}
	}
	return nil
}

// change adds the change, unless the restored checkpoint holds it.
func (r *slotReader) change(b *batch, at pglogrepl.LSN, op Op, relID uint32, oldType uint8, old, new *pglogrepl.TupleData) error {
	r.tx.n++
	if r.tx.skip || r.tx.n <= r.tx.skipN {
		return nil
	}
	rel, ok := r.rels[relID]
	if !ok {
		return r.slotErr(fmt.Sprintf("change at %v", at), fmt.Errorf("relation %d was not described before its change", relID))
	}
	if rel.key == nil {
		key, err := primaryKey(r.life, r.sql, relID)
		if err != nil {
			return fmt.Errorf("postgres cdc: primary key of %s.%s: %w", rel.msg.Namespace, rel.msg.RelationName, err)
		}
		if len(key) == 0 {
			for _, c := range rel.msg.Columns {
				if c.Flags&1 != 0 {
					key = append(key, c.Name)
				}
			}
		}
		rel.key = append([]string{}, key...)
	}
	if r.tx.commit < r.lastSeg {
		var err error
		if op, old, new, err = r.placeAgainstSnapshot(rel, op, old, new); err != nil {
			return err
		}
		if op == 0 {
			return nil
		}
	}
	c := Change{
		Op: op, Schema: rel.msg.Namespace, Table: rel.msg.RelationName, Key: rel.key,
		LSN: at, CommitLSN: r.tx.commit, TxID: r.tx.xid, CommitTime: r.tx.time,
	}
	var err error
	if old != nil {
		if c.Before, err = r.row(rel, old, oldType == 'K'); err != nil {
			return err
		}
	}
	if new != nil {
		if c.After, err = r.row(rel, new, false); err != nil {
			return err
		}
	}
	b.add(event{kind: evChange, change: c, lsn: r.tx.commit, index: r.tx.n})
	return nil
}

// placeAgainstSnapshot decides what a change that committed before the
// last snapshot read's consistent point is to the output. A row's image
// came from the read whose segment holds the row's key: a change that
// committed before that read's consistent point is in the image, one
// that committed at or after it is not. So an insert is emitted when
// its new row's read is before it, a delete when its old row's is, an
// update when both are; an update of the key whose old row's read is
// before it and new row's after is only the old row's delete, and the
// other way round only the new row's insert. op 0 drops the change.
func (r *slotReader) placeAgainstSnapshot(rel *relation, op Op, old, new *pglogrepl.TupleData) (Op, *pglogrepl.TupleData, *pglogrepl.TupleData, error) {
	oldSeen, newSeen := false, false // the change is after the read of the old, new row
	var err error
	if new != nil {
		if newSeen, err = r.afterReadOf(rel, new); err != nil {
			return 0, nil, nil, err
		}
	}
	if old != nil {
		if oldSeen, err = r.afterReadOf(rel, old); err != nil {
			return 0, nil, nil, err
		}
	} else if op == OpUpdate {
		oldSeen = newSeen // the key did not change
	}
	switch {
	case op == OpCreate && newSeen, op == OpDelete && oldSeen, op == OpUpdate && oldSeen && newSeen:
		return op, old, new, nil
	case op == OpUpdate && oldSeen:
		return OpDelete, old, nil, nil
	case op == OpUpdate && newSeen:
		return OpCreate, nil, new, nil
	}
	return 0, nil, nil, nil
}

// afterReadOf reports whether the transaction being received committed
// at or after the consistent point of the snapshot read that gave the
// row of tuple t (the last read whose position is at or before it).
func (r *slotReader) afterReadOf(rel *relation, t *pglogrepl.TupleData) (bool, error) {
	table := TableName{Schema: rel.msg.Namespace, Name: rel.msg.RelationName}
	for i := len(r.segs) - 1; i >= 0; i-- {
		g := r.segs[i]
		holds, err := g.holds(table, func(after []string) (bool, error) { return r.keyAbove(rel, t, after) })
		if err != nil {
			return false, err
		}
		if holds {
			return r.tx.commit >= g.LSN, nil
		}
	}
	return true, nil // unreachable: the first read holds every row
}

// keyAbove reports whether the primary key of tuple t is above after
// (text, in the key's order), compared by the server in the columns'
// types and collations, as the snapshot ordered the rows.
func (r *slotReader) keyAbove(rel *relation, t *pglogrepl.TupleData, after []string) (bool, error) {
	name := rel.msg.Namespace + "." + rel.msg.RelationName
	if rel.above == "" {
		kcols, err := keyColumns(r.life, r.sql, rel.msg.RelationID)
		if err != nil {
			return false, fmt.Errorf("postgres cdc: primary key of %s: %w", name, err)
		}
		if len(kcols) != len(after) {
			return false, fmt.Errorf("postgres cdc: %s: the primary key has %d columns, the snapshot's recorded key %d: was the key changed while the snapshot ran?", name, len(kcols), len(after))
		}
		rel.above = "SELECT (" + keyParams(kcols, 1) + ") > (" + keyParams(kcols, len(kcols)+1) + ")"
	}
	args := make([]any, 0, 2*len(after))
	for _, k := range rel.key {
		i := slices.IndexFunc(rel.msg.Columns, func(c *pglogrepl.RelationMessageColumn) bool { return c.Name == k })
		if i < 0 || i >= len(t.Columns) || t.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return false, fmt.Errorf("postgres cdc: %s: a change's tuple lacks key column %q, needed to place it against the resumed snapshot", name, k)
		}
		args = append(args, string(t.Columns[i].Data))
	}
	if len(args) != len(after) {
		return false, fmt.Errorf("postgres cdc: %s: key (%s) of %d columns, the snapshot's recorded key %d", name, strings.Join(rel.key, ", "), len(args), len(after))
	}
	for _, v := range after {
		args = append(args, v)
	}
	var above bool
	if err := r.sql.QueryRow(r.life, rel.above, args...).Scan(&above); err != nil {
		return false, fmt.Errorf("postgres cdc: %s: compare a change's key with the snapshot's: %w", name, err)
	}
	return above, nil
}

// row decodes a tuple; keyOnly keeps the key columns of a 'K' tuple alone.
func (r *slotReader) row(rel *relation, t *pglogrepl.TupleData, keyOnly bool) (map[string]any, error) {
	m := make(map[string]any, len(t.Columns))
	for i, col := range t.Columns {
		if i >= len(rel.msg.Columns) {
			break
		}
		desc := rel.msg.Columns[i]
		if keyOnly && desc.Flags&1 == 0 {
			continue
		}
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
			m[desc.Name] = nil
		case pglogrepl.TupleDataTypeToast:
			// Unchanged TOASTed value, not sent: left out.
		case pglogrepl.TupleDataTypeText:
			v, err := r.decode(desc.DataType, col.Data)
			if err != nil {
				return nil, fmt.Errorf("postgres cdc: %s.%s column %q: decode %q: %w", rel.msg.Namespace, rel.msg.RelationName, desc.Name, col.Data, err)
			}
			m[desc.Name] = v
		default:
			return nil, fmt.Errorf("postgres cdc: %s.%s column %q: tuple data of kind %q", rel.msg.Namespace, rel.msg.RelationName, desc.Name, col.DataType)
		}
	}
	return m, nil
}

func (r *slotReader) decode(oid uint32, data []byte) (any, error) {
	dt, ok := r.types.TypeForOID(oid)
	if !ok {
		return string(data), nil
	}
	return dt.Codec.DecodeValue(r.types, oid, pgtype.TextFormatCode, data)
}
