package cdc

import (
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/splitflow/splitflow/connector/base"
)

// Phase is where a split is in its life: a snapshot to take, a snapshot
// being read, or the stream.
type Phase uint8

const (
	// PhaseNew: no slot of the split's is known; the reader creates it,
	// with its snapshot.
	PhaseNew Phase = iota
	// PhaseSnapshot: the snapshot is being read. SnapshotRows rows of it
	// were emitted.
	PhaseSnapshot
	// PhaseStream: the snapshot is emitted; changes come from the slot.
	PhaseStream
)

// Split is the one split of a Source: the slot's ordered stream, and where
// in it reading resumes. It is its own state: the emitter moves it past
// every change, snapshot row and commit it emits.
type Split struct {
	// Slot is the replication slot the split reads.
	Slot string
	// Phase is where the split is; see the constants.
	Phase Phase
	// ConsistentLSN is the slot's consistent point, the position of the
	// snapshot, once the slot is made.
	ConsistentLSN pglogrepl.LSN
	// SnapshotRows is how many snapshot rows were emitted.
	SnapshotRows int64
	// SnapshotTable is the table the snapshot emitted its last row of, or
	// read to its end (SnapshotTableDone); zero before the first row.
	// SnapshotKey is the primary key of that row, each column as text,
	// nil for a table without a primary key; SnapshotTableRows is how
	// many rows of the table were emitted. They are where a snapshot
	// interrupted by a failure resumes.
	SnapshotTable     TableName `json:",omitzero"`
	SnapshotKey       []string  `json:",omitempty"`
	SnapshotTableRows int64     `json:",omitempty"`
	SnapshotTableDone bool      `json:",omitempty"`
	// Segments are the snapshot's reads: the first at ConsistentLSN from
	// the first table on, and one more for each resume after a failure,
	// in a snapshot of its own, from where the one before stopped. A
	// change is emitted only if it committed at or after the LSN of the
	// read that gave its row (see the package doc, "Resuming a
	// snapshot"). Dropped once the stream is past the last read's LSN.
	Segments []SnapshotSegment `json:",omitempty"`
	// FlushLSN is the resume point: every transaction committed before it
	// was emitted (or is in the snapshot). It is the position the slot is
	// confirmed at when a checkpoint holding this state completes, and the
	// one streaming restarts from.
	FlushLSN pglogrepl.LSN
	// TxLSN is the commit LSN of a transaction partly emitted, 0 when
	// none; TxEmitted is how many of its changes were emitted. A restore
	// skips them when the server sends that transaction again.
	TxLSN     pglogrepl.LSN
	TxEmitted int64
}

// TableName is a table's schema and name.
type TableName struct {
	Schema, Name string
}

// String is the table as schema.name.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// compare orders tables as the snapshot reads them: by schema, then
// name, byte by byte (the order of PostgreSQL's name type, whose
// collation is C).
func (t TableName) compare(u TableName) int {
	if c := strings.Compare(t.Schema, u.Schema); c != 0 {
		return c
	}
	return strings.Compare(t.Name, u.Name)
}

// SnapshotSegment is one read of a snapshot: the rows from its position
// on, read in a snapshot whose consistent point is LSN. Its position
// starts at Table (the zero TableName: the first table): with AfterTable,
// at the table after it; with AfterKey, at the first row of Table whose
// primary key is above AfterKey (text, in the key's column order);
// otherwise at Table's first row.
type SnapshotSegment struct {
	Table      TableName `json:",omitzero"`
	AfterKey   []string  `json:",omitempty"`
	AfterTable bool      `json:",omitempty"`
	LSN        pglogrepl.LSN
}

// holds reports whether the segment's position is at or before table
// (for Table itself, before the row whose key, as text, keyAbove
// compares with AfterKey).
func (g SnapshotSegment) holds(table TableName, keyAbove func(after []string) (bool, error)) (bool, error) {
	switch c := table.compare(g.Table); {
	case c > 0:
		return true, nil
	case c < 0, g.AfterTable:
		return false, nil
	case g.AfterKey == nil:
		return true, nil
	}
	return keyAbove(g.AfterKey)
}

// SplitID implements connector.Split: "postgres-cdc:<slot>".
func (s Split) SplitID() string { return "postgres-cdc:" + s.Slot }

// EnumeratorState is the source's enumerator checkpoint: the split, while
// no reader holds it.
type EnumeratorState = base.StaticEnumeratorState[Split]
