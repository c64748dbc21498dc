// Package kfetch sends the raw requests whose answers must come from a
// broker itself, not from a client's caches or consumer.
//
// Fetch sends one fetch of one partition, outside any consumer and fetch
// session, for the readers that must know how far a fetch went even when
// it delivered nothing: a bounded split probing whether anything is left
// before its stop (connector/kafka), and the read_committed verifier
// reading to the last stable offsets (integration/committed). A
// consumer's position moves only with the records it delivers; a fetch
// answer says how far its batches went.
//
// Topic asks for one topic's metadata: a client's metadata cache may be
// up to MetadataMinAge (5s by default) old, which after a topic was just
// created still says it does not exist.
package kfetch

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partition names a partition the way fetch requests from version 13 on
// do: by its topic's id, with the name kept for records and errors.
type Partition struct {
	Topic     string
	TopicID   [16]byte
	Partition int32
}

func (p Partition) String() string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }

// Opts shape one fetch.
type Opts struct {
	// MaxBytes bounds the answer, and the partition's share of it. The
	// leader still returns the first batch whole (KIP-74), so 1 asks for
	// one batch.
	MaxBytes int32
	// MaxWait is how long the leader may wait for MaxBytes (0: it answers
	// at once with what it has).
	MaxWait time.Duration
	// ReadCommitted fetches up to the last stable offset, with the
	// aborted transactions listed, instead of up to the high watermark.
	ReadCommitted bool
}

// Fetch asks broker leader for p from offset from, and returns the
// partition's answer as it came: its error code, high watermark, last
// stable offset, log start offset and record batches. An error is one
// of the request or of the whole answer, never the partition's.
func Fetch(ctx context.Context, cl *kgo.Client, leader int32, p Partition, from int64, o Opts) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(o.MaxWait / time.Millisecond)
	req.MaxBytes = o.MaxBytes
	req.SessionEpoch = -1 // a full fetch outside any fetch session
	if o.ReadCommitted {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = p.Topic, p.TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.Partition, from, o.MaxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return nil, fmt.Errorf("fetch %s from %d: %w", p, from, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch %s from %d: %w", p, from, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch %s from %d: answered for %d topics", p, from, len(resp.Topics))
	}
	return &resp.Topics[0].Partitions[0], nil
}

// Records decodes the answer of a fetch of p from offset from as a
// client of that isolation would deliver its records, control records
// kept, and returns them with the offset after the batches the answer
// held (from when it held none). A partition error in the answer is
// returned as the error.
func Records(p Partition, from int64, readCommitted bool, answer *kmsg.FetchResponseTopicPartition) ([]*kgo.Record, int64, error) {
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true, Offset: from, IsolationLevel: iso, Topic: p.Topic, Partition: p.Partition,
	}, answer, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return nil, 0, fp.Err
	}
	return fp.Records, next, nil
}

// Topic asks a broker for topic's metadata and returns the topic's entry
// in the answer. The entry's error code is the error (an answer without
// the topic is UNKNOWN_TOPIC_OR_PARTITION), so errors.Is tells a topic
// that does not exist, or has no leaders yet, from a failed request.
func Topic(ctx context.Context, cl *kgo.Client, topic string) (*kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of topic %q: %w", topic, err)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return t, fmt.Errorf("metadata of topic %q: %w", topic, err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("metadata of topic %q: %w", topic, kerr.UnknownTopicOrPartition)
}
