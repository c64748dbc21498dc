package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/splitflow/splitflow/connector"
)

// NoStoppingOffset marks a split that is read until the job stops.
const NoStoppingOffset int64 = math.MinInt64

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// Split is one topic-partition, read from StartingOffset. In a reader's
// checkpoint StartingOffset is the next offset to read (the last emitted
// record's offset + 1), so a restored split resumes exactly there. A
// bounded split ends when the consumer's position reaches StoppingOffset; a
// position, not a record offset, because transaction markers take offsets
// too.
type Split struct {
	TopicPartition
	StartingOffset int64
	StoppingOffset int64 // NoStoppingOffset when unbounded
	id             string
}

// NewSplit returns a split of tp from start to stop (NoStoppingOffset for
// none).
func NewSplit(tp TopicPartition, start, stop int64) Split {
	return Split{TopicPartition: tp, StartingOffset: start, StoppingOffset: stop, id: tp.String()}
}

// SplitID is topic-partition, as Flink names Kafka splits.
func (s Split) SplitID() string {
	if s.id == "" {
		return s.TopicPartition.String()
	}
	return s.id
}

// Bounded reports whether the split has a stopping offset.
func (s Split) Bounded() bool { return s.StoppingOffset != NoStoppingOffset }

func (s Split) String() string {
	if s.Bounded() {
		return fmt.Sprintf("%s[%d,%d)", s.SplitID(), s.StartingOffset, s.StoppingOffset)
	}
	return fmt.Sprintf("%s[%d,)", s.SplitID(), s.StartingOffset)
}

// SplitSerializer encodes splits for checkpoints.
type SplitSerializer struct{}

var _ connector.VersionedSerializer[Split] = SplitSerializer{}

// Version 1: uvarint topic length, topic, int32 partition, int64 start,
// int64 stop, big-endian.
func (SplitSerializer) Version() int { return 1 }

func (SplitSerializer) Serialize(s Split) ([]byte, error) {
	return appendSplit(nil, s), nil
}

func (SplitSerializer) Deserialize(version int, data []byte) (Split, error) {
	if version != 1 {
		return Split{}, fmt.Errorf("kafka split version %d: %w", version, connector.ErrUnsupportedVersion)
	}
	s, rest, err := readSplit(data)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	if err != nil {
		return Split{}, fmt.Errorf("kafka split: %w", err)
	}
	return s, nil
}

func appendSplit(b []byte, s Split) []byte {
	b = appendTP(b, s.TopicPartition)
	b = binary.BigEndian.AppendUint64(b, uint64(s.StartingOffset))
	return binary.BigEndian.AppendUint64(b, uint64(s.StoppingOffset))
}

func appendTP(b []byte, tp TopicPartition) []byte {
	b = binary.AppendUvarint(b, uint64(len(tp.Topic)))
	b = append(b, tp.Topic...)
	return binary.BigEndian.AppendUint32(b, uint32(tp.Partition))
}

var errShort = errors.New("data too short")

func readTP(b []byte) (TopicPartition, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n+4 {
		return TopicPartition{}, nil, errShort
	}
	b = b[k:]
	tp := TopicPartition{Topic: string(b[:n]), Partition: int32(binary.BigEndian.Uint32(b[n:]))}
	return tp, b[n+4:], nil
}

func readSplit(b []byte) (Split, []byte, error) {
	tp, b, err := readTP(b)
	if err != nil {
		return Split{}, nil, err
	}
	if len(b) < 16 {
		return Split{}, nil, errShort
	}
	s := NewSplit(tp, int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])))
	return s, b[16:], nil
}
