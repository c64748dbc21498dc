package main

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The measuring window of a throughput run starts at the first sight of
// output and leaves out the input that all the output visible then
// covers. An exactly-once system's first commit can make most of the input
// visible at once while the first fetch returns only part of it; counting
// that fetch alone put input the system had already processed into the
// window, and a wordcount row showed 0.00 CPU seconds per million records.

type outRec struct {
	part    int32
	offset  int64
	control bool
	key     []byte
	value   []byte
}

func countUpdate(part int32, offset int64, word string, n int64) outRec {
	return outRec{part: part, offset: offset, key: []byte(word), value: binary.BigEndian.AppendUint64(nil, uint64(n))}
}

func marker(part int32, offset int64) outRec {
	return outRec{part: part, offset: offset, control: true}
}

func feed(p *progress, fetch []outRec) {
	for _, r := range fetch {
		p.record(r.part, r.offset, r.control, r.key, r.value)
	}
	p.fetched()
}

func TestFirstVisibleOutputCountsPastTheFirstFetch(t *testing.T) {
	// 100 input records of one word each: w000 50 times (its updates go
	// to partition 0), w001 50 times (partition 1).
	words := make([]int64, vocabulary)
	words[0], words[1] = 50, 50
	ds := &dataset{records: 100, words: words}
	updates := func(part int32, word string, from, to int64, offset0 int64) []outRec {
		var out []outRec
		for n := from; n <= to; n++ {
			out = append(out, countUpdate(part, offset0+n-from, word, n))
		}
		return out
	}
	// At first sight the first transaction is committed: 20 updates of
	// w000 and 10 of w001, each partition ending with its marker.
	snap := map[int32]int64{0: 21, 1: 11}
	p := newProgress(ds, true)
	p.start(snap)
	feed(p, updates(0, "w000", 1, 10, 0)) // the first fetch: half of partition 0
	second := append(updates(0, "w000", 11, 20, 10), marker(0, 20))
	second = append(second, updates(1, "w001", 1, 10, 0)...)
	second = append(second, marker(1, 10))
	second = append(second, updates(1, "w001", 11, 30, 11)...) // committed later
	feed(p, second)
	if got := p.firstCovered(); got != 30 {
		t.Fatalf("covered at first sight: %d input records, want 30", got)
	}
	if p.complete() {
		t.Fatal("complete before every word reached its count")
	}
	rest := append(updates(0, "w000", 21, 50, 21), updates(1, "w001", 31, 50, 31)...)
	feed(p, rest)
	if !p.complete() {
		t.Fatal("not complete with every word at its count")
	}
	if got := p.firstCovered(); got != 30 {
		t.Fatalf("covered at first sight changed to %d after it was final", got)
	}
}

func TestFirstVisibleOutputWithoutOffsetsIsTheFirstFetch(t *testing.T) {
	ds := &dataset{records: 10}
	p := newProgress(ds, false)
	p.start(nil) // the committed offsets could not be listed
	id := func(part int32, off, n int64) outRec {
		return outRec{part: part, offset: off, value: appendPayload(nil, n, 100, nil)}
	}
	feed(p, []outRec{id(0, 0, 0), id(0, 1, 1), id(0, 2, 2)})
	var later []outRec
	for n := int64(3); n < 10; n++ {
		later = append(later, id(0, n, n))
	}
	feed(p, later)
	if got := p.firstCovered(); got != 3 {
		t.Fatalf("covered at first sight: %d, want the first fetch's 3", got)
	}
	if !p.complete() {
		t.Fatal("every id seen but not complete")
	}
}

func TestPassthroughFirstVisibleOutput(t *testing.T) {
	ds := &dataset{records: 10}
	p := newProgress(ds, false)
	p.start(map[int32]int64{0: 7}) // ids 0..5 and a marker committed
	rec := func(off, n int64) outRec { return outRec{offset: off, value: appendPayload(nil, n, 100, nil)} }
	feed(p, []outRec{rec(0, 0), rec(1, 1)})
	feed(p, []outRec{rec(2, 2), rec(3, 3), rec(4, 4), rec(5, 5), marker(0, 6), rec(7, 6)})
	feed(p, []outRec{rec(8, 7), rec(9, 8), rec(10, 9), marker(0, 11)})
	if got := p.firstCovered(); got != 6 || !p.complete() {
		t.Fatalf("covered at first sight %d (want 6), complete %v", got, p.complete())
	}
}

// The watcher on a real protocol (kfake): what a committed transaction made
// visible before the watcher first saw output counts as covered at first
// sight, transaction markers included in its positions; what a later
// transaction commits does not.
func TestWatcherFirstSightOnTransactionalOutput(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx := context.Background()
	// Small batches, and a watcher that fetches about one at a time, so
	// the first fetch returns only part of what is visible.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("bench-test"), kgo.DefaultProduceTopic("out"),
		kgo.ProducerBatchMaxBytes(2<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const first, total = 4000, 5000
	ds := &dataset{records: total}
	writeTxn := func(from, to int64) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for id := from; id < to; id++ {
			cl.Produce(ctx, &kgo.Record{Key: binary.BigEndian.AppendUint64(nil, uint64(id)), Value: appendPayload(nil, id, 100, nil)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	writeTxn(0, first)
	w, err := newWatcher(seeds, "out", ds, false, kgo.FetchMaxBytes(1<<10), kgo.FetchMaxPartitionBytes(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wait := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not seen within 30s", what)
		}
	}
	wait(w.first, "first output")
	writeTxn(first, total)
	wait(w.completed, "complete output")
	if w.firstN != first {
		t.Fatalf("covered at first sight: %d records, want the %d of the transaction committed before it", w.firstN, first)
	}
}
