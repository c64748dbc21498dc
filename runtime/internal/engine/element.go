package engine

import (
	"math"

	"github.com/splitflow/splitflow/runtime/watermark"
)

// MaxWatermark is the watermark a source emits when its input ends
// (watermark.Max): every pending event-time timer fires.
const MaxWatermark = watermark.Max

// NoWatermark is the watermark of an input that has seen none yet.
const NoWatermark int64 = math.MinInt64

// CheckpointBarrier separates the records that belong to checkpoint
// CheckpointID from those after it. Barriers flow in-band through the same
// channels as records, so every record before a barrier is in the
// checkpoint and every record after it is not. The master injects them
// into the sources; a task with several input channels aligns them (see
// barrier.go).
type CheckpointBarrier struct {
	// CheckpointID strictly increases over the life of a job, across
	// restarts and restores.
	CheckpointID int64
	// Timestamp is when the checkpoint was triggered, in milliseconds since
	// the Unix epoch.
	Timestamp int64
}

// record is one data element with its event timestamp (connector.NoTimestamp
// when it has none). Records are stored by value in batches so that the hot
// path neither boxes nor allocates.
type record[T any] struct {
	Value T
	TS    int64
}

// eventKind names the control elements that travel in-band behind records.
type eventKind uint8

const (
	eventNone eventKind = iota
	// EventWatermark: event time on this channel has reached event.watermark.
	EventWatermark
	// EventStatus: the channel became idle (event.idle) or active again.
	EventStatus
	// EventBarrier: checkpoint barrier event.barrier.
	EventBarrier
	// EventEndOfPartition: the upstream subtask will send nothing more;
	// event.stopped when it was stopped (a cancel) rather than reaching
	// the end of its input.
	EventEndOfPartition
)

func (k eventKind) String() string {
	switch k {
	case eventNone:
		return "none"
	case EventWatermark:
		return "watermark"
	case EventStatus:
		return "status"
	case EventBarrier:
		return "barrier"
	case EventEndOfPartition:
		return "end-of-partition"
	default:
		return "unknown-event"
	}
}

// Event is a control element. Events are never mixed into the middle of a
// batch: a writer flushes its buffer before it appends one, so an event is
// always the last element of its batch and order per channel is the order
// in which the upstream operator emitted.
type Event struct {
	Kind      eventKind
	Idle      bool
	Stopped   bool
	Watermark int64
	Barrier   CheckpointBarrier
}

// Batch is the unit that crosses a channel between two tasks: up to
// BufferSize records followed by at most one event. Batches are recycled
// between the writer and the input channel that receive them (see
// inputChannel.free), so a running pipeline allocates none.
type Batch[T any] struct {
	Records []record[T]
	Ev      Event
}

func (b *Batch[T]) reset() {
	clear(b.Records) // drop references so that recycled batches pin no garbage
	b.Records = b.Records[:0]
	b.Ev = Event{}
}

// NoTimestampForProcessingTime is the timestamp of records emitted from a
// processing-time timer: they have no event time.
const NoTimestampForProcessingTime = NoWatermark
