package main

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector/kafka/registry"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// avroSerializer is the section's serializer against an in-process fake
// registry.
func avroSerializer(t *testing.T, topic string) (*srfake.Registry, *registry.AvroSerializer[avroEvent]) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	c, err := registry.NewClient(registry.WithURLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ser, err := registry.NewAvroSerializer[avroEvent](context.Background(), c, topic, avroEventSchema, registry.WithAutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	return reg, ser
}

// Rule: the verifier reads the id of an Avro value from the bytes after
// the 5-byte wire-format header, as the whole record decodes it, and
// refuses what is not an Avro value of the section.
func TestAvroIDReadsTheIdAfterTheWireFormatHeader(t *testing.T) {
	_, ser := avroSerializer(t, "in")
	schema, err := parseAvroSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{0, 1, 63, 64, 8191, 8192, 1_999_999, 1 << 40} {
		v, err := ser.Encode(newAvroEvent(id))
		if err != nil {
			t.Fatal(err)
		}
		if got := avroID(v); got != id {
			t.Fatalf("id %d: avroID gave %d", id, got)
		}
		var e avroEvent
		if err := avro.Unmarshal(schema, v[5:], &e); err != nil || e.ID != id {
			t.Fatalf("id %d: the whole record decodes to id %d (%v)", id, e.ID, err)
		}
	}
	raw := appendPayload(nil, 42, 100, nil)
	for name, v := range map[string][]byte{
		"raw payload":    raw,
		"empty":          nil,
		"header only":    {0, 0, 0, 0, 1},
		"wrong magic":    {1, 0, 0, 0, 1, 2},
		"varint cut off": {0, 0, 0, 0, 1, 0x80},
	} {
		if got := avroID(v); got != -1 {
			t.Fatalf("%s: avroID gave %d, want -1", name, got)
		}
	}
}

// Rule: the section's Avro input is of about the raw input's size (100
// B), so the two passthroughs move as many bytes.
func TestAvroInputIsAboutTheRawSize(t *testing.T) {
	_, ser := avroSerializer(t, "in")
	const n = 10_000
	var total int
	for id := range int64(n) {
		v, err := ser.Encode(newAvroEvent(id))
		if err != nil {
			t.Fatal(err)
		}
		total += len(v)
	}
	if mean := float64(total) / n; mean < 85 || mean > 115 {
		t.Fatalf("mean Avro value %.1f B, want about 100", mean)
	}
}

// Rule: on an Avro dataset the watcher's tally and the verifier count
// distinct ids, duplicates and missing ids of Avro values.
func TestAvroTallyAndVerifierCountIds(t *testing.T) {
	_, ser := avroSerializer(t, "out")
	ds := &dataset{name: "Avro", topic: "in", records: 100, avro: true}
	tl := newTally(ds, false)
	for id := range int64(100) {
		v, err := ser.Encode(newAvroEvent(id))
		if err != nil {
			t.Fatal(err)
		}
		tl.add(nil, v)
		if id%10 == 0 {
			tl.add(nil, v) // a duplicate counts once
		}
		if id == 98 && tl.complete() {
			t.Fatal("complete before the last id")
		}
	}
	tl.add(nil, appendPayload(nil, 5, 100, nil)) // a raw value is no id
	if tl.covered() != 100 || !tl.complete() {
		t.Fatalf("covered %d, complete %v; want 100, true", tl.covered(), tl.complete())
	}
	if got := ds.id(appendPayload(nil, 7, 100, nil)); got != -1 {
		t.Fatalf("a raw value on an Avro dataset gave id %d", got)
	}
	if got := (&dataset{}).id(appendPayload(nil, 7, 100, nil)); got != 7 {
		t.Fatalf("a raw value on a raw dataset gave id %d", got)
	}
}

// The Avro passthrough child, in process on kfake with an in-process
// registry: its read_committed output is every input id once, in the
// wire format, and its key is the id as the raw input's is.
func TestSplitflowAvroPassthroughIsExactOnKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	reg, ser := avroSerializer(t, "events")
	const partitions = 3
	ds := &dataset{name: "Avro", topic: "events", records: 5000, avro: true}
	if err := prefillWith(ctx, seeds, adm, ds, partitions, func(id int64) ([]byte, error) {
		return ser.Encode(newAvroEvent(id))
	}); err != nil {
		t.Fatal(err)
	}
	if err := createTopic(ctx, adm, "copies", partitions); err != nil {
		t.Fatal(err)
	}
	w, err := newWatcher(seeds, "copies", ds, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runSplitflowAvro(jctx, seeds, "events", "copies", 2, "exactly-once", 50*time.Millisecond, reg.URL())
	}()
	select {
	case <-w.completed:
	case err := <-done:
		t.Fatalf("the job ended before its output was complete: %v", err)
	case <-ctx.Done():
		t.Fatal("output not complete in time")
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("job stopped with: %v", err)
	}
	v, err := verify(ctx, seeds, "copies", ds, false)
	if err != nil {
		t.Fatal(err)
	}
	if !v.exact {
		t.Fatalf("output: %s", v)
	}
	recs, err := committed.Read(ctx, seeds, "copies")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if len(r.Key) != 8 || int64(binary.BigEndian.Uint64(r.Key)) != avroID(r.Value) {
			t.Fatalf("record of id %d has key %x, want the id as 8 big-endian bytes", avroID(r.Value), r.Key)
		}
	}
}

