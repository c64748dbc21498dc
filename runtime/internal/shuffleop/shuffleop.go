// Package shuffleop holds the operators on both ends of a distributed
// job's cut edge: BatchOperator encodes the records an upstream subtask
// emits into batches per partition of the shuffle's channel, with markers
// of its event time, and UnbatchOperator decodes what a shuffle source
// reads back into records, with the event time the markers of every
// upstream slot make (docs/design/kafka-shuffle.md). Package runtime
// builds them where it cuts an edge (distributed.go) and runs them as
// any chained operator, through runtime/internal/engine's operator
// contract; of their task they use the restored state and the savepoint
// drain of their slot (runtime/savepointdrain.go).
package shuffleop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// A cut hash edge carries its records in batches: every Kafka record of a
// shuffle topic (connector.ShuffleRecord.Value) holds the records of one partition
// (the slot that owns their key groups) that one upstream subtask
// emitted between two barriers, up to shuffleBatchBytes. Per-record
// costs of the transport (a produce call, a record's headers and
// framing, a fetched record's allocation) then fall on batches: the
// shuffle is read back exactly as written, and buffering until the
// barrier delays nothing, since an exactly-once shuffle sink makes its
// records visible only when the checkpoint completes.
//
// A batch is a format byte (shuffleBatchV2), the upstream subtask (its
// slot; uvarint), then for each record, in emission order: uvarint length
// of its encoding, varint timestamp (the element's, connector.NoTimestamp
// included), its encoding with the stream type's state.DefaultSerde.
//
// Event time crosses the cut as markers (slots.Marker): a value of format
// shuffleMarkerV1 followed by slots.EncodeMarker's bytes, which every
// upstream subtask writes to every partition of the channel after its
// batches, before a barrier, when its watermark moved or its idleness
// changed since its last marker, and once at the real end of its input.
// Markers written before the barrier become visible with the batches of
// the same checkpoint: writing them more often would show nothing sooner.
const (
	shuffleBatchV2    byte = 2
	shuffleMarkerV1   byte = 3
	shuffleBatchBytes      = 16 << 10
)

// BatchOperator encodes the records of a cut edge and gathers
// them into one batch per partition (the one partition gives a record,
// or every partition when partition is nil: a broadcast edge), which it emits when the batch is
// full, before every barrier (PrepareSnapshotPreBarrier: nothing stays
// buffered in a checkpoint) and at the end of input.
type BatchOperator[T any] struct {
	info      engine.OpInfo
	channel   string
	encode    func(dst []byte, v T) ([]byte, error)
	partition func(T) int32
	out       engine.Output[connector.ShuffleRecord]

	bufs    []shuffleBatch // by partition
	pending []int32        // partitions with a batch begun, in order
	scratch []byte

	// wm and idle are the input's event time as last told; marked what
	// the last markers said (markedAny: some were written, ended: the
	// end marker was).
	wm, markedWm     int64
	idle, markedIdle bool
	markedAny, ended bool
	// t is the task running the operator (it says whether its slot
	// drains for a savepoint).
	t engine.Task
}

type shuffleBatch struct {
	b     []byte
	maxTs int64
}

func NewBatchOperator[T any](info engine.OpInfo, channel string, partitions int, encode func([]byte, T) ([]byte, error), partition func(T) int32, out engine.Output[connector.ShuffleRecord]) *BatchOperator[T] {
	return &BatchOperator[T]{info: info, channel: channel, encode: encode, partition: partition, out: out, bufs: make([]shuffleBatch, partitions), wm: engine.NoWatermark}
}

func (s *BatchOperator[T]) Info() *engine.OpInfo { return &s.info }
func (s *BatchOperator[T]) Open(t engine.Task) error {
	s.t = t
	return nil
}

