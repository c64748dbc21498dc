package cdc

import (
	"context"
	"errors"
	"fmt"
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
	// evRow: a snapshot row.
	evRow
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
}

// emit is the source's emit function, on the task goroutine: it emits
// the change, if any, and moves the split past the event.
func emit(e event, out connector.SourceOutput[Change], s *Split) error {
	switch e.kind {
	case evSnapshotStart:
		*s = Split{Slot: s.Slot, Phase: PhaseSnapshot, ConsistentLSN: e.lsn, FlushLSN: e.lsn}
	case evRow:
		out.CollectWithTimestamp(e.change, e.change.CommitTime.UnixMilli())
		s.SnapshotRows++
	case evSnapshotDone:
		s.Phase = PhaseStream
	case evChange:
		out.CollectWithTimestamp(e.change, e.change.CommitTime.UnixMilli())
		s.TxLSN, s.TxEmitted = e.lsn, e.index
	case evCommit:
		s.FlushLSN = max(s.FlushLSN, e.end)
		s.TxLSN, s.TxEmitted = 0, 0
	case evProgress:
		if s.TxLSN == 0 {
			s.FlushLSN = max(s.FlushLSN, e.end)
		}
	}
	return nil
}

// relation is what the reader knows of a table from the stream.
type relation struct {
	msg *pglogrepl.RelationMessage
	key []string
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
}

type tableRef struct {
	oid          uint32
	schema, name string
}

func (t tableRef) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

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
		err = r.start(b)
	case r.snap != nil:
		err = r.readSnapshot(b)
	default:
		err = r.receive(wctx, b)
	}
	if err != nil {
		r.closeConns()
		return nil, err
	}
	return b.recs, nil
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
	if s.Phase == PhaseSnapshot && s.SnapshotRows > 0 && !r.src.cfg.restartSnapshot {
		return fmt.Errorf("postgres cdc: slot %q: the job failed in the snapshot after %d rows of it were in a completed checkpoint, "+
			"and a snapshot cannot be resumed (its exported snapshot ended with the failed connection): "+
			"give the source WithSnapshotRestartAfterFailure(true) to take it again (its output then holds those rows twice), "+
			"or drop the slot (SELECT pg_drop_replication_slot('%s')) and start the job without its checkpoints: %w",
			s.Slot, s.SnapshotRows, s.Slot, connector.ErrInvalidConfiguration)
	}
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
	return r.startSnapshot(b)
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
	tx, err := r.sql.BeginTx(r.life, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return r.slotErr("begin the snapshot's transaction", err)
	}
	snap := &snapshotRead{tx: tx, at: at, time: time.Now()}
	r.snap = snap
	if _, err := tx.Exec(r.life, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'"); err != nil {
		return r.slotErr("import the slot's snapshot", err)
	}
	rows, err := tx.Query(r.life, `SELECT c.oid, n.nspname, c.relname
		FROM pg_publication_tables p
		JOIN pg_namespace n ON n.nspname = p.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
		WHERE p.pubname = $1 ORDER BY n.nspname, c.relname`, r.src.cfg.publication)
	if err != nil {
		return r.slotErr("list the publication's tables", err)
	}
	for rows.Next() {
		var t tableRef
		if err := rows.Scan(&t.oid, &t.schema, &t.name); err != nil {
			rows.Close()
			return r.slotErr("list the publication's tables", err)
		}
		snap.tables = append(snap.tables, t)
	}
	if err := rows.Err(); err != nil {
		return r.slotErr("list the publication's tables", err)
	}
	r.split.Phase, r.split.FlushLSN = PhaseSnapshot, at
	r.from = at
	b.add(event{kind: evSnapshotStart, lsn: at})
	return nil
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
				b.add(event{kind: evSnapshotDone})
				r.split.Phase = PhaseStream
				return r.startStream()
			}
			t := snap.tables[snap.next]
			key, err := primaryKey(r.life, snap.tx, t.oid)
			if err != nil {
				return fmt.Errorf("postgres cdc: snapshot of %s.%s: primary key: %w", t.schema, t.name, err)
			}
			rows, err := snap.tx.Query(r.life, "SELECT * FROM "+t.ident())
			if err != nil {
				return fmt.Errorf("postgres cdc: snapshot of %s.%s (the role needs SELECT on it): %w", t.schema, t.name, err)
			}
			snap.rows, snap.cur, snap.key, snap.cols = rows, t, key, nil
			for _, fd := range rows.FieldDescriptions() {
				snap.cols = append(snap.cols, fd.Name)
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
			continue
		}
		vals, err := snap.rows.Values()
		if err != nil {
			return fmt.Errorf("postgres cdc: snapshot of %s.%s: decode a row: %w", snap.cur.schema, snap.cur.name, err)
		}
		after := make(map[string]any, len(vals))
		for i, v := range vals {
			after[snap.cols[i]] = v
		}
		b.add(event{kind: evRow, change: Change{
			Op: OpRead, Schema: snap.cur.schema, Table: snap.cur.name, After: after, Key: snap.key,
			LSN: snap.at, CommitLSN: snap.at, CommitTime: snap.time,
		}})
	}
	return nil
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
