package postgres

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/splitflow/splitflow/connector"
)

// progressKey names one writer's line of the progress table.
type progressKey struct {
	job     string
	sink    string
	subtask int
	// claim is the epoch of the process's claim on the subtask's slot
	// (connector.ClaimInfo), 0 outside a distributed job. It is not part
	// of the key: the row keeps the latest claim that wrote it.
	claim int64
	// incarnation is the run of the job that numbers claim
	// (connector.ClaimIncarnation): claims are compared only within one.
	incarnation string
}

// writer encodes one subtask's rows in PostgreSQL's binary COPY tuple
// format as they come and hands them over at each barrier. It never
// talks to the server after it started. Every method runs on the task
// goroutine.
type writer[T any] struct {
	sink  *Sink[T]
	key   progressKey
	table tableInfo
	types *pgtype.Map
	row   []any
	keys  []int // indexes of the key columns in row; nil in insert mode

	// buf holds the encoded rows since the last barrier, each at
	// spans[i]; in upsert mode a later row of a key replaces the span of
	// the earlier one (byKey), whose bytes stay in buf until the barrier.
	buf   []byte
	spans []span
	byKey map[string]int
	live  int64 // bytes of the rows in spans
	keyb  []byte
}

type span struct{ start, end int }

var _ connector.CommittingSinkWriter[string, Committable] = (*writer[string])(nil)

func newWriter[T any](s *Sink[T], key progressKey, tbl tableInfo) (*writer[T], error) {
	// Each writer has a type map of its own: pgtype.Map caches plans and
	// is not safe for concurrent use. Types the map does not know (enums,
	// domains, composites) were loaded from the server by describeTable.
	w := &writer[T]{sink: s, key: key, table: tbl, types: pgtype.NewMap(), row: make([]any, len(tbl.cols))}
	if s.cfg.upsertKeys != nil {
		w.byKey = map[string]int{}
		for _, k := range s.cfg.upsertKeys {
			for i, c := range tbl.cols {
				if c.name == k {
					w.keys = append(w.keys, i)
				}
			}
		}
	}
	w.types.RegisterTypes(tbl.extraTypes)
	for _, c := range tbl.cols {
		if _, ok := w.types.TypeForOID(c.oid); !ok {
			return nil, fmt.Errorf("postgres sink: column %q of %s has type %s (OID %d), which the sink cannot encode: %w",
				c.name, tbl.name, c.typ, c.oid, connector.ErrInvalidConfiguration)
		}
	}
	return w, nil
}

// Write implements connector.SinkWriter: the record becomes one encoded
// row, held until the next barrier.
func (w *writer[T]) Write(record T, _ connector.WriteContext) error {
	clear(w.row)
	if err := w.sink.row(record, w.row); err != nil {
		return fmt.Errorf("postgres sink: row of record for %s: %w", w.table.name, err)
	}
	start := len(w.buf)
	w.buf = binary.BigEndian.AppendUint16(w.buf, uint16(len(w.row)))
	for i, v := range w.row {
		c := w.table.cols[i]
		at := len(w.buf)
		w.buf = append(w.buf, 0, 0, 0, 0)
		enc, err := w.types.Encode(c.oid, pgtype.BinaryFormatCode, v, w.buf)
		if err != nil {
			w.buf = w.buf[:start]
			return fmt.Errorf("postgres sink: column %q (%s) of %s: %w", c.name, c.typ, w.table.name, err)
		}
		if enc == nil { // NULL
			if c.notNull {
				w.buf = w.buf[:start]
				return fmt.Errorf("postgres sink: column %q of %s is NOT NULL and the row gives it NULL (%T): %w", c.name, w.table.name, v, connector.ErrInvalidConfiguration)
			}
			binary.BigEndian.PutUint32(w.buf[at:], 0xFFFFFFFF) // length -1
			continue
		}
		w.buf = enc
		binary.BigEndian.PutUint32(w.buf[at:], uint32(len(w.buf)-at-4))
	}
	sp := span{start, len(w.buf)}
	size := int64(sp.end - sp.start)
	if k, ok := w.keyOf(sp); ok {
		if i, ok := w.byKey[k]; ok {
			// The last row of a key wins, as the statements would
			// have it one after the other.
			w.live -= int64(w.spans[i].end - w.spans[i].start)
			w.spans[i] = sp
			w.live += size
			return w.checkSize()
		}
		w.byKey[k] = len(w.spans)
	}
	w.spans = append(w.spans, sp)
	w.live += size
	return w.checkSize()
}

