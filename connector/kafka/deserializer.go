package kafka

import "github.com/twmb/franz-go/pkg/kgo"

// Deserializer turns a Kafka record into the source's record type (Flink:
// KafkaRecordDeserializationSchema). It runs on the task goroutine. An error
// rejects the record: the job fails naming its topic, partition and offset,
// or, with WithSkipBadRecords, the record is counted and dropped.
//
// The record is the consumer's own: a deserializer may keep it or its byte
// slices.
type Deserializer[T any] interface {
	Deserialize(r *kgo.Record) (T, error)
}

// DeserializerFunc adapts a function to Deserializer.
type DeserializerFunc[T any] func(r *kgo.Record) (T, error)

// Deserialize calls f.
func (f DeserializerFunc[T]) Deserialize(r *kgo.Record) (T, error) { return f(r) }

// ValueDeserializer deserializes the record's value alone.
func ValueDeserializer[T any](fn func(value []byte) (T, error)) Deserializer[T] {
	return DeserializerFunc[T](func(r *kgo.Record) (T, error) { return fn(r.Value) })
}

// StringValues yields each record's value as a string.
func StringValues() Deserializer[string] {
	return DeserializerFunc[string](func(r *kgo.Record) (string, error) { return string(r.Value), nil })
}

// Records yields the full records: key, value, headers, timestamp, topic,
// partition and offset.
func Records() Deserializer[*kgo.Record] {
	return DeserializerFunc[*kgo.Record](func(r *kgo.Record) (*kgo.Record, error) { return r, nil })
}
