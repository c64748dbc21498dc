package txn

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

// TestACommitAPartitionHoldsOpenIsFoundAndEndedWithItsMarker holds the rule
// of FindHangingCommits and EndHangingCommits: a transaction whose commit
// the coordinator completed while one of its partitions never got the
// marker is found, and once its marker is written its records are visible
// to read_committed readers. The broker loses such a marker when the
// partition has no leader as the coordinator sends it; the test makes the
// same state on purpose, with a partition the coordinator never heard of
// (a produce the broker does not verify), then commits.
func TestACommitAPartitionHoldsOpenIsFoundAndEndedWithItsMarker(t *testing.T) {
	be := backend{name: "kafka", seeds: kafkatest.Get(t).Addrs()}
	topic := be.topic(t, 2)
	id := uniquePrefix("hanging") + ":0-0"
	values := []string{"a", "b", "c"}
	pid, epoch := kafkatest.Get(t).HangCommit(t, id, topic, values...)
	c := Committable{TransactionalID: id, ProducerID: pid, Epoch: epoch}
	cl := be.client(t)
	ctx := ctxT(t)

	// The commit's marker to partition 1 may still be on its way: until it
	// is written, the transaction is pending.
	var hanging []HangingCommit
	var pending []Committable
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		hanging, pending, err = FindHangingCommits(ctx, cl, []Committable{c}, []string{topic})
		if err != nil {
			t.Fatalf("find: %v", err)
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(hanging) != 1 || len(pending) != 0 {
		t.Fatalf("found hanging %v and pending %v, want the commit open in %s[0]", hanging, pending, topic)
	}
	h := hanging[0]
	if h.Committable != c || h.Topic != topic || h.Partition != 0 || h.FirstOffset != 0 {
		t.Fatalf("found %v, want %v open in %s[0] from offset 0", h, c, topic)
	}
	if got := lastStable(t, cl, topic, 0); got != 0 {
		t.Fatalf("the last stable offset of %s[0] is %d before the marker, want 0 (held by the open transaction)", topic, got)
	}

	if err := EndHangingCommits(ctx, cl, hanging); err != nil {
		t.Fatalf("end: %v", err)
	}
	if hanging, pending, err = FindHangingCommits(ctx, cl, []Committable{c}, []string{topic}); err != nil || len(hanging)+len(pending) != 0 {
		t.Fatalf("after the marker: hanging %v, pending %v, err %v; want none", hanging, pending, err)
	}
	if got := be.committed(t, topic); !slices.Equal(got, values) {
		t.Fatalf("read_committed reads %q after the marker, want %q", got, values)
	}
}

// TestATransactionItsCoordinatorHasNotEndedIsPendingNotHanging: an open
// transaction whose coordinator still has it under way is never ended with
// a marker; it is pending.
func TestATransactionItsCoordinatorHasNotEndedIsPendingNotHanging(t *testing.T) {
	be := backend{name: "kafka", seeds: kafkatest.Get(t).Addrs()}
	topic := be.topic(t, 1)
	c := abandonTxn(t, be, uniquePrefix("pending")+":0-0", topic, "x")
	hanging, pending, err := FindHangingCommits(ctxT(t), be.client(t), []Committable{c}, []string{topic})
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	if len(hanging) != 0 || !slices.Equal(pending, []Committable{c}) {
		t.Fatalf("found hanging %v and pending %v, want %v pending", hanging, pending, c)
	}
	if err := Abort(ctxT(t), be.client(t), c); err != nil {
		t.Fatalf("abort: %v", err)
	}
}

// lastStable returns the last stable offset of topic's partition.
func lastStable(t *testing.T, cl *kgo.Client, topic string, partition int32) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 1 // read_committed
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatal(err)
	}
	return p.Offset
}

// TestEndedEpochNamesTheEndOnlyOnceTheCoordinatorMovedOn holds the
// protocol v2 rule of endedEpoch: a transaction of epoch e has ended once
// its id's coordinator is past e+1, at e+1 and no longer preparing, or
// under another producer id; its marker carries e+1. The coordinator at e
// or below, or not answering, tells nothing.
func TestEndedEpochNamesTheEndOnlyOnceTheCoordinatorMovedOn(t *testing.T) {
	c := Committable{TransactionalID: "p:0-0", ProducerID: 7, Epoch: 4}
	for _, tc := range []struct {
		name  string
		d     kadm.DescribedTransaction
		ok    bool
		epoch int16
		ended bool
	}{
		{"no answer", kadm.DescribedTransaction{}, false, 0, false},
		{"an error", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 9, Err: kerr.CoordinatorLoadInProgress}, true, 0, false},
		{"still at its epoch", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 4, State: "CompleteCommit"}, true, 0, false},
		{"at e+1, preparing", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 5, State: "PrepareCommit"}, true, 5, false},
		{"at e+1, complete", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 5, State: "CompleteCommit"}, true, 5, true},
		{"at e+1, the next one under way", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 5, State: "Ongoing"}, true, 5, true},
		{"past e+1, preparing", kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 6, State: "PrepareAbort"}, true, 5, true},
		{"another producer id", kadm.DescribedTransaction{ProducerID: 8, ProducerEpoch: 0, State: "Ongoing"}, true, 5, true},
	} {
		epoch, ended := endedEpoch(tc.d, tc.ok, c)
		if ended != tc.ended || ended && epoch != tc.epoch {
			t.Errorf("%s: ended %v at %d, want %v at %d", tc.name, ended, epoch, tc.ended, tc.epoch)
		}
	}
	last := Committable{ProducerID: 7, Epoch: math.MaxInt16}
	if epoch, ended := endedEpoch(kadm.DescribedTransaction{ProducerID: 8}, true, last); !ended || epoch != math.MaxInt16 {
		t.Errorf("the last epoch: ended %v at %d, want its marker at the same epoch", ended, epoch)
	}
}
