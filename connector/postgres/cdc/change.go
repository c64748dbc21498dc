package cdc

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Op is what happened to a row, as Debezium names it.
type Op byte

// The operations of a Change.
const (
	// OpRead is a row of the initial snapshot.
	OpRead Op = 'r'
	// OpCreate is an INSERT.
	OpCreate Op = 'c'
	// OpUpdate is an UPDATE.
	OpUpdate Op = 'u'
	// OpDelete is a DELETE.
	OpDelete Op = 'd'
)

// String returns the operation's letter.
func (o Op) String() string { return string(o) }

// Change is one row change captured from PostgreSQL: a snapshot row, an
// insert, an update or a delete.
//
// Column values are decoded through pgx's type map (pgtype): int4 is an
// int32, text a string, numeric a pgtype.Numeric, timestamptz a
// time.Time, and so on; a type pgx does not know is its text form, a
// string. A NULL is nil. An unchanged TOASTed value of an update (a large
// value the update did not touch, which the server does not send) is
// missing from After.
type Change struct {
	// Op is the operation.
	Op Op
	// Schema and Table name the table.
	Schema, Table string
	// Before is the row before an update or delete: with the table's
	// default replica identity only its key columns, and for an update
	// only when the update changed the key (nil otherwise); with REPLICA
	// IDENTITY FULL the whole row. Nil for snapshot rows and inserts.
	Before map[string]any
	// After is the row after a snapshot read, insert or update; nil for a
	// delete.
	After map[string]any
	// Key names the table's primary key columns, in the key's order (the
	// replica identity's columns when the table has no primary key).
	Key []string
	// LSN is the position of the change in the WAL; for a snapshot row,
	// the snapshot's position (the slot's consistent point).
	LSN pglogrepl.LSN
	// CommitLSN is the position of the transaction's commit; for a
	// snapshot row the snapshot's position.
	CommitLSN pglogrepl.LSN
	// TxID is the transaction's id; 0 for a snapshot row.
	TxID uint32
	// CommitTime is when the transaction committed; for a snapshot row,
	// when the snapshot was taken.
	CommitTime time.Time
}

// QualifiedTable returns "schema.table".
func (c Change) QualifiedTable() string { return c.Schema + "." + c.Table }

// KeyValues returns the change's key columns and their values, from After,
// or from Before for a delete.
func (c Change) KeyValues() map[string]any {
	row := c.After
	if c.Op == OpDelete {
		row = c.Before
	}
	k := make(map[string]any, len(c.Key))
	for _, col := range c.Key {
		k[col] = row[col]
	}
	return k
}

// debeziumSource is the source block of a Debezium change event.
type debeziumSource struct {
	Connector string `json:"connector"`
	LSN       uint64 `json:"lsn"`
	TxID      uint32 `json:"txId"`
	TsMs      int64  `json:"ts_ms"`
	Snapshot  string `json:"snapshot"`
	Schema    string `json:"schema"`
	Table     string `json:"table"`
}

type debeziumPayload struct {
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Op     string         `json:"op"`
	Source debeziumSource `json:"source"`
	TsMs   int64          `json:"ts_ms"`
}

// MarshalDebezium encodes c as the payload of a Debezium change event:
//
//	{"payload":{"before":{...}|null,"after":{...}|null,"op":"c",
//	 "source":{"connector":"postgresql","lsn":N,"txId":N,"ts_ms":N,
//	 "snapshot":"false","schema":"public","table":"orders"},"ts_ms":N}}
//
// source.lsn is the change's LSN as a number, source.ts_ms and ts_ms the
// commit time in milliseconds. Unlike Debezium's, the outer ts_ms is the
// commit time too, not the time of processing: a change read again after
// a failover then encodes to the same bytes. Column values are encoded by
// encoding/json (a pgtype.Numeric as a number, a time as RFC 3339, bytes
// as base64). The event has no "schema" block (Debezium's
// schemas.enable=false).
func MarshalDebezium(c Change) ([]byte, error) {
	ts := c.CommitTime.UnixMilli()
	snapshot := "false"
	if c.Op == OpRead {
		snapshot = "true"
	}
	b, err := json.Marshal(struct {
		Payload debeziumPayload `json:"payload"`
	}{debeziumPayload{
		Before: c.Before, After: c.After, Op: c.Op.String(), TsMs: ts,
		Source: debeziumSource{
			Connector: "postgresql", LSN: uint64(c.LSN), TxID: c.TxID, TsMs: ts,
			Snapshot: snapshot, Schema: c.Schema, Table: c.Table,
		},
	}})
	if err != nil {
		return nil, fmt.Errorf("postgres cdc: encode change of %s at %v: %w", c.QualifiedTable(), c.LSN, err)
	}
	return b, nil
}

// MarshalKey encodes the change's primary key as a JSON object of its
// columns, {"id":42}: the Kafka key of the change, so that every change of
// a row goes to one partition, in order. A table without a key gives {}.
func MarshalKey(c Change) ([]byte, error) {
	b, err := json.Marshal(c.KeyValues())
	if err != nil {
		return nil, fmt.Errorf("postgres cdc: encode key of %s at %v: %w", c.QualifiedTable(), c.LSN, err)
	}
	return b, nil
}
