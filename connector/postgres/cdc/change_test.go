package cdc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/postgres/cdc"
)

// The Debezium-style event: payload with before, after, op, source (lsn,
// txId, ts_ms, snapshot, schema, table) and ts_ms, the commit time in
// both, so that a change read again encodes to the same bytes; the key
// is the primary key's columns, from before for a delete.
func TestDebeziumEventAndKey(t *testing.T) {
	commit := time.UnixMilli(1700000000123)
	for _, tc := range []struct {
		c          cdc.Change
		value, key string
	}{
		{
			c: cdc.Change{Op: cdc.OpUpdate, Schema: "public", Table: "orders", Key: []string{"id"},
				Before: map[string]any{"id": int64(2)}, After: map[string]any{"id": int64(20), "note": nil},
				LSN: 0x1000, CommitLSN: 0x1100, TxID: 77, CommitTime: commit},
			value: `{"payload":{"before":{"id":2},"after":{"id":20,"note":null},"op":"u","source":{"connector":"postgresql","lsn":4096,"txId":77,"ts_ms":1700000000123,"snapshot":"false","schema":"public","table":"orders"},"ts_ms":1700000000123}}`,
			key:   `{"id":20}`,
		},
		{
			c: cdc.Change{Op: cdc.OpDelete, Schema: "s", Table: "t", Key: []string{"a", "b"},
				Before: map[string]any{"a": "x", "b": int32(1)}, LSN: 5, CommitTime: commit},
			value: `{"payload":{"before":{"a":"x","b":1},"after":null,"op":"d","source":{"connector":"postgresql","lsn":5,"txId":0,"ts_ms":1700000000123,"snapshot":"false","schema":"s","table":"t"},"ts_ms":1700000000123}}`,
			key:   `{"a":"x","b":1}`,
		},
		{
			c: cdc.Change{Op: cdc.OpRead, Schema: "public", Table: "t", Key: []string{"id"},
				After: map[string]any{"id": int64(1)}, LSN: 9, CommitTime: commit},
			value: `{"payload":{"before":null,"after":{"id":1},"op":"r","source":{"connector":"postgresql","lsn":9,"txId":0,"ts_ms":1700000000123,"snapshot":"true","schema":"public","table":"t"},"ts_ms":1700000000123}}`,
			key:   `{"id":1}`,
		},
	} {
		v, err := cdc.MarshalDebezium(tc.c)
		if err != nil || string(v) != tc.value {
			t.Errorf("MarshalDebezium(%c) = %s, %v\nwant %s", tc.c.Op, v, err, tc.value)
		}
		k, err := cdc.MarshalKey(tc.c)
		if err != nil || string(k) != tc.key {
			t.Errorf("MarshalKey(%c) = %s, %v; want %s", tc.c.Op, k, err, tc.key)
		}
	}
}

// Options are checked when the source is made, each problem named.
func TestBadOptionsAreRefused(t *testing.T) {
	_, err := cdc.NewSource("postgres://u@h/db", cdc.WithSlot("Bad-Slot"), cdc.WithTables("a.b.c"), cdc.WithBatchSize(0), cdc.WithPublication(""))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`slot name "Bad-Slot"`, `table "a.b.c"`, "batch of 0", "publication name is empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