// EndInput flushes, then marks the end of this subtask's input when its
// event time reached the end (a source that ended emits maxWatermark); a
// source stopped without it (a slot handed over, a cancelled job) did not
// end, and its next owner goes on. A slot draining for a savepoint then
// writes its stop marker after everything: the readers of the channel
// know they hold all this slot wrote (savepointdrain.go).
func (s *BatchOperator[T]) EndInput() error {
	if err := s.flushAll(); err != nil {
		return err
	}
	if s.wm == engine.MaxWatermark {
		return s.mark(slots.Marker{Kind: slots.EndMarker})
	}
	if err := s.markChanges(); err != nil {
		return err
	}
	if s.t != nil && s.t.DrainingForSavepoint() {
		return s.mark(slots.Marker{Kind: slots.StopMarker})
	}
	return nil
}

func (s *BatchOperator[T]) Close() error {
	s.bufs, s.pending = nil, nil
	return nil
}

func (s *BatchOperator[T]) Collect(v T, ts int64) error {
	s.info.Records++
	var p int32
	if s.partition != nil {
		if p = s.partition(v); p < 0 || int(p) >= len(s.bufs) {
			return s.info.Wrap(fmt.Errorf("shuffle %s: partition %d outside [0, %d)", s.channel, p, len(s.bufs)))
		}
	}
	var err error
	if s.scratch, err = s.encode(s.scratch[:0], v); err != nil {
		return s.info.Wrap(fmt.Errorf("shuffle %s: encode a %s: %w", s.channel, typeName[T](), err))
	}
	if s.partition != nil {
		return s.add(p, ts)
	}
	for p := range int32(len(s.bufs)) {
		if err := s.add(p, ts); err != nil {
			return err
		}
	}
	return nil
}

// add appends the record encoded in scratch to partition p's batch.
func (s *BatchOperator[T]) add(p int32, ts int64) error {
	b := &s.bufs[p]
	if len(b.b) == 0 {
		b.b = make([]byte, 1, shuffleBatchBytes+len(s.scratch)+3*binary.MaxVarintLen64)
		b.b[0] = shuffleBatchV2
		b.b = binary.AppendUvarint(b.b, uint64(s.info.Subtask))
		b.maxTs = connector.NoTimestamp
		s.pending = append(s.pending, p)
	}
	b.b = binary.AppendUvarint(b.b, uint64(len(s.scratch)))
	b.b = binary.AppendVarint(b.b, ts)
	b.b = append(b.b, s.scratch...)
	b.maxTs = max(b.maxTs, ts)
	if len(b.b) >= shuffleBatchBytes {
		return s.Flush(p)
	}
	return nil
}

// flush emits partition p's batch. The batch's bytes are handed on, never
// reused: the sink may still hold them.
func (s *BatchOperator[T]) Flush(p int32) error {
	b := &s.bufs[p]
	rec, ts := connector.ShuffleRecord{Partition: p, Value: b.b}, b.maxTs
	*b = shuffleBatch{}
	for i, q := range s.pending {
		if q == p {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			break
		}
	}
	return s.out.Collect(rec, ts)
}

func (s *BatchOperator[T]) flushAll() error {
	for len(s.pending) > 0 {
		if err := s.Flush(s.pending[0]); err != nil {
			return err
		}
	}
	return nil
}

func (s *BatchOperator[T]) PrepareSnapshotPreBarrier(int64) error {
	if err := s.flushAll(); err != nil {
		return err
	}
	return s.markChanges()
}

// markChanges writes a marker when the input's event time changed since
// the last one: idle, or active with a watermark above the last marked
// (or any watermark, after idleness or for the first marker). A subtask
// that knows no watermark yet writes nothing: readers hold back for it,
// as for one they never heard from.
func (s *BatchOperator[T]) markChanges() error {
	if s.ended {
		return nil
	}
	if s.idle && s.markedAny && s.markedIdle {
		return nil
	}
	// The watermark goes first, also when the subtask went idle since the
	// last marker: readers take the maximum over the slots when all are
	// idle, as the in-process valve does with what its channels reached.
	if s.wm != engine.NoWatermark && (!s.markedAny || s.markedIdle || s.wm > s.markedWm) {
		if err := s.mark(slots.Marker{Kind: slots.WatermarkMarker, Watermark: s.wm}); err != nil {
			return err
		}
	}
	if s.idle {
		return s.mark(slots.Marker{Kind: slots.IdleMarker})
	}
	return nil
}

