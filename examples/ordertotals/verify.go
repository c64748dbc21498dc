package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// winKey is one window of one customer.
type winKey struct {
	Customer string
	Start    int64
}

// where is an input record's place: partition and offset.
type where struct {
	Partition int32
	Offset    int64
}

// expectation is what the job must write for an input.
type expectation struct {
	totals map[winKey]sum
	// dead: the input records no deserializer reads, by place, with
	// their values.
	dead           map[where][]byte
	orders, v1, v2 int
}

// expect reads the input as the job does (into the reader schema, v2) and
// sums every customer's orders per window of size ms. No order is late:
// the generator writes none more than the out-of-orderness behind the
// latest one before it. It also tells v1 from v2 records by reading each
// with its writer's schema. A registry it cannot reach is an error.
func expect(input []*kgo.Record, reg *registry.Client, size int64) (expectation, error) {
	x := expectation{totals: map[winKey]sum{}, dead: map[where][]byte{}}
	reader := registry.NewAvroDeserializer[Order](reg, readerSchema)
	asWritten := registry.NewAvroDeserializer[map[string]any](reg, nil)
	for _, r := range input {
		o, err := reader.Decode(r.Value)
		if errors.Is(err, registry.ErrUnavailable) {
			return x, fmt.Errorf("read input %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if err != nil {
			x.dead[where{r.Partition, r.Offset}] = r.Value
			continue
		}
		x.orders++
		if m, err := asWritten.Decode(r.Value); err == nil {
			if _, ok := m["currency"]; ok {
				x.v2++
			} else {
				x.v1++
			}
		}
		k := winKey{o.Customer, windowStart(o.TS, size)}
		s := x.totals[k]
		x.totals[k] = sum{Orders: s.Orders + 1, AmountCents: s.AmountCents + o.AmountCents}
	}
	return x, nil
}

// report is what verification found.
type report struct {
	totals, dead int
	diffs        []string
}

func (r report) ok() bool { return len(r.diffs) == 0 }

// check compares the totals and dead letters with x: every window's total
// is x's, written once, under its customer's key; the dead-letter topic
// holds each undecodable input record once, as it came, with headers
// naming its place. Partial (a run stopped before the end of its input):
// windows and dead letters may be missing, but what was written is exact.
func check(x expectation, out, dlq []*kgo.Record, reg *registry.Client, size int64, partial bool) report {
	var rep report
	diff := func(format string, args ...any) { rep.diffs = append(rep.diffs, fmt.Sprintf(format, args...)) }
	totals := registry.NewAvroDeserializer[Total](reg, avro.MustParse(totalSchema))
	seen := map[winKey]int{}
	for _, r := range out {
		t, err := totals.Decode(r.Value)
		if err != nil {
			diff("output %s/%d@%d: not a shop.Total: %v", r.Topic, r.Partition, r.Offset, err)
			continue
		}
		k := winKey{t.Customer, t.WindowStart}
		if string(r.Key) != t.Customer {
			diff("total %s %s: key %q, want the customer", t.Customer, windowText(k, size), r.Key)
		}
		if windowStart(t.WindowStart, size) != t.WindowStart {
			diff("total %s: window_start %d is not the start of a %dms window", t.Customer, t.WindowStart, size)
			continue
		}
		rep.totals++
		if seen[k]++; seen[k] == 2 {
			diff("total %s %s: written more than once", t.Customer, windowText(k, size))
		}
		got := sum{Orders: t.Orders, AmountCents: t.AmountCents}
		if want, ok := x.totals[k]; !ok {
			diff("total %s %s: orders=%d amount_cents=%d, but the input has no order in it", t.Customer, windowText(k, size), got.Orders, got.AmountCents)
		} else if got != want {
			diff("total %s %s: orders=%d amount_cents=%d, want orders=%d amount_cents=%d", t.Customer, windowText(k, size), got.Orders, got.AmountCents, want.Orders, want.AmountCents)
		}
	}
	if !partial {
		for _, k := range slices.SortedFunc(maps.Keys(x.totals), func(a, b winKey) int {
			return cmp.Or(cmp.Compare(a.Customer, b.Customer), cmp.Compare(a.Start, b.Start))
		}) {
			if seen[k] == 0 {
				diff("total %s %s: missing, want orders=%d amount_cents=%d", k.Customer, windowText(k, size), x.totals[k].Orders, x.totals[k].AmountCents)
			}
		}
	}
	deadSeen := map[where]int{}
	for _, r := range dlq {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		p, perr := strconv.ParseInt(h[kafka.DeadLetterPartitionHeader], 10, 32)
		off, oerr := strconv.ParseInt(h[kafka.DeadLetterOffsetHeader], 10, 64)
		if perr != nil || oerr != nil || h[kafka.DeadLetterErrorHeader] == "" {
			diff("dead letter %s/%d@%d: headers %v do not name its place and error", r.Topic, r.Partition, r.Offset, h)
			continue
		}
		w := where{int32(p), off}
		rep.dead++
		if deadSeen[w]++; deadSeen[w] == 2 {
			diff("dead letter of input %d@%d: written more than once", w.Partition, w.Offset)
		}
		if want, ok := x.dead[w]; !ok {
			diff("dead letter of input %d@%d: that record is readable, or not in the input", w.Partition, w.Offset)
		} else if !bytes.Equal(r.Value, want) {
			diff("dead letter of input %d@%d: value %q, want %q as it came", w.Partition, w.Offset, r.Value, want)
		}
	}
	if !partial {
		for w := range x.dead {
			if deadSeen[w] == 0 {
				diff("input %d@%d: undecodable, but not in the dead-letter topic", w.Partition, w.Offset)
			}
		}
	}
	slices.Sort(rep.diffs)
	return rep
}

func windowText(k winKey, size int64) string { return fmt.Sprintf("[%d,%d)", k.Start, k.Start+size) }
