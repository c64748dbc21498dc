package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// The avro section: the exactly-once passthrough on Avro values read and
// written through the schema registry serdes, beside the same job on raw
// bytes, on the same broker in the same invocation.

// avroPassthrough is the workload of the Avro rows: KafkaSource with the
// registry's Avro deserializer into avroEvent -> KafkaSink with its Avro
// serializer. Its child kind is "splitflow-" + avroPassthrough.
const avroPassthrough = "avro-passthrough"

// avroEvent is the Avro input's record: BenchmarkAvroSerdes's 10 fields
// (connector/kafka/registry), so that the per-record figure of the serdes
// alone and this end-to-end one are of the same record, with values
// sized to about the raw input's 100 B. The id comes first, so the
// verifier reads it from the bytes after the wire-format header without
// decoding the rest.
type avroEvent struct {
	ID       int64     `avro:"id"`
	User     string    `avro:"user"`
	Session  string    `avro:"session"`
	Page     string    `avro:"page"`
	Country  string    `avro:"country"`
	Amount   float64   `avro:"amount"`
	Quantity int64     `avro:"quantity"`
	Paid     bool      `avro:"paid"`
	At       time.Time `avro:"at"`
	Coupon   *string   `avro:"coupon"`
}

const avroEventSchema = `{"type":"record","name":"Event","namespace":"splitflow.bench","fields":[
	{"name":"id","type":"long"},
	{"name":"user","type":"string"},
	{"name":"session","type":"string"},
	{"name":"page","type":"string"},
	{"name":"country","type":"string"},
	{"name":"amount","type":"double"},
	{"name":"quantity","type":"long"},
	{"name":"paid","type":"boolean"},
	{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"coupon","type":["null","string"],"default":null}]}`

var (
	avroPages = []string{
		"/shop/category/outdoor/tents?p=3", "/shop/category/kitchen/knives",
		"/shop/product/8812734/reviews", "/account/orders/2026/november",
		"/shop/category/garden/hoses?p=12", "/checkout/shipping/address/edit",
	}
	avroCountries = []string{"DE", "FR", "US", "JP", "BR", "IN"}
	avroCoupon    = "WINTER25"
	// avroEpoch is the first event's time; the event of id i is i ms later.
	avroEpoch = time.UnixMilli(1_796_000_000_000).UTC()
)

// newAvroEvent is the input's record of id: the same for the same id,
// every field drawn from it.
func newAvroEvent(id int64) avroEvent {
	x := splitmix64(uint64(id))
	e := avroEvent{
		ID:       id,
		User:     fmt.Sprintf("user-%09d", x%1_000_000_000),
		Session:  fmt.Sprintf("%016x", splitmix64(x)),
		Page:     avroPages[x%uint64(len(avroPages))],
		Country:  avroCountries[(x>>8)%uint64(len(avroCountries))],
		Amount:   float64((x>>16)%100_000) / 100,
		Quantity: int64(1 + (x>>32)%5),
		Paid:     x>>40&1 == 1,
		At:       avroEpoch.Add(time.Duration(id) * time.Millisecond),
	}
	if x>>41&3 == 0 {
		e.Coupon = &avroCoupon
	}
	return e
}

// avroID reads the id of an Avro input or output value: after the
// wire-format header (magic byte 0, a 4-byte schema id), the Avro long
// that avroEvent's first field is, a zig-zag varint (Go's binary.Varint
// is the same encoding). -1 if the value is not in the wire format or the
// varint is cut short or too long.
func avroID(v []byte) int64 {
	if len(v) < 6 || v[0] != 0 {
		return -1
	}
	id, n := binary.Varint(v[5:])
	if n <= 0 {
		return -1
	}
	return id
}

// parseAvroSchema parses the event schema into a cache of its own, as the
// registry serdes do.
func parseAvroSchema() (avro.Schema, error) {
	return avro.ParseWithCache(avroEventSchema, "", &avro.SchemaCache{})
}

// idKeys writes an event's key as the raw input does: its id as 8
// big-endian bytes, so both jobs partition their output alike. Topic is
// not used: registry.Records writes to the value serializer's topic.
type idKeys struct{}

func (idKeys) Encode(id int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(id)), nil
}
func (idKeys) Topic() string { return "" }

