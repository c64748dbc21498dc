package kafka

import (
	"strconv"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is a record the source's deserializer rejected, as it was
// read: its key, value and headers (the consumer's own slices, not
// copied), where it was read, its timestamp, and the deserializer's error.
// With WithDeadLetterOutput the source emits one per rejected record to a
// side output of its stream; DeadLetterSerializer writes them to a topic.
type DeadLetter struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kgo.RecordHeader
	Timestamp time.Time
	// Err is the deserializer's error text.
	Err string
}

// The headers DeadLetterSerializer adds to a dead letter's record, after
// the original record's own.
const (
	DeadLetterTopicHeader     = "splitflow.dlq.topic"
	DeadLetterPartitionHeader = "splitflow.dlq.partition"
	DeadLetterOffsetHeader    = "splitflow.dlq.offset"
	DeadLetterErrorHeader     = "splitflow.dlq.error"
)

// DeadLetterSerializer writes each dead letter to topic as the record it
// was, key, value, headers and timestamp, with the headers
// DeadLetterTopicHeader, DeadLetterPartitionHeader, DeadLetterOffsetHeader
// (decimal) and DeadLetterErrorHeader added, so that the dead-letter topic
// says where every record came from and why it was refused. With an
// exactly-once Sink each dead letter is written once, in the transaction
// of the checkpoint whose records it was read with.
func DeadLetterSerializer(topic string) RecordSerializer[DeadLetter] {
	return topicsSerializer[DeadLetter]{topics: []string{topic}, ser: RecordSerializerFunc[DeadLetter](func(d DeadLetter, ts int64) (*kgo.Record, error) {
		h := make([]kgo.RecordHeader, 0, len(d.Headers)+4)
		h = append(h, d.Headers...)
		h = append(h,
			kgo.RecordHeader{Key: DeadLetterTopicHeader, Value: []byte(d.Topic)},
			kgo.RecordHeader{Key: DeadLetterPartitionHeader, Value: strconv.AppendInt(nil, int64(d.Partition), 10)},
			kgo.RecordHeader{Key: DeadLetterOffsetHeader, Value: strconv.AppendInt(nil, d.Offset, 10)},
			kgo.RecordHeader{Key: DeadLetterErrorHeader, Value: []byte(d.Err)})
		r := &kgo.Record{Topic: topic, Key: d.Key, Value: d.Value, Headers: h, Timestamp: d.Timestamp}
		if ts != connector.NoTimestamp && d.Timestamp.IsZero() {
			r.Timestamp = time.UnixMilli(ts)
		}
		return r, nil
	})}
}
