package kfetch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A fetch answers with the partition's offsets and batches; Records
// decodes them as a client would and says where the next fetch starts,
// past the batches whether or not they held anything to deliver; a fetch
// past the end is the partition's error, not the request's.
func TestFetchSaysHowFarItWent(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []string{"a", "b", "c"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	p := Partition{Topic: "t", TopicID: td["t"].ID, Partition: 0}
	leader := td["t"].Partitions[0].Leader

	answer, err := Fetch(ctx, cl, leader, p, 1, Opts{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if answer.HighWatermark != 3 || answer.LastStableOffset != 3 {
		t.Fatalf("high watermark %d, last stable offset %d; want 3 and 3", answer.HighWatermark, answer.LastStableOffset)
	}
	recs, next, err := Records(p, 1, false, answer)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Value) != "b" || recs[1].Offset != 2 || next != 3 {
		t.Fatalf("records %v, next %d; want b and c (offsets 1 and 2), next 3", recs, next)
	}

	answer, err = Fetch(ctx, cl, leader, p, 3, Opts{MaxBytes: 1 << 20, ReadCommitted: true})
	if err != nil {
		t.Fatal(err)
	}
	if recs, next, err := Records(p, 3, true, answer); err != nil || len(recs) != 0 || next != 3 {
		t.Fatalf("at the end: %d records, next %d, %v; want none, next 3", len(recs), next, err)
	}

	answer, err = Fetch(ctx, cl, leader, p, 10, Opts{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatalf("a fetch past the end failed as a request: %v", err)
	}
	if _, _, err := Records(p, 10, false, answer); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("past the end: %v, want OFFSET_OUT_OF_RANGE", err)
	}
}
