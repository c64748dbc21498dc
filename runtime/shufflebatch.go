package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/connector"
)

// A cut hash edge carries its records in batches: every Kafka record of a
// shuffle topic (ShuffleRecord.Value) holds the records of one partition
// (key group) that one upstream subtask emitted between two barriers, up
// to shuffleBatchBytes. Per-record costs of the transport (a produce
// call, a record's headers and framing, a fetched record's allocation)
// then fall on batches: the shuffle is read back exactly as written, and
// buffering until the barrier delays nothing, since an exactly-once
// shuffle sink makes its records visible only when the checkpoint
// completes.
//
// A batch is a format byte (shuffleBatchV1), then for each record, in
// emission order: uvarint length of its encoding, varint timestamp (the
// element's, connector.NoTimestamp included), its encoding with the
// stream type's DefaultSerde.
const (
	shuffleBatchV1    byte = 1
	shuffleBatchBytes      = 16 << 10
)

// shuffleBatchOperator encodes the records of a cut hash edge and gathers
// them into one batch per partition, which it emits when the batch is
// full, before every barrier (prepareSnapshotPreBarrier: nothing stays
// buffered in a checkpoint) and at the end of input.
type shuffleBatchOperator[T any] struct {
	info      opInfo
	channel   string
	encode    func(dst []byte, v T) ([]byte, error)
	partition func(T) int32
	out       output[ShuffleRecord]

	bufs    []shuffleBatch // by partition
	pending []int32        // partitions with a batch begun, in order
	scratch []byte
}

type shuffleBatch struct {
	b     []byte
	maxTs int64
}

func newShuffleBatchOperator[T any](info opInfo, channel string, partitions int, encode func([]byte, T) ([]byte, error), partition func(T) int32, out output[ShuffleRecord]) *shuffleBatchOperator[T] {
	return &shuffleBatchOperator[T]{info: info, channel: channel, encode: encode, partition: partition, out: out, bufs: make([]shuffleBatch, partitions)}
}

func (s *shuffleBatchOperator[T]) operator() *opInfo { return &s.info }
func (s *shuffleBatchOperator[T]) open(*task) error  { return nil }
func (s *shuffleBatchOperator[T]) endInput() error   { return s.flushAll() }
func (s *shuffleBatchOperator[T]) close() error {
	s.bufs, s.pending = nil, nil
	return nil
}

func (s *shuffleBatchOperator[T]) collect(v T, ts int64) error {
	s.info.records++
	p := s.partition(v)
	if p < 0 || int(p) >= len(s.bufs) {
		return s.info.wrap(fmt.Errorf("shuffle %s: partition %d outside [0, %d)", s.channel, p, len(s.bufs)))
	}
	var err error
	if s.scratch, err = s.encode(s.scratch[:0], v); err != nil {
		return s.info.wrap(fmt.Errorf("shuffle %s: encode a %s: %w", s.channel, typeName[T](), err))
	}
	b := &s.bufs[p]
	if len(b.b) == 0 {
		b.b = make([]byte, 1, shuffleBatchBytes+len(s.scratch)+2*binary.MaxVarintLen64)
		b.b[0] = shuffleBatchV1
		b.maxTs = connector.NoTimestamp
		s.pending = append(s.pending, p)
	}
	b.b = binary.AppendUvarint(b.b, uint64(len(s.scratch)))
	b.b = binary.AppendVarint(b.b, ts)
	b.b = append(b.b, s.scratch...)
	b.maxTs = max(b.maxTs, ts)
	if len(b.b) >= shuffleBatchBytes {
		return s.flush(p)
	}
	return nil
}

// flush emits partition p's batch. The batch's bytes are handed on, never
// reused: the sink may still hold them.
func (s *shuffleBatchOperator[T]) flush(p int32) error {
	b := &s.bufs[p]
	rec, ts := ShuffleRecord{Partition: p, Value: b.b}, b.maxTs
	*b = shuffleBatch{}
	for i, q := range s.pending {
		if q == p {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			break
		}
	}
	return s.out.collect(rec, ts)
}

func (s *shuffleBatchOperator[T]) flushAll() error {
	for len(s.pending) > 0 {
		if err := s.flush(s.pending[0]); err != nil {
			return err
		}
	}
	return nil
}

func (s *shuffleBatchOperator[T]) prepareSnapshotPreBarrier(int64) error { return s.flushAll() }

func (s *shuffleBatchOperator[T]) emitWatermark(wm int64) error { return s.out.emitWatermark(wm) }
func (s *shuffleBatchOperator[T]) emitStatus(idle bool) error   { return s.out.emitStatus(idle) }

// shuffleUnbatchOperator decodes the batches a shuffle source reads back
// into the records, each with its own timestamp.
type shuffleUnbatchOperator[T any] struct {
	noLifecycle
	channel string
	decode  func([]byte) (T, error)
	out     output[T]
}

var errShuffleBatch = errors.New("not a shuffle batch of this format")

func (s *shuffleUnbatchOperator[T]) collect(r ShuffleRecord, _ int64) error {
	s.info.records++
	b := r.Value
	if len(b) == 0 || b[0] != shuffleBatchV1 {
		return s.info.wrap(fmt.Errorf("shuffle %s: a record of partition %d: %w", s.channel, r.Partition, errShuffleBatch))
	}
	b = b[1:]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return s.info.wrap(fmt.Errorf("shuffle %s: a batch of partition %d: bad length: %w", s.channel, r.Partition, errShuffleBatch))
		}
		b = b[k:]
		ts, k := binary.Varint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return s.info.wrap(fmt.Errorf("shuffle %s: a batch of partition %d: cut short: %w", s.channel, r.Partition, errShuffleBatch))
		}
		b = b[k:]
		v, err := s.decode(b[:n])
		if err != nil {
			return s.info.wrap(fmt.Errorf("shuffle %s: decode a %s from partition %d: %w", s.channel, typeName[T](), r.Partition, err))
		}
		b = b[n:]
		if err := s.out.collect(v, ts); err != nil {
			return err
		}
	}
	return nil
}

func (s *shuffleUnbatchOperator[T]) emitWatermark(wm int64) error { return s.out.emitWatermark(wm) }
func (s *shuffleUnbatchOperator[T]) emitStatus(idle bool) error   { return s.out.emitStatus(idle) }
