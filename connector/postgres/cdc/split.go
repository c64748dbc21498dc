package cdc

import (
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

// SplitID implements connector.Split: "postgres-cdc:<slot>".
func (s Split) SplitID() string { return "postgres-cdc:" + s.Slot }

// EnumeratorState is the source's enumerator checkpoint: the split, while
// no reader holds it.
type EnumeratorState = base.StaticEnumeratorState[Split]
