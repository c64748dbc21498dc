package kafka

import (
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Deserializer turns a Kafka record into the source's record type (Flink:
// KafkaRecordDeserializationSchema). It runs on the task goroutine. An error
// rejects the record: the job fails naming its topic, partition and offset,
// or, with WithSkipBadRecords, the record is counted and dropped, or, with
// WithDeadLetterOutput, it goes to the side output. A panic rejects the
// record the same way (its stack is logged at error level, its value is
// the error), so a bug that panics on some input never makes the job
// restart onto the same record forever. An error wrapping
// ErrDeserializerUnavailable is not the record's fault and fails the job
// under every policy.
//
// The record is the consumer's own: a deserializer may keep it or its byte
// slices.
type Deserializer[T any] interface {
	Deserialize(r *kgo.Record) (T, error)
}

// ErrDeserializerUnavailable, wrapped in a Deserializer's error, says that
// the record is not at fault: what the deserializer needs to judge it,
// such as a schema registry, cannot be reached (after the deserializer's
// own retries). No bad-record policy applies to such an error: the job
// fails with it under WithSkipBadRecords and WithDeadLetterOutput too, for
// dropping or dead-lettering would lose good records without a word; a
// restart reads the record again.
var ErrDeserializerUnavailable = errors.New("the deserializer cannot judge the record: what it depends on is unavailable")

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

// TableUpdates reads a changelog topic, such as a compacted one, as a
// table's updates for runtime.TableJoin and runtime.LeftTableJoin: the
// record's key, decoded by key, is the row's key; a record with a nil
// value (a tombstone) deletes the row (Deleted true, Value the zero
// value, and value is not called); any other record sets the row to its
// value decoded by value. An empty but non-nil value is a value, not a
// tombstone: Kafka tells the two apart, and so does compaction. The
// source emits each update with its record's timestamp as event time, the
// time the table join orders versions by.
//
// An error from either function rejects the record as any deserializer's
// does: the job fails naming the record's topic, partition and offset,
// unless WithSkipBadRecords or WithDeadLetterOutput is given. The error
// says which of the two failed. A nil function is refused when the
// deserializer is made (it panics): a table without keys cannot be
// joined.
func TableUpdates[K comparable, V any](key func([]byte) (K, error), value func([]byte) (V, error)) Deserializer[runtime.TableUpdate[K, V]] {
	if key == nil || value == nil {
		panic("kafka: TableUpdates needs a key and a value function")
	}
	return DeserializerFunc[runtime.TableUpdate[K, V]](func(r *kgo.Record) (runtime.TableUpdate[K, V], error) {
		var u runtime.TableUpdate[K, V]
		k, err := key(r.Key)
		if err != nil {
			return u, fmt.Errorf("table update key: %w", err)
		}
		u.Key = k
		if r.Value == nil {
			u.Deleted = true
			return u, nil
		}
		v, err := value(r.Value)
		if err != nil {
			return u, fmt.Errorf("table update value of key %v: %w", k, err)
		}
		u.Value = v
		return u, nil
	})
}
