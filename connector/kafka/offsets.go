package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// OffsetResetStrategy says where to start a partition that has no committed
// or specified offset (Kafka's auto.offset.reset).
type OffsetResetStrategy int

const (
	// ResetEarliest starts at the earliest offset.
	ResetEarliest OffsetResetStrategy = iota
	// ResetLatest starts at the latest offset.
	ResetLatest
	// ResetNone fails the job.
	ResetNone
)

// Offsets chooses offsets for partitions, as Flink's OffsetsInitializer: the
// starting offsets of a source, or the stopping offsets of a bounded one.
// Build one with EarliestOffsets, LatestOffsets, CommittedOffsets,
// TimestampOffsets or SpecificOffsets.
type Offsets struct {
	kind      offsetsKind
	reset     OffsetResetStrategy
	timestamp int64
	specific  map[TopicPartition]int64
}

type offsetsKind int

const (
	offsetsEarliest offsetsKind = iota
	offsetsLatest
	offsetsCommitted
	offsetsTimestamp
	offsetsSpecific
)

// EarliestOffsets is each partition's log start offset.
func EarliestOffsets() Offsets { return Offsets{kind: offsetsEarliest} }

// LatestOffsets is each partition's end as a read_committed consumer sees
// it: the last stable offset (the high watermark under read_uncommitted).
// As stopping offsets it is taken once, when the partition is discovered.
func LatestOffsets() Offsets { return Offsets{kind: offsetsLatest} }

// CommittedOffsets is the consumer group's committed offset of each
// partition, or where reset says for a partition without one. It needs a
// group id.
func CommittedOffsets(reset OffsetResetStrategy) Offsets {
	return Offsets{kind: offsetsCommitted, reset: reset}
}

// TimestampOffsets is, per partition, the first offset whose record
// timestamp is at or after millis, or the end when there is none.
func TimestampOffsets(millis int64) Offsets {
	return Offsets{kind: offsetsTimestamp, timestamp: millis}
}

// SpecificOffsets uses the given offset per partition, and reset for the
// others.
func SpecificOffsets(offsets map[TopicPartition]int64, reset OffsetResetStrategy) Offsets {
	m := make(map[TopicPartition]int64, len(offsets))
	for tp, o := range offsets {
		m[tp] = o
	}
	return Offsets{kind: offsetsSpecific, specific: m, reset: reset}
}

func (o Offsets) String() string {
	switch o.kind {
	case offsetsEarliest:
		return "earliest"
	case offsetsLatest:
		return "latest"
	case offsetsCommitted:
		return "committed"
	case offsetsTimestamp:
		return fmt.Sprintf("timestamp(%d)", o.timestamp)
	default:
		return "specific"
	}
}

// resolve returns an absolute offset for every partition in tps.
func (o Offsets) resolve(ctx context.Context, adm *kadm.Client, group string, readCommitted bool, tps []TopicPartition) (map[TopicPartition]int64, error) {
	out := make(map[TopicPartition]int64, len(tps))
	if len(tps) == 0 {
		return out, nil
	}
	topics := topicsOf(tps)
	var pending []TopicPartition // partitions the reset strategy decides
	switch o.kind {
	case offsetsEarliest:
		return listed(ctx, adm.ListStartOffsets, topics, tps)
	case offsetsLatest:
		return latest(ctx, adm, readCommitted, topics, tps)
	case offsetsTimestamp:
		return listed(ctx, func(ctx context.Context, ts ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, o.timestamp, ts...)
		}, topics, tps)
	case offsetsCommitted:
		if group == "" {
			return nil, errors.New("kafka source: committed starting offsets need a group id (WithGroupID)")
		}
		fetched, err := fetchCommitted(ctx, adm, group, topics)
		if errors.Is(err, kerr.GroupIDNotFound) {
			// A group that never committed (some brokers, kfake among
			// them, answer so for it): every partition takes the reset.
			fetched, err = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kafka source: fetch committed offsets of group %q: %w", group, err)
		}
		for _, tp := range tps {
			if r, ok := fetched.Lookup(tp.Topic, tp.Partition); ok && r.Err == nil && r.At >= 0 {
				out[tp] = r.At
			} else {
				pending = append(pending, tp)
			}
		}
	case offsetsSpecific:
		for _, tp := range tps {
			if off, ok := o.specific[tp]; ok {
				out[tp] = off
			} else {
				pending = append(pending, tp)
			}
		}
	}
	if len(pending) == 0 {
		return out, nil
	}
	var rest map[TopicPartition]int64
	var err error
	switch o.reset {
	case ResetEarliest:
		rest, err = listed(ctx, adm.ListStartOffsets, topicsOf(pending), pending)
	case ResetLatest:
		rest, err = latest(ctx, adm, readCommitted, topicsOf(pending), pending)
	default:
		return nil, fmt.Errorf("kafka source: no %s offset for %v and the reset strategy is none", o, pending)
	}
	if err != nil {
		return nil, err
	}
	for tp, off := range rest {
		out[tp] = off
	}
	return out, nil
}

// fetchCommitted fetches group's committed offsets of topics, retrying
// what the broker calls retriable for up to committedFetchPatience: a
// group that was never used finds no coordinator until the broker has
// created its offsets topic (COORDINATOR_NOT_AVAILABLE), which franz-go
// hands back at once.
func fetchCommitted(ctx context.Context, adm *kadm.Client, group string, topics []string) (kadm.OffsetResponses, error) {
	deadline := time.Now().Add(committedFetchPatience)
	backoff := 100 * time.Millisecond
	for {
		fetched, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
		var ke *kerr.Error
		if err == nil || !errors.As(err, &ke) || !ke.Retriable || time.Now().Add(backoff).After(deadline) {
			return fetched, err
		}
		select {
		case <-ctx.Done():
			return fetched, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// committedFetchPatience bounds the retries of fetchCommitted.
const committedFetchPatience = 30 * time.Second

func latest(ctx context.Context, adm *kadm.Client, readCommitted bool, topics []string, tps []TopicPartition) (map[TopicPartition]int64, error) {
	if readCommitted {
		return listed(ctx, adm.ListCommittedOffsets, topics, tps)
	}
	return listed(ctx, adm.ListEndOffsets, topics, tps)
}

func listed(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string, tps []TopicPartition) (map[TopicPartition]int64, error) {
	offs, err := list(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka source: list offsets of %v: %w", topics, err)
	}
	out := make(map[TopicPartition]int64, len(tps))
	for _, tp := range tps {
		lo, ok := offs.Lookup(tp.Topic, tp.Partition)
		if !ok {
			return nil, fmt.Errorf("kafka source: no offset listed for %s", tp)
		}
		if lo.Err != nil {
			return nil, fmt.Errorf("kafka source: list offset of %s: %w", tp, lo.Err)
		}
		out[tp] = lo.Offset
	}
	return out, nil
}

func topicsOf(tps []TopicPartition) []string {
	seen := map[string]bool{}
	var ts []string
	for _, tp := range tps {
		if !seen[tp.Topic] {
			seen[tp.Topic] = true
			ts = append(ts, tp.Topic)
		}
	}
	return ts
}
