// Package kfetch sends single fetch requests of one partition, outside
// any consumer and fetch session, for the readers that must know how far
// a fetch went even when it delivered nothing: a bounded split probing
// whether anything is left before its stop (connector/kafka), and the
// read_committed verifier reading to the last stable offsets
// (integration/committed). A consumer's position moves only with the
// records it delivers; a fetch answer says how far its batches went.
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