// runSplitflowAvro is the Avro passthrough child: in -> out through the
// engine as runSplitflow, but each value is decoded by the registry's
// Avro deserializer into avroEvent (the writer's schema fetched from the
// registry at registryURL on the first record of its id), and written
// back by its Avro serializer (its schema registered under out's value
// subject when the serializer is made), the id as the key.
func runSplitflowAvro(ctx context.Context, seeds []string, in, out string, par int, guarantee string, checkpoint time.Duration, registryURL string) error {
	if registryURL == "" {
		return errors.New("--registry is required: the schema registry's URL, which the input's writer schema is registered in")
	}
	c, err := registry.NewClient(registry.WithURLs(registryURL))
	if err != nil {
		return fmt.Errorf("--registry: %w", err)
	}
	reader, err := parseAvroSchema()
	if err != nil {
		return err
	}
	src, err := kafka.NewSource(registry.NewAvroDeserializer[avroEvent](c, reader).Values(),
		kafka.WithBrokers(seeds...), kafka.WithTopics(in),
		kafka.WithStartingOffsets(kafka.EarliestOffsets()), kafka.WithoutOffsetCommits())
	if err != nil {
		return err
	}
	ser, err := registry.NewAvroSerializer[avroEvent](ctx, c, out, avroEventSchema, registry.WithAutoRegister())
	if err != nil {
		return err
	}
	snk, err := kafka.NewSink[avroEvent](registry.Records(idKeys{}, func(e avroEvent) int64 { return e.ID }, ser),
		sinkOpts(seeds, out, guarantee)...)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts(par, checkpoint)...)
	events := runtime.FromSource(env, src, "kafka-in").UID("kafka-in")
	runtime.SinkTo(events, snk).UID("kafka-out")
	return env.Execute(ctx, "bench avro "+in+" -> "+out)
}

// avroSystems are the rows of the avro section: at each checkpoint
// interval, the raw exactly-once passthrough, then the Avro one.
func avroSystems() []System {
	var out []System
	for _, iv := range []time.Duration{100 * time.Millisecond, time.Second} {
		out = append(out, splitflow(passthrough, "exactly-once", iv), splitflowAvro(iv))
	}
	return out
}

// splitflowAvro is the Avro passthrough child, exactly-once at the
// checkpoint interval, given the driver's registry.
func splitflowAvro(interval time.Duration) System {
	spec := Spec{Name: "splitflow", Workload: avroPassthrough, Guarantee: "exactly-once",
		Interval: "checkpoint " + fmtInterval(interval), ReadCommitted: true}
	return sys{spec: spec, start: func(_ context.Context, h *harness, job Job) (*Proc, error) {
		if h.registryURL == "" {
			return nil, errors.New("no schema registry: the avro section starts one")
		}
		return h.startChild("splitflow avro", nil, "splitflow-"+avroPassthrough, job,
			"--guarantee", "exactly-once", "--checkpoint", interval.String(), "--registry", h.registryURL)
	}}
}

// runAvroSection starts an in-process schema registry (srfake, on a
// loopback port) for the section's children, prefills a raw 100 B input
// and an Avro input of as many records, and runs avroSystems: the raw
// rows on the raw input, the Avro rows on the Avro one.
func runAvroSection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	reg := srfake.New()
	defer reg.Close()
	h.registryURL = reg.URL()
	defer func() { h.registryURL = "" }()

	raw := &dataset{name: "100 B", topic: h.name("in-avro-raw"), records: cfg.avroRecords, size: 100}
	av := &dataset{name: "Avro", topic: h.name("in-avro"), records: cfg.avroRecords, avro: true}
	began := time.Now()
	if err := prefill(ctx, h.seeds, h.adm, raw, int32(cfg.partitions)); err != nil {
		return err
	}
	logf("prefilled %s with %d x %s in %s", raw.topic, raw.records, raw.name, time.Since(began).Round(time.Millisecond))
	c, err := registry.NewClient(registry.WithURLs(h.registryURL))
	if err != nil {
		return err
	}
	ser, err := registry.NewAvroSerializer[avroEvent](ctx, c, av.topic, avroEventSchema, registry.WithAutoRegister())
	if err != nil {
		return err
	}
	began = time.Now()
	err = prefillWith(ctx, h.seeds, h.adm, av, int32(cfg.partitions), func(id int64) ([]byte, error) {
		return ser.Encode(newAvroEvent(id))
	})
	if err != nil {
		return err
	}
	av.name = fmt.Sprintf("Avro, mean %.0f B", float64(av.valueBytes)/float64(av.records))
	logf("prefilled %s with %d Avro records (schema id %d under %s, mean value %.1f B with the 5-byte header) in %s",
		av.topic, av.records, ser.ID(), ser.Subject(), float64(av.valueBytes)/float64(av.records), time.Since(began).Round(time.Millisecond))

	var rows []*throughputRow
	for _, s := range avroSystems() {
		if !cfg.wants(s) {
			continue
		}
		ds := raw
		if s.Spec().Workload == avroPassthrough {
			ds = av
		}
		rows = append(rows, &throughputRow{spec: s.Spec(), ds: ds, sys: s})
	}
	res.avro = rows
	return runRows(ctx, h, rows, "avro")
}

