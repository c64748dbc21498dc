package kafkatest

import (
	"context"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// HangCommit leaves partition 0 of topic (of two partitions or more)
// holding open a transaction of id that its coordinator committed: the
// state a broker leaves when it loses a commit marker (the partition had
// no leader when the coordinator sent it; txn.HangingCommit). It returns
// the transaction's producer id and epoch.
//
// The transaction registers partition 1 only, and writes values to
// partition 0 with the broker's verification of transactional produces
// turned off for the while, so that the coordinator never hears of
// partition 0; the commit then writes its marker to partition 1 alone. The
// verification is turned off broker-wide: no other test may write
// transactions at the same time.
func (b *Broker) HangCommit(t testing.TB, id, topic string, values ...string) (producerID int64, epoch int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := b.Admin(t)
	const verification = "transaction.partition.verification.enable"
	setVerification := func(op kadm.IncrementalOp, v string) error {
		rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: verification, Value: &v}})
		if err == nil {
			for _, r := range rs {
				err = errors.Join(err, r.Err)
			}
		}
		return err
	}
	if err := setVerification(kadm.SetConfig, "false"); err != nil {
		t.Fatalf("kafkatest: turn %s off: %v", verification, err)
	}
	defer func() {
		if err := setVerification(kadm.DeleteConfig, ""); err != nil {
			t.Errorf("kafkatest: turn %s back on: %v", verification, err)
		}
	}()

	// The requests of a client from before transaction protocol v2, which
	// registers the partitions of a transaction itself.
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(0, 11) // Produce
	vs.SetMaxKeyVersion(22, 4) // InitProducerID
	vs.SetMaxKeyVersion(24, 3) // AddPartitionsToTxn
	old := b.Client(t, kgo.MaxVersions(vs))

	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 60000
	if err := retryTxn(ctx, func() (int16, error) {
		r, err := init.RequestWith(ctx, old)
		if err != nil {
			return 0, err
		}
		producerID, epoch = r.ProducerID, r.ProducerEpoch
		return r.ErrorCode, nil
	}); err != nil {
		t.Fatalf("kafkatest: init the producer id of %s: %v", id, err)
	}

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, producerID, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = topic, []int32{1}
	add.Topics = append(add.Topics, at)
	if err := retryTxn(ctx, func() (int16, error) {
		r, err := add.RequestWith(ctx, old)
		if err != nil {
			return 0, err
		}
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					return rp.ErrorCode, nil
				}
			}
		}
		return 0, nil
	}); err != nil {
		t.Fatalf("kafkatest: add %s[1] to the transaction of %s: %v", topic, id, err)
	}

	produce := kmsg.NewPtrProduceRequest()
	produce.TransactionID, produce.Acks, produce.TimeoutMillis = &id, -1, 30000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = topic
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition, pp.Records = 0, transactionalBatch(producerID, epoch, values...)
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	// The broker applies a changed setting a moment later: until then it
	// verifies the produce with the coordinator, which refuses it, and
	// writes nothing. A topic just created may not have its leader yet
	// (NOT_LEADER_FOR_PARTITION, retriable): nothing is written either.
	for {
		resp, err := produce.RequestWith(ctx, old)
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		}
		if err == nil {
			break
		}
		again := errors.Is(err, kerr.TransactionAbortable) || errors.Is(err, kerr.InvalidTxnState) || kerr.IsRetriable(err)
		if !again || ctx.Err() != nil {
			t.Fatalf("kafkatest: produce to %s[0] in the transaction of %s: %v", topic, id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, producerID, epoch, true
	if err := retryTxn(ctx, func() (int16, error) {
		r, err := end.RequestWith(ctx, b.Client(t))
		if err != nil {
			return 0, err
		}
		return r.ErrorCode, nil
	}); err != nil {
		t.Fatalf("kafkatest: commit the transaction of %s: %v", id, err)
	}
	return producerID, epoch
}

// retryTxn repeats a transactional request while the coordinator is loading,
// moving, or ending an earlier transaction.
func retryTxn(ctx context.Context, do func() (int16, error)) error {
	for {
		code, err := do()
		if err == nil {
			err = kerr.ErrorForCode(code)
		}
		if err == nil || !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// transactionalBatch encodes values as one transactional record batch of
// the producer.
func transactionalBatch(producerID int64, epoch int16, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // less the length's own varint, one byte for 0
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	batch := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, // transactional
		LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: producerID, ProducerEpoch: epoch, NumRecords: int32(len(values)), Records: recs,
	}
	batch.Length = int32(49 + len(recs)) // everything after the length field
	enc := batch.AppendTo(nil)
	// The checksum covers everything from the attributes on.
	batch.CRC = int32(crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return batch.AppendTo(nil)
}
