package postgres

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/splitflow/splitflow/connector"
)

// Committable is the rows one writer subtask wrote between two
// checkpoint barriers, with everything its commit needs: the target, the
// columns and their types as the rows were encoded, and the progress key.
// It carries the rows themselves, so that a commit can be redone after
// the process that prepared it died (see the package doc).
type Committable struct {
	// Job, Sink and Subtask are the progress key: the writer that
	// prepared the rows, not the committer that commits them (after a
	// rescale another subtask may).
	Job     string
	Sink    string
	Subtask int
	// Checkpoint is the checkpoint the rows belong to.
	Checkpoint int64
	// Schema and Table name the target table.
	Schema, Table string
	// Columns are the target columns, OIDs their types as the rows were
	// encoded.
	Columns []string
	OIDs    []uint32
	// Keys are the upsert key columns; empty in insert mode.
	Keys []string
	// Count is the number of rows.
	Count int
	// Rows are the rows, each a tuple of PostgreSQL's binary COPY format
	// (a 16-bit field count, then each field as a 32-bit length, -1 for
	// NULL, and its binary encoding).
	Rows []byte
}

// String describes the committable without its rows, for errors and logs.
func (c Committable) String() string {
	mode := "insert"
	if len(c.Keys) > 0 {
		mode = "upsert by " + strings.Join(c.Keys, ", ")
	}
	return fmt.Sprintf("%d rows of checkpoint %d for %s.%s (%s; job %q, sink %q, subtask %d)",
		c.Count, c.Checkpoint, c.Schema, c.Table, mode, c.Job, c.Sink, c.Subtask)
}

func (c Committable) table() qualifiedName { return qualifiedName{schema: c.Schema, name: c.Table} }

// copyHeader and copyTrailer frame the rows of a binary COPY.
var (
	copyHeader  = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	copyTrailer = []byte{0xff, 0xff}
)

// commitBatchRows is how many upsert statements go to the server in one
// pipeline.
const commitBatchRows = 1000

// committer writes committables into the table, each in one transaction
// with its progress row. It has no state of its own: every committable
// names its target and key.
type committer struct {
	pool     func(context.Context) (*pgxpool.Pool, error)
	release  func()
	progress qualifiedName
	// claim is the epoch of the process's claim on the committer's slot
	// (connector.ClaimInfo), 0 outside a distributed job.
	claim int64
	// incarnation is the run of the job that numbers claim
	// (connector.ClaimIncarnation).
	incarnation string
	closed      bool
}

// Commit implements connector.Committer. Committables are committed in
// the order of their key and checkpoint, each in its own transaction:
// the progress row of a key must never move past a checkpoint whose rows
// are not committed. So the first failure ends the call with an error,
// and the engine commits every committable again after the restart (the
// ones committed here find their checkpoint recorded).
func (c *committer) Commit(ctx context.Context, reqs []connector.CommitRequest[Committable]) error {
	reqs = slices.Clone(reqs)
	slices.SortStableFunc(reqs, func(a, b connector.CommitRequest[Committable]) int {
		x, y := a.Committable(), b.Committable()
		return cmp.Or(strings.Compare(x.Job, y.Job), strings.Compare(x.Sink, y.Sink),
			cmp.Compare(x.Subtask, y.Subtask), cmp.Compare(x.Checkpoint, y.Checkpoint))
	})
	pool, err := c.pool(ctx)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		already, err := commitOne(ctx, pool, c.progress, c.claim, c.incarnation, r.Committable())
		if err != nil {
			return err
		}
		if already {
			r.SignalAlreadyCommitted()
		}
	}
	return nil
}

