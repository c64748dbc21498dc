package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
)

// Records crossing a shuffle in batches come out as they went in: per
// partition in emission order, each with its own timestamp (none
// included), a batch emitted when full, at a barrier and at the end of
// input, nothing left buffered at a barrier.
func TestShuffleBatchesKeepEveryRecordOrderAndTimestamp(t *testing.T) {
	serde := DefaultSerde[string]()
	batches := &winOut[ShuffleRecord]{}
	part := func(v string) int32 { return int32(len(v) % 3) }
	enc := newShuffleBatchOperator(opInfo{}, "c", 3, serde.Append, part, output[ShuffleRecord](batches))
	var in []string
	var ts []int64
	for i := range 20000 {
		v := strings.Repeat("x", i%7) + fmt.Sprint(i)
		at := int64(i * 10)
		if i%11 == 0 {
			at = connector.NoTimestamp
		}
		in, ts = append(in, v), append(ts, at)
		if err := enc.collect(v, at); err != nil {
			t.Fatal(err)
		}
		if i == 10000 {
			if err := enc.prepareSnapshotPreBarrier(1); err != nil {
				t.Fatal(err)
			}
			if len(enc.pending) != 0 {
				t.Fatalf("partitions %v still buffered after a barrier", enc.pending)
			}
		}
	}
	if err := enc.emitWatermark(77); err != nil || len(batches.wms) != 1 {
		t.Fatalf("watermark not passed on: %v %v", batches.wms, err)
	}
	if err := enc.endInput(); err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, b := range batches.vals {
		if len(b.Value) >= shuffleBatchBytes {
			full++
		}
		if len(b.Value) > shuffleBatchBytes+64 {
			t.Fatalf("a batch of %d bytes, the bound is %d", len(b.Value), shuffleBatchBytes)
		}
	}
	if full == 0 || len(batches.vals) < 6 {
		t.Fatalf("%d batches, %d full: the input should fill several", len(batches.vals), full)
	}

	got := map[int32]*winOut[string]{}
	for _, b := range batches.vals {
		o := got[b.Partition]
		if o == nil {
			o = &winOut[string]{}
			got[b.Partition] = o
		}
		dec := &shuffleUnbatchOperator[string]{channel: "c", decode: serde.Decode, out: o}
		if err := dec.collect(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	for p := range int32(3) {
		var wantV []string
		var wantTs []int64
		for i, v := range in {
			if part(v) == p {
				wantV, wantTs = append(wantV, v), append(wantTs, ts[i])
			}
		}
		o := got[p]
		if o == nil || fmt.Sprint(o.vals) != fmt.Sprint(wantV) || fmt.Sprint(o.ts) != fmt.Sprint(wantTs) {
			t.Fatalf("partition %d: records or timestamps differ from what went in", p)
		}
	}

	// Bytes that are not a batch fail the decoding, naming the channel.
	dec := &shuffleUnbatchOperator[string]{channel: "c", decode: serde.Decode, out: &winOut[string]{}}
	for _, bad := range [][]byte{nil, {9}, {shuffleBatchV1, 5}, {shuffleBatchV1, 5, 0, 'a'}} {
		if err := dec.collect(ShuffleRecord{Value: bad}, 0); !errors.Is(err, errShuffleBatch) || !strings.Contains(err.Error(), "shuffle c") {
			t.Errorf("%v decoded: %v", bad, err)
		}
	}
}
