package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/splitflow/splitflow/connector"
)

// txn is a committable: a prepared transaction of one subtask for one
// checkpoint, carrying its records.
type txn struct {
	ID      string
	Records []int64
}

type txnSerializer struct{}

func (txnSerializer) Version() int                    { return 1 }
func (txnSerializer) Serialize(t txn) ([]byte, error) { return json.Marshal(t) }
func (txnSerializer) Deserialize(version int, data []byte) (txn, error) {
	var t txn
	if version != 1 {
		return t, fmt.Errorf("txn version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	return t, json.Unmarshal(data, &t)
}

// store is the external system: records become visible only when their
// transaction commits, and committing a transaction twice changes nothing
// (idempotent, as a Kafka EndTxn repeated).
type store struct {
	mu        sync.Mutex
	committed map[string]bool
	records   []int64
}

func (s *store) commit(t txn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[t.ID] {
		return false
	}
	s.committed[t.ID] = true
	s.records = append(s.records, t.Records...)
	return true
}

func (s *store) all() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.records...)
}

// txnSink writes into a transaction per checkpoint per subtask, committed
// once the checkpoint completes.
type txnSink struct {
	store *store
	log   func(format string, args ...any)
}

func (s *txnSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return &txnWriter{subtask: ctx.SubtaskIndex()}, nil
}

func (s *txnSink) CreateCommitter(ctx connector.SinkInitContext) (connector.Committer[txn], error) {
	return &txnCommitter{sink: s, subtask: ctx.SubtaskIndex()}, nil
}

func (s *txnSink) CommittableSerializer() connector.VersionedSerializer[txn] { return txnSerializer{} }

// TwoPhase makes the sink connector.TwoPhaseCapable, so that runtime.SinkTo
// runs it with its committer. A sink with a guarantee option would return
// false when configured for one that needs no committer.
func (s *txnSink) TwoPhase() (connector.HiddenTwoPhaseSink[int64], bool) {
	return connector.HideCommittable[int64, txn](s), true
}

type txnWriter struct {
	subtask int
	open    []int64
}

func (w *txnWriter) Write(v int64, _ connector.WriteContext) error {
	w.open = append(w.open, v)
	return nil
}

func (w *txnWriter) Flush(bool) error { return nil }

func (w *txnWriter) PrepareCommit(id int64) ([]txn, error) {
	if len(w.open) == 0 {
		return nil, nil
	}
	t := txn{ID: fmt.Sprintf("s%d-chk%d", w.subtask, id), Records: w.open}
	w.open = nil
	return []txn{t}, nil
}

func (w *txnWriter) Close() error { return nil }

type txnCommitter struct {
	sink    *txnSink
	subtask int
}

func (c *txnCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[txn]) error {
	for _, r := range reqs {
		t := r.Committable()
		if c.sink.store.commit(t) {
			c.sink.log("SINK subtask %d commit %s (%d records)", c.subtask, t.ID, len(t.Records))
		} else {
			c.sink.log("SINK subtask %d commit %s again: already committed", c.subtask, t.ID)
		}
	}
	return nil
}

func (c *txnCommitter) Close() error { return nil }