// commitOne writes the rows of cm and records its checkpoint and claim in
// one transaction, unless the progress row says its checkpoint is
// committed already (already true) or records a claim of incarnation
// newer than claim (ErrStaleClaim).
func commitOne(ctx context.Context, pool *pgxpool.Pool, progress qualifiedName, claim int64, incarnation string, cm Committable) (already bool, err error) {
	where := describeServer(pool.Config().ConnConfig.Config)
	defer func() {
		if err != nil {
			err = fmt.Errorf("postgres sink: commit %v on %s: %w", cm, where, err)
		}
	}()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		// A rollback after a cancel still needs the connection: the
		// pool would otherwise get it back inside a transaction.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // nothing to roll back after Commit
	}()
	// Lock the key's progress row, made if missing, so that two commits
	// of one key queue: the engine never runs two at once, but a process
	// paused past its slot's takeover may commit beside the slot's new
	// owner, and whichever comes second reads the other's claim.
	var done, owner int64
	var ownerRun string
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+progress.sql()+" (job, sink, subtask, checkpoint_id, claim_epoch, claim_incarnation) VALUES ($1, $2, $3, 0, $4, $5) ON CONFLICT (job, sink, subtask) DO NOTHING",
		cm.Job, cm.Sink, cm.Subtask, claim, incarnation)
	b.Queue("SELECT checkpoint_id, claim_epoch, claim_incarnation FROM "+progress.sql()+" WHERE job = $1 AND sink = $2 AND subtask = $3 FOR UPDATE",
		cm.Job, cm.Sink, cm.Subtask).QueryRow(func(row pgx.Row) error { return row.Scan(&done, &owner, &ownerRun) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, fmt.Errorf("read progress in %s: %w", progress, err)
	}
	if claim > 0 && owner > claim && ownerRun == incarnation {
		// Refused before the checkpoint is looked at: a stale owner's
		// checkpoint may carry the id of one the new owner wrote with
		// other rows, or an id the new owner has not reached yet. A
		// claim of another incarnation (an earlier run of the job under
		// another checkpoint root) numbers from another start and is
		// not compared.
		return false, staleClaim(progress, progressKey{job: cm.Job, sink: cm.Sink, subtask: cm.Subtask, claim: claim, incarnation: incarnation}, owner)
	}
	if done >= cm.Checkpoint {
		return true, nil
	}
	if len(cm.Keys) == 0 {
		err = copyRows(ctx, tx.Conn().PgConn(), cm)
	} else {
		err = upsertRows(ctx, tx.Conn().PgConn(), cm)
	}
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "UPDATE "+progress.sql()+" SET checkpoint_id = $4, claim_epoch = $5, claim_incarnation = $6, committed_at = now() WHERE job = $1 AND sink = $2 AND subtask = $3",
		cm.Job, cm.Sink, cm.Subtask, cm.Checkpoint, claim, incarnation); err != nil {
		return false, fmt.Errorf("record progress in %s: %w", progress, err)
	}
	// If the connection breaks during COMMIT the outcome is unknown: the
	// error fails the task, and the commit after the restart reads the
	// progress row to learn it.
	return false, tx.Commit(ctx)
}

func columnList(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// copyRows appends the rows with one binary COPY.
func copyRows(ctx context.Context, pc *pgconn.PgConn, cm Committable) error {
	sql := "COPY " + cm.table().sql() + " (" + columnList(cm.Columns) + ") FROM STDIN (FORMAT binary)"
	r := io.MultiReader(bytes.NewReader(copyHeader), bytes.NewReader(cm.Rows), bytes.NewReader(copyTrailer))
	tag, err := pc.CopyFrom(ctx, r, sql)
	if err != nil {
		return fmt.Errorf("copy into %s: %w", cm.table(), err)
	}
	if n := tag.RowsAffected(); n != int64(cm.Count) {
		return fmt.Errorf("copy into %s wrote %d rows, the committable holds %d", cm.table(), n, cm.Count)
	}
	return nil
}

// upsertSQL is the statement of one upserted row.
func upsertSQL(cm Committable) string {
	ph := make([]string, len(cm.Columns))
	var set []string
	for i, c := range cm.Columns {
		ph[i] = fmt.Sprintf("$%d", i+1)
		if !slices.Contains(cm.Keys, c) {
			id := pgx.Identifier{c}.Sanitize()
			set = append(set, id+" = EXCLUDED."+id)
		}
	}
	sql := "INSERT INTO " + cm.table().sql() + " (" + columnList(cm.Columns) + ") VALUES (" + strings.Join(ph, ", ") +
		") ON CONFLICT (" + columnList(cm.Keys) + ") DO "
	if len(set) == 0 {
		return sql + "NOTHING"
	}
	return sql + "UPDATE SET " + strings.Join(set, ", ")
}

// upsertRows runs one INSERT ... ON CONFLICT per row, prepared once with
// the types the rows were encoded in and pipelined, the rows' binary
// fields passed as they are.
func upsertRows(ctx context.Context, pc *pgconn.PgConn, cm Committable) error {
	if _, err := pc.Prepare(ctx, "", upsertSQL(cm), cm.OIDs); err != nil {
		return fmt.Errorf("prepare the upsert into %s: %w", cm.table(), err)
	}
	formats := make([]int16, len(cm.Columns))
	for i := range formats {
		formats[i] = pgtype.BinaryFormatCode
	}
	rows := tuples(cm.Rows)
	for len(rows) > 0 {
		n := min(len(rows), commitBatchRows)
		b := &pgconn.Batch{}
		for _, t := range rows[:n] {
			b.ExecPrepared("", splitTuple(t), formats, nil)
		}
		if _, err := pc.ExecBatch(ctx, b).ReadAll(); err != nil {
			return fmt.Errorf("upsert into %s: %w", cm.table(), err)
		}
		rows = rows[n:]
	}
	return nil
}

// tuples splits well-formed rows (checked when the committable was
// decoded, or made by the writer) into one slice per row.
func tuples(rows []byte) [][]byte {
	var out [][]byte
	for len(rows) > 0 {
		n, _ := tupleLen(rows)
		out = append(out, rows[:n])
		rows = rows[n:]
	}
	return out
}

// tupleLen returns the length of the tuple at the start of b and its
// number of fields, or an error when b does not start with one.
func tupleLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, errCorrupt
	}
	n := int(binary.BigEndian.Uint16(b))
	p := 2
	for range n {
		if len(b)-p < 4 {
			return 0, errCorrupt
		}
		l := int32(binary.BigEndian.Uint32(b[p:]))
		p += 4
		if l < 0 {
			continue
		}
		if len(b)-p < int(l) {
			return 0, errCorrupt
		}
		p += int(l)
	}
	return p, nil
}

