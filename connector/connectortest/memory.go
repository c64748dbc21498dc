package connectortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mathrand "math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
)

// MemorySource is a bounded source over the check's records held in
// memory, to pair with a sink under test: a datagen source whose index i
// is the check's record i, in splits of 50 records, assigned to the
// readers up front; a split's state is the index of its next record.
func MemorySource[T any]() Source[T] {
	return NewSource(func(t *testing.T, input []T) connector.Source[T, datagen.Split, datagen.EnumeratorState] {
		src, err := datagen.NewSource(func(i int64, _ *mathrand.Rand) T { return input[i] },
			datagen.WithCount(int64(len(input))),
			datagen.WithSplits(max(1, (len(input)+memSplitRecords-1)/memSplitRecords)),
			datagen.WithBatchSize(16))
		if err != nil {
			t.Fatal(err)
		}
		return src
	})
}

// MemorySink is an exactly-once two-phase sink into memory, to pair with a
// source under test: each writer collects a checkpoint's records into a
// transaction, which the committer applies to the store once; applying it
// again is a no-op. A record that Pair.ID cannot read is kept as it is and
// reported by the check as not an id.
func MemorySink[T any]() Sink[T] {
	return Sink[T]{guarantee: ExactlyOnce, twoPhase: true, build: func(_ *testing.T, c codec[T]) sinkUnderTest[T] {
		st := &memStore{done: map[string]bool{}}
		read := func() ([]T, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			out := make([]T, 0, len(st.ids)+len(st.committedForeign))
			for _, id := range st.ids {
				out = append(out, c.record(id))
			}
			for _, k := range st.committedForeign {
				out = append(out, st.foreign[k].(T))
			}
			return out, nil
		}
		return &twoPhaseSinkOf[T, memTxn]{sink: &memSink[T]{store: st, codec: c}, read: read}
	}}
}

// memSplitRecords is the number of records in a split of MemorySource.
const memSplitRecords = 50

// memTxn is a prepared transaction of the memory sink.
type memTxn struct {
	Key string
	IDs []int64
	// Foreign indexes the store's records that are not ids: they cannot
	// travel in a checkpoint as ids, and the store lives as long as the
	// check.
	Foreign []int `json:",omitempty"`
}

type memTxnSerializer struct{}

func (memTxnSerializer) Version() int                       { return 1 }
func (memTxnSerializer) Serialize(t memTxn) ([]byte, error) { return json.Marshal(t) }
func (memTxnSerializer) Deserialize(version int, data []byte) (memTxn, error) {
	var t memTxn
	if version != 1 {
		return t, fmt.Errorf("memory sink transaction version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	return t, json.Unmarshal(data, &t)
}

// memStore is the memory sink's external system.
type memStore struct {
	mu   sync.Mutex
	done map[string]bool
	ids  []int64
	// foreign holds every record written that is not an id;
	// committedForeign indexes those committed.
	foreign          []any
	committedForeign []int
}

func (s *memStore) apply(t memTxn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done[t.Key] {
		return false
	}
	s.done[t.Key] = true
	s.ids = append(s.ids, t.IDs...)
	s.committedForeign = append(s.committedForeign, t.Foreign...)
	return true
}

// keepForeign stores a record that is not an id and returns its index.
func (s *memStore) keepForeign(v any) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.foreign = append(s.foreign, v)
	return len(s.foreign) - 1
}

type memSink[T any] struct {
	store *memStore
	codec codec[T]
}

func (s *memSink[T]) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[T], error) {
	var tok [6]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	return &memWriter[T]{sink: s, prefix: fmt.Sprintf("%d-%s-", ctx.SubtaskIndex(), hex.EncodeToString(tok[:]))}, nil
}

func (s *memSink[T]) CreateCommitter(connector.SinkInitContext) (connector.Committer[memTxn], error) {
	return &memCommitter{store: s.store}, nil
}

func (s *memSink[T]) CommittableSerializer() connector.VersionedSerializer[memTxn] {
	return memTxnSerializer{}
}

func (s *memSink[T]) CommitterRequired() bool { return true }

type memWriter[T any] struct {
	sink        *memSink[T]
	prefix      string
	open        []int64
	openForeign []int
}

// Write keeps a record that is not an id rather than failing the job: the
// check's comparison reports it, with the ids lost or duplicated.
func (w *memWriter[T]) Write(v T, _ connector.WriteContext) error {
	id, err := w.sink.codec.id(v)
	if err != nil {
		w.openForeign = append(w.openForeign, w.sink.store.keepForeign(v))
		return nil
	}
	w.open = append(w.open, id)
	return nil
}
func (w *memWriter[T]) Flush(bool) error { return nil }
func (w *memWriter[T]) PrepareCommit(id int64) ([]memTxn, error) {
	if len(w.open) == 0 && len(w.openForeign) == 0 {
		return nil, nil
	}
	t := memTxn{Key: w.prefix + strconv.FormatInt(id, 10), IDs: w.open, Foreign: w.openForeign}
	w.open, w.openForeign = nil, nil
	return []memTxn{t}, nil
}
func (w *memWriter[T]) Close() error { return nil }

type memCommitter struct{ store *memStore }

func (c *memCommitter) Commit(_ context.Context, reqs []connector.CommitRequest[memTxn]) error {
	for _, r := range reqs {
		if !c.store.apply(r.Committable()) {
			r.SignalAlreadyCommitted()
		}
	}
	return nil
}
func (c *memCommitter) Close() error { return nil }