// keyOf returns the encoded key columns of the row at sp, and false in
// insert mode or when a key column is NULL: a unique index never finds
// two NULLs equal, so such rows are all written.
func (w *writer[T]) keyOf(sp span) (string, bool) {
	if w.byKey == nil {
		return "", false
	}
	w.keyb = w.keyb[:0]
	fields := splitTuple(w.buf[sp.start:sp.end])
	for _, i := range w.keys {
		f := fields[i]
		if f == nil {
			return "", false
		}
		w.keyb = binary.BigEndian.AppendUint32(w.keyb, uint32(len(f)))
		w.keyb = append(w.keyb, f...)
	}
	return string(w.keyb), true
}

func (w *writer[T]) checkSize() error {
	if w.live <= w.sink.cfg.maxBytes {
		return nil
	}
	return fmt.Errorf("postgres sink: subtask %d holds %d bytes of rows for %s since the last checkpoint, over the limit of %d (postgres.WithMaxCheckpointBytes): "+
		"the rows of a checkpoint wait in memory and in the checkpoint until it completes; checkpoint more often (runtime.WithCheckpointInterval) or raise the limit",
		w.key.subtask, w.live, w.table.name, w.sink.cfg.maxBytes)
}

// Flush implements connector.SinkWriter: nothing to do, rows are written
// by the committer.
func (w *writer[T]) Flush(bool) error { return nil }

// PrepareCommit implements connector.CommittingSinkWriter: the rows since
// the last barrier become one committable of checkpointID, none when
// there are none.
func (w *writer[T]) PrepareCommit(checkpointID int64) ([]Committable, error) {
	if len(w.spans) == 0 {
		return nil, nil
	}
	rows := w.buf
	if w.live != int64(len(w.buf)) { // rows replaced by later ones of their key
		rows = make([]byte, 0, w.live)
		for _, sp := range w.spans {
			rows = append(rows, w.buf[sp.start:sp.end]...)
		}
	}
	c := Committable{
		Job: w.key.job, Sink: w.key.sink, Subtask: w.key.subtask, Checkpoint: checkpointID,
		Schema: w.table.name.schema, Table: w.table.name.name,
		Keys: w.sink.cfg.upsertKeys, Count: len(w.spans), Rows: rows,
	}
	for _, col := range w.table.cols {
		c.Columns = append(c.Columns, col.name)
		c.OIDs = append(c.OIDs, col.oid)
	}
	// The committable keeps rows: the next rows go into a new buffer.
	w.buf, w.spans, w.live = nil, nil, 0
	if w.byKey != nil {
		clear(w.byKey)
	}
	return []Committable{c}, nil
}

// Close implements connector.SinkWriter: rows not prepared belong to no
// checkpoint and are dropped; the restored source reads them again.
func (w *writer[T]) Close() error {
	w.buf, w.spans = nil, nil
	w.sink.releasePool()
	return nil
}

// splitTuple returns the fields of one encoded row, nil for NULL. The
// row is one the sink encoded, so it is well formed.
func splitTuple(t []byte) [][]byte {
	n := int(binary.BigEndian.Uint16(t))
	fields := make([][]byte, n)
	p := 2
	for i := range n {
		l := int32(binary.BigEndian.Uint32(t[p:]))
		p += 4
		if l < 0 {
			continue
		}
		fields[i] = t[p : p+int(l)]
		p += int(l)
	}
	return fields
}