// Rule: every Avro row is exactly-once, read with read_committed, and
// has a raw row at its checkpoint interval to be measured against.
func TestAvroRowsHaveARawRowAtTheirInterval(t *testing.T) {
	raw := map[string]bool{}
	for _, s := range avroSystems() {
		sp := s.Spec()
		if !s.Available() || sp.Guarantee != "exactly-once" || !sp.ReadCommitted {
			t.Fatalf("%s %s: available %v, guarantee %s, read_committed %v", sp.Label(), sp.Workload, s.Available(), sp.Guarantee, sp.ReadCommitted)
		}
		switch sp.Workload {
		case passthrough:
			raw[sp.Interval] = true
		case avroPassthrough:
			if !raw[sp.Interval] {
				t.Fatalf("%s: no raw row at %s before it", sp.Label(), sp.Interval)
			}
		default:
			t.Fatalf("%s: workload %s", sp.Label(), sp.Workload)
		}
	}
}

// Rule: the avro table gives each Avro row's ratio to the raw row at the
// same interval, and says when the goal is missed.
func TestAvroMarkdownRatioAgainstRawAtTheSameInterval(t *testing.T) {
	c, err := parseFlags([]string{"--avro-records", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	rawDS, avDS := &dataset{name: "100 B"}, &dataset{name: "Avro", avro: true}
	row := func(s System, ds *dataset, rate, cpu float64) *throughputRow {
		return &throughputRow{spec: s.Spec(), ds: ds, sys: s, runs: []runResult{{rate: rate, cpuPerM: cpu, verdict: verdict{exact: true, distinct: 1000, total: 1000}}}}
	}
	r := &results{cfg: c, avro: []*throughputRow{
		row(splitflow(passthrough, "exactly-once", 100*time.Millisecond), rawDS, 1000, 2),
		row(splitflowAvro(100*time.Millisecond), avDS, 500, 4),
		row(splitflow(passthrough, "exactly-once", time.Second), rawDS, 1000, 2),
		row(splitflowAvro(time.Second), avDS, 900, 3),
	}}
	var b strings.Builder
	r.avroMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"- Avro at checkpoint 100 ms: 0.50x the raw passthrough's records/s at 2.00x its CPU per record (goal at least 0.8x: NOT met)",
		"- Avro at checkpoint 1 s: 0.90x the raw passthrough's records/s at 1.50x its CPU per record (goal at least 0.8x: met)",
	} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
}
