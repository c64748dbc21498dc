package connectortest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// MemorySource is a bounded source over the check's records held in
// memory, to pair with a sink under test. Its splits are ranges of 50
// records handed out on request (pull mode); a split's state is the
// position of its next record.
func MemorySource[T any]() Source[T] {
	return NewSource(func(_ *testing.T, input []T) connector.Source[T, memSplit, []memSplit] {
		return &memSource[T]{records: input}
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

const memSplitRecords = 50

// memSplit is the records [Next, End) of the source; K names it.
type memSplit struct {
	K         int
	Next, End int
	id        string
}

func newMemSplit(k, next, end int) memSplit {
	return memSplit{K: k, Next: next, End: end, id: "records-" + strconv.Itoa(k)}
}

func (s memSplit) SplitID() string { return s.id }

type memSplitSerializer struct{}

func (memSplitSerializer) Version() int { return 1 }
func (memSplitSerializer) Serialize(s memSplit) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(s.K))
	b = binary.AppendUvarint(b, uint64(s.Next))
	return binary.AppendUvarint(b, uint64(s.End)), nil
}
func (memSplitSerializer) Deserialize(version int, data []byte) (memSplit, error) {
	if version != 1 {
		return memSplit{}, fmt.Errorf("memory source split version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	var v [3]uint64
	for i := range v {
		x, n := binary.Uvarint(data)
		if n <= 0 {
			return memSplit{}, fmt.Errorf("memory source split: corrupt data %x", data)
		}
		v[i], data = x, data[n:]
	}
	return newMemSplit(int(v[0]), int(v[1]), int(v[2])), nil
}

type memEnumStateSerializer struct{}

func (memEnumStateSerializer) Version() int { return 1 }
func (memEnumStateSerializer) Serialize(ss []memSplit) ([]byte, error) {
	var b []byte
	for _, s := range ss {
		e, _ := memSplitSerializer{}.Serialize(s)
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b, nil
}
func (memEnumStateSerializer) Deserialize(version int, data []byte) ([]memSplit, error) {
	var out []memSplit
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return nil, fmt.Errorf("memory source enumerator state: corrupt data")
		}
		s, err := memSplitSerializer{}.Deserialize(version, data[k:k+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		data = data[k+int(n):]
	}
	return out, nil
}

type memSource[T any] struct {
	records []T
}

func (s *memSource[T]) Boundedness() connector.Boundedness { return connector.Bounded }

func (s *memSource[T]) CreateEnumerator(ctx connector.SplitEnumeratorContext[memSplit]) (connector.SplitEnumerator[memSplit, []memSplit], error) {
	var pending []memSplit
	for k := 0; k*memSplitRecords < len(s.records); k++ {
		pending = append(pending, newMemSplit(k, k*memSplitRecords, min((k+1)*memSplitRecords, len(s.records))))
	}
	return &memEnumerator{ctx: ctx, pending: pending}, nil
}

func (s *memSource[T]) RestoreEnumerator(ctx connector.SplitEnumeratorContext[memSplit], pending []memSplit) (connector.SplitEnumerator[memSplit, []memSplit], error) {
	return &memEnumerator{ctx: ctx, pending: pending}, nil
}

func (s *memSource[T]) CreateReader(ctx connector.SourceReaderContext) (connector.SourceReader[T, memSplit], error) {
	return &memReader[T]{records: s.records, ctx: ctx, avail: make(chan struct{}, 1)}, nil
}

func (s *memSource[T]) SplitSerializer() connector.VersionedSerializer[memSplit] {
	return memSplitSerializer{}
}

func (s *memSource[T]) EnumeratorStateSerializer() connector.VersionedSerializer[[]memSplit] {
	return memEnumStateSerializer{}
}

// memEnumerator hands out one split per request.
type memEnumerator struct {
	ctx     connector.SplitEnumeratorContext[memSplit]
	pending []memSplit
}

func (e *memEnumerator) Start() error { return nil }
func (e *memEnumerator) HandleSplitRequest(subtask int) error {
	if len(e.pending) == 0 {
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	s := e.pending[0]
	e.pending = e.pending[1:]
	return e.ctx.AssignSplit(s, subtask)
}
func (e *memEnumerator) AddSplitsBack(splits []memSplit, _ int) error {
	e.pending = append(splits, e.pending...)
	return nil
}
func (e *memEnumerator) AddReader(int) error { return nil }
func (e *memEnumerator) SnapshotState(int64) ([]memSplit, error) {
	return append([]memSplit(nil), e.pending...), nil
}
func (e *memEnumerator) NotifyCheckpointComplete(int64) error               { return nil }
func (e *memEnumerator) HandleSourceEvent(int, connector.SourceEvent) error { return nil }
func (e *memEnumerator) Close() error                                       { return nil }

// memReader emits up to 16 records per poll from its first split, and
// asks for a split whenever it has none.
type memReader[T any] struct {
	records []T
	ctx     connector.SourceReaderContext
	splits  []memSplit
	noMore  bool
	asked   bool
	avail   chan struct{}
}

func (r *memReader[T]) signal() {
	select {
	case r.avail <- struct{}{}:
	default:
	}
}

func (r *memReader[T]) ask() {
	if !r.asked && !r.noMore {
		r.asked = true
		r.ctx.SendSplitRequest()
	}
}

func (r *memReader[T]) Start() error {
	if len(r.splits) == 0 {
		r.ask()
	}
	return nil
}

func (r *memReader[T]) PollNext(out connector.ReaderOutput[T]) (connector.InputStatus, error) {
	if len(r.splits) == 0 {
		if r.noMore {
			return connector.EndOfInput, nil
		}
		r.ask()
		return connector.NothingAvailable, nil
	}
	s := &r.splits[0]
	for i := 0; i < 16 && s.Next < s.End; i++ {
		out.Collect(r.records[s.Next])
		s.Next++
	}
	if s.Next >= s.End {
		r.splits = r.splits[1:]
		if len(r.splits) == 0 {
			r.ask()
		}
	}
	return connector.MoreAvailable, nil
}

func (r *memReader[T]) Available() <-chan struct{} { return r.avail }
func (r *memReader[T]) SnapshotState(int64) ([]memSplit, error) {
	return append([]memSplit(nil), r.splits...), nil
}
func (r *memReader[T]) AddSplits(splits []memSplit) error {
	r.splits = append(r.splits, splits...)
	r.asked = false
	r.signal()
	return nil
}
func (r *memReader[T]) NotifyNoMoreSplits() {
	r.noMore = true
	r.signal()
}
func (r *memReader[T]) NotifyCheckpointComplete(int64) error          { return nil }
func (r *memReader[T]) HandleSourceEvent(connector.SourceEvent) error { return nil }
func (r *memReader[T]) PauseOrResumeSplits(_, _ []string) error       { return nil }
func (r *memReader[T]) Close() error                                  { return nil }

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