// avroGoal is the Avro passthrough's goal: at least this share of the raw
// passthrough's records/s at the same checkpoint interval.
const avroGoal = 0.8

// avroMarkdown writes the avro table and, per checkpoint interval, the
// Avro rows against the raw ones of the same invocation.
func (r *results) avroMarkdown(b *strings.Builder) {
	if len(r.avro) == 0 {
		return
	}
	c := r.cfg
	b.WriteString("## Avro passthrough (avro)\n\n")
	fmt.Fprintf(b, "The exactly-once passthrough (KafkaSource -> KafkaSink) on %d raw 100 B records beside the same job on %d Avro records "+
		"in the Confluent wire format, read with `registry.NewAvroDeserializer` into a Go struct and written back with `registry.NewAvroSerializer` "+
		"(BenchmarkAvroSerdes's 10-field record, the id first; key the id as 8 bytes in both), against an in-process `srfake` registry. "+
		"%d partitions, parallelism %d.\n\n", c.avroRecords, c.avroRecords, c.partitions, c.parallelism)
	b.WriteString("| system | workload | input | records/s | vs raw | CPU s / M records | CPU vs raw | peak RSS MB | wall s | output (read_committed drain) |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|---|\n")
	type med struct{ rate, cpu float64 }
	raw := map[string]med{}
	for _, row := range r.avro {
		if row.spec.Workload == passthrough && len(row.runs) > 0 {
			raw[row.spec.Interval] = med{median(rates(row.runs)), median(cpus(row.runs))}
		}
	}
	whole := false
	var lines []string
	for _, row := range r.avro {
		label := row.spec.Label()
		if len(row.runs) == 0 {
			fmt.Fprintf(b, "| %s | %s | %s | failed | | | | | | %s |\n", label, row.spec.Workload, row.ds.name, oneLine(row.err))
			continue
		}
		rate, cpu := median(rates(row.runs)), median(cpus(row.runs))
		mark := ""
		for _, x := range row.runs {
			if x.whole {
				mark, whole = " †", true
			}
		}
		vsRate, vsCPU := "", ""
		if bl, ok := raw[row.spec.Interval]; ok && bl.rate > 0 && bl.cpu > 0 {
			vsRate, vsCPU = fmt.Sprintf("%.2fx", rate/bl.rate), fmt.Sprintf("%.2fx", cpu/bl.cpu)
			if row.spec.Workload == avroPassthrough {
				met := "met"
				if rate/bl.rate < avroGoal {
					met = "NOT met"
				}
				lines = append(lines, fmt.Sprintf("- Avro at %s: %.2fx the raw passthrough's records/s at %.2fx its CPU per record (goal at least %.1fx: %s)\n",
					row.spec.Interval, rate/bl.rate, cpu/bl.cpu, avroGoal, met))
			}
		}
		ver := verdicts(row)
		if row.err != nil {
			ver += "; a later run failed: " + oneLine(row.err)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f%s | %s | %.2f | %s | %.0f | %.1f | %s |\n",
			label, row.spec.Workload, row.ds.name, rate, mark, vsRate, cpu, vsCPU, median(rsss(row.runs))/(1<<20), median(walls(row.runs)), ver)
	}
	b.WriteString("\nMeasured as the throughput table is; \"vs raw\" is against the raw passthrough at the same checkpoint interval. ")
	if whole {
		b.WriteString("† measured over the whole run, process start included. ")
	}
	b.WriteString("\n\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	b.WriteString("\n")
}