// mark writes m, from this subtask, to every partition of the channel:
// any of them may receive this subtask's records. One value serves them
// all; nobody changes it.
func (s *BatchOperator[T]) mark(m slots.Marker) error {
	m.Slot = s.info.Subtask
	enc, err := slots.EncodeMarker(m)
	if err != nil {
		return s.info.Wrap(fmt.Errorf("shuffle %s: %w", s.channel, err))
	}
	v := append([]byte{shuffleMarkerV1}, enc...)
	for p := range s.bufs {
		if err := s.out.Collect(connector.ShuffleRecord{Partition: int32(p), Value: v}, connector.NoTimestamp); err != nil {
			return err
		}
	}
	s.markedAny = true
	switch m.Kind {
	case slots.WatermarkMarker:
		s.markedWm, s.markedIdle = m.Watermark, false
	case slots.IdleMarker:
		s.markedIdle = true
	case slots.EndMarker:
		s.ended = true
	}
	return nil
}

func (s *BatchOperator[T]) EmitWatermark(wm int64) error {
	s.wm = max(s.wm, wm)
	return s.out.EmitWatermark(wm)
}

func (s *BatchOperator[T]) EmitStatus(idle bool) error {
	s.idle = idle
	return s.out.EmitStatus(idle)
}

// UnbatchOperator decodes the batches a shuffle source reads back
// into the records, each with its own timestamp, and makes the event time
// of its subtask from the markers: per partition it owns, the minimum
// over the upstream subtasks (slots) that write it (slots.Merge); over
// its partitions, the minimum of every partition that has not ended,
// idle ones included. Every slot writes each marker to every partition,
// but the source reads the partitions at its own pace: a slot's marker
// read in one partition says nothing of its records still unread in
// another, which that partition's watermark (behind until it reads the
// marker there, after those records) holds back. Leaving idle partitions
// out would let a slot back from idleness move event time past its own
// records in the partitions not read yet. The subtask is idle when every
// open partition is. The source it reads from has no watermarks of its own (it
// reads a topic without event time), so what it emits is dropped. The
// merges are this operator's state: a restored subtask goes on from the
// markers it had read, as its source goes on from its offsets, instead of
// holding back for upstream subtasks whose event time stopped moving
// before the checkpoint.
type UnbatchOperator[T any] struct {
	info     engine.OpInfo
	channel  string
	decode   func([]byte) (T, error)
	out      engine.Output[T]
	upstream int // upstream subtasks: the job's slots
	// owned are the partitions this subtask reads, ascending; index
	// their position in owned and in parts.
	owned []int32
	index map[int32]int
	parts []*slots.Merge
	// wm and idle are what the subtask emitted last.
	wm   int64
	idle bool
	// err is a construction error, returned by open.
	err error
	// t is the task running the operator; drained is set once it told the
	// execution that its channel is drained for a savepoint.
	t       engine.Task
	drained bool
}

// The capabilities the task finds by type assertion.
var (
	_ engine.Preparer    = (*BatchOperator[int])(nil)
	_ engine.Snapshotter = (*UnbatchOperator[int])(nil)
)

func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// NewUnbatchOperator is subtask info.Subtask of parallelism p of the
// reading side of a channel of partitions partitions, each written by p
// upstream subtasks; owner is the source's rule.
func NewUnbatchOperator[T any](info engine.OpInfo, channel string, decode func([]byte) (T, error), out engine.Output[T], p, partitions int, owner func(partition, parallelism int) int) *UnbatchOperator[T] {
	u := &UnbatchOperator[T]{info: info, channel: channel, decode: decode, out: out, upstream: p, index: map[int32]int{}, wm: engine.NoWatermark}
	for q := range partitions {
		if owner(q, p) == info.Subtask {
			u.index[int32(q)] = len(u.owned)
			u.owned = append(u.owned, int32(q))
		}
	}
	u.err = u.fresh()
	return u
}