// Close implements connector.Committer.
func (c *committer) Close() error {
	if !c.closed {
		c.closed = true
		c.release()
	}
	return nil
}

var errCorrupt = errors.New("corrupt committable")

// committableVersion is the version CommittableSerializer writes.
//
// Version 1: Job, Sink as uvarint-length-prefixed strings; Subtask and
// Checkpoint as varints; Schema, Table as strings; the column count, then
// each column's name and type OID (uvarint); the key count and keys; Count
// (uvarint); Rows, length-prefixed.
const committableVersion = 1

// CommittableSerializer encodes Committables for checkpoints. It is
// stateless and safe for concurrent use.
type CommittableSerializer struct{}

// Version implements connector.VersionedSerializer.
func (CommittableSerializer) Version() int { return committableVersion }

// Serialize implements connector.VersionedSerializer.
func (CommittableSerializer) Serialize(c Committable) ([]byte, error) {
	if len(c.OIDs) != len(c.Columns) {
		return nil, fmt.Errorf("postgres sink: committable with %d columns and %d type OIDs", len(c.Columns), len(c.OIDs))
	}
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := make([]byte, 0, 64+len(c.Rows))
	b = str(b, c.Job)
	b = str(b, c.Sink)
	b = binary.AppendVarint(b, int64(c.Subtask))
	b = binary.AppendVarint(b, c.Checkpoint)
	b = str(b, c.Schema)
	b = str(b, c.Table)
	b = binary.AppendUvarint(b, uint64(len(c.Columns)))
	for i, col := range c.Columns {
		b = str(b, col)
		b = binary.AppendUvarint(b, uint64(c.OIDs[i]))
	}
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	for _, k := range c.Keys {
		b = str(b, k)
	}
	b = binary.AppendUvarint(b, uint64(c.Count))
	b = binary.AppendUvarint(b, uint64(len(c.Rows)))
	return append(b, c.Rows...), nil
}

// Deserialize implements connector.VersionedSerializer. It checks that
// the rows are Count well-formed tuples of the committable's columns.
func (CommittableSerializer) Deserialize(version int, data []byte) (Committable, error) {
	if version != committableVersion {
		return Committable{}, fmt.Errorf("postgres sink: committable serializer version %d (this build reads %d): %w",
			version, committableVersion, connector.ErrUnsupportedVersion)
	}
	d := decoder{buf: data}
	c := Committable{Job: d.str(), Sink: d.str(), Subtask: int(d.varint()), Checkpoint: d.varint(), Schema: d.str(), Table: d.str()}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		c.Columns = append(c.Columns, d.str())
		c.OIDs = append(c.OIDs, uint32(d.uvarint()))
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		c.Keys = append(c.Keys, d.str())
	}
	c.Count = int(d.uvarint())
	if rows := d.bytes(); d.err == nil {
		c.Rows = bytes.Clone(rows)
	}
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.buf), errCorrupt)
	}
	if d.err == nil {
		d.err = checkRows(c)
	}
	if d.err != nil {
		return Committable{}, fmt.Errorf("postgres sink: decode committable: %w", d.err)
	}
	return c, nil
}

// checkRows checks that Rows holds Count tuples of len(Columns) fields.
func checkRows(c Committable) error {
	rows, n := c.Rows, 0
	for len(rows) > 0 {
		l, err := tupleLen(rows)
		if err != nil {
			return fmt.Errorf("row %d: %w", n, err)
		}
		if f := int(binary.BigEndian.Uint16(rows)); f != len(c.Columns) {
			return fmt.Errorf("row %d has %d fields for %d columns: %w", n, f, len(c.Columns), errCorrupt)
		}
		rows, n = rows[l:], n+1
	}
	if n != c.Count || len(c.Columns) == 0 || c.Table == "" {
		return fmt.Errorf("%d rows, %d recorded, %d columns, table %q: %w", n, c.Count, len(c.Columns), c.Table, errCorrupt)
	}
	return nil
}

// decoder reads the serializer's encoding; the first error sticks.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a count of items that each take at least one byte.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.err = errCorrupt
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	b := d.buf[:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// ErrStaleClaim is wrapped by the error of a commit, or a writer start,
// under a claim of a distributed job's slot older than the one the key's
// progress row records: the slot moved to a newer owner, and this
// process, paused past the takeover, must write nothing more.
var ErrStaleClaim = errors.New("the slot moved to a newer owner")