// fresh: every partition holds back until it hears from every upstream
// subtask. A subtask that owns no partition never has event time to give.
func (u *UnbatchOperator[T]) fresh() error {
	u.parts = make([]*slots.Merge, len(u.owned))
	for i := range u.parts {
		m, err := slots.NewMerge(u.upstream)
		if err != nil {
			return err
		}
		u.parts[i] = m
	}
	return nil
}

func (u *UnbatchOperator[T]) Info() *engine.OpInfo { return &u.info }
func (u *UnbatchOperator[T]) EndInput() error      { return nil }
func (u *UnbatchOperator[T]) Close() error         { return nil }

const shuffleDecodeStateV1 byte = 1

// Open restores the merges of this subtask from the checkpoint.
func (u *UnbatchOperator[T]) Open(t engine.Task) error {
	u.t = t
	if u.err != nil {
		return u.info.Wrap(u.err)
	}
	old, err := t.Restored().Subtasks(u.info.UID)
	if err != nil {
		return u.info.Wrap(err)
	}
	if u.info.Subtask >= len(old) || old[u.info.Subtask] == nil {
		return nil
	}
	if err := u.restore(old[u.info.Subtask]); err != nil {
		return u.info.Wrap(err)
	}
	return u.announce()
}

// announce emits the event time a restore found: the operators after it
// start from nothing (an input valve is not checkpointed), and upstream
// slots whose event time stopped moving write no marker that would tell
// them again.
func (u *UnbatchOperator[T]) announce() error {
	if u.wm != engine.NoWatermark {
		if err := u.out.EmitWatermark(u.wm); err != nil {
			return err
		}
	}
	if u.idle {
		return u.out.EmitStatus(true)
	}
	return nil
}

func (u *UnbatchOperator[T]) restore(b []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("shuffle %s: restore event time: "+format, append([]any{u.channel}, args...)...)
	}
	if len(b) < 1 || b[0] != shuffleDecodeStateV1 {
		return bad("not a version %d state", shuffleDecodeStateV1)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n != uint64(len(u.owned)) {
		return bad("a state of %d partitions; this subtask reads %d (the job's slots or max parallelism changed)", n, len(u.owned))
	}
	b = b[k:]
	var err error
	for i := range u.parts {
		if u.parts[i], b, err = slots.RestoreMerge(b, u.upstream); err != nil {
			return bad("partition %d: %w", u.owned[i], err)
		}
	}
	if u.wm, k = binary.Varint(b); k <= 0 || len(b) != k+1 {
		return bad("not one watermark and one status after the partitions")
	}
	u.idle = b[k] == 1
	return nil
}

func (u *UnbatchOperator[T]) SnapshotState(int64) ([]byte, error) {
	b := []byte{shuffleDecodeStateV1} // a new blob: the last may still be stored
	b = binary.AppendUvarint(b, uint64(len(u.owned)))
	for _, m := range u.parts {
		b = m.AppendState(b)
	}
	b = binary.AppendVarint(b, u.wm)
	if u.idle {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b, nil
}

var errShuffleBatch = errors.New("not a shuffle batch or marker of this format")

func (u *UnbatchOperator[T]) Collect(r connector.ShuffleRecord, _ int64) error {
	u.info.Records++
	b := r.Value
	if len(b) == 0 || (b[0] != shuffleBatchV2 && b[0] != shuffleMarkerV1) {
		return u.info.Wrap(fmt.Errorf("shuffle %s: a record of partition %d: %w", u.channel, r.Partition, errShuffleBatch))
	}
	i, ok := u.index[r.Partition]
	if !ok {
		return u.info.Wrap(fmt.Errorf("shuffle %s: a record of partition %d, which subtask %d does not read", u.channel, r.Partition, u.info.Subtask))
	}
	if b[0] == shuffleMarkerV1 {
		m, err := slots.DecodeMarker(b[1:])
		if err != nil {
			return u.info.Wrap(fmt.Errorf("shuffle %s: a marker of partition %d: %w: %w", u.channel, r.Partition, errShuffleBatch, err))
		}
		out, err := u.parts[i].Marker(m)
		if err != nil {
			return u.info.Wrap(fmt.Errorf("shuffle %s: partition %d: %w", u.channel, r.Partition, err))
		}
		if err := u.eventTimeMoved(out); err != nil {
			return err
		}
		if m.Kind == slots.StopMarker || m.Kind == slots.EndMarker {
			u.CheckDrained()
		}
		return nil
	}
	slot, k := binary.Uvarint(b[1:])
	if k <= 0 || slot > math.MaxInt32 {
		return u.info.Wrap(fmt.Errorf("shuffle %s: a batch of partition %d: bad upstream subtask: %w", u.channel, r.Partition, errShuffleBatch))
	}
	out, err := u.parts[i].Record(int(slot))
	if err != nil {
		return u.info.Wrap(fmt.Errorf("shuffle %s: partition %d: %w", u.channel, r.Partition, err))
	}
	// A slot back from idleness makes its partition, and this subtask,
	// active before its records go on.
	if err := u.eventTimeMoved(out); err != nil {
		return err
	}
	b = b[1+k:]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return u.info.Wrap(fmt.Errorf("shuffle %s: a batch of partition %d: bad length: %w", u.channel, r.Partition, errShuffleBatch))
		}
		b = b[k:]
		ts, k := binary.Varint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return u.info.Wrap(fmt.Errorf("shuffle %s: a batch of partition %d: cut short: %w", u.channel, r.Partition, errShuffleBatch))
		}
		b = b[k:]
		v, err := u.decode(b[:n])
		if err != nil {
			return u.info.Wrap(fmt.Errorf("shuffle %s: decode a %s from partition %d: %w", u.channel, typeName[T](), r.Partition, err))
		}
		b = b[n:]
		if err := u.out.Collect(v, ts); err != nil {
			return err
		}
	}
	return nil
}

// CheckDrained tells the execution, once, that every partition this
// subtask reads is drained (every upstream slot stopped for the savepoint
// or ended), while its slot drains for a savepoint: its source may stop,
// since nothing more is written to it. On the task goroutine.
func (u *UnbatchOperator[T]) CheckDrained() {
	if u.drained || u.t == nil || !u.t.DrainingForSavepoint() {
		return
	}
	for _, m := range u.parts {
		if !m.Drained() {
			return
		}
	}
	u.drained = true
	u.t.ShuffleDrained(u.channel)
}

// eventTimeMoved emits what a step of a partition's merge changed in the
// subtask's event time: activity before the watermark, idleness after it
// (the watermark an idle input reached goes first).
func (u *UnbatchOperator[T]) eventTimeMoved(p slots.Output) error {
	if !p.Advanced && !p.StatusChanged && !p.Ended {
		return nil
	}
	wm, open, idle := engine.MaxWatermark, 0, true
	for _, m := range u.parts {
		if m.Ended() {
			continue
		}
		open++
		wm = min(wm, m.Watermark())
		idle = idle && m.Idle()
	}
	idle = idle && open > 0
	if !idle && u.idle {
		u.idle = false
		if err := u.out.EmitStatus(false); err != nil {
			return err
		}
	}
	if wm > u.wm {
		u.wm = wm
		if err := u.out.EmitWatermark(wm); err != nil {
			return err
		}
	}
	if idle && !u.idle {
		u.idle = true
		return u.out.EmitStatus(true)
	}
	return nil
}

// The shuffle source's own event time means nothing (see above).
func (u *UnbatchOperator[T]) EmitWatermark(int64) error { return nil }
func (u *UnbatchOperator[T]) EmitStatus(bool) error     { return nil }
