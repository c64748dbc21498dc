package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/registry"
	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// windowTotal is one window's sum for one customer.
type windowTotal = window.Result[string, sum]

// deadLetters is the source's side output of the records it cannot read.
var deadLetters = runtime.NewOutputTag[kafka.DeadLetter]("dead-letters")

// readerSchema is the job's reader schema: v2.
var readerSchema = avro.MustParse(orderV2Schema)

// runJob builds and runs the pipeline: KafkaSource of Avro orders (read
// into schema v2; bounded at the input's end offsets unless --unbounded;
// undecodable records to a side output) -> keyBy customer -> tumbling
// event-time windows -> sum -> KafkaSink of Avro totals, and the dead
// letters -> KafkaSink, both exactly-once. sourcePar is the source's
// parallelism, at most the input's partitions.
func runJob(ctx context.Context, o options, seeds []string, reg *registry.Client, sourcePar int, p *progress, logger *slog.Logger) error {
	job := *o.job
	job.Brokers = seeds
	srcOpts := []kafka.SourceOption{kafka.WithTopics(o.inputTopic), kafka.WithLogger(logger), kafka.WithDeadLetterOutput(deadLetters.ID())}
	if !o.unbounded {
		srcOpts = append(srcOpts, kafka.WithBounded(kafka.LatestOffsets()))
	}
	src, err := kafka.NewSource(registry.NewAvroDeserializer[Order](reg, readerSchema).Values(), job.SourceOpts(srcOpts...)...)
	if err != nil {
		return err
	}
	var serOpts []registry.SerdeOption
	if o.register {
		serOpts = append(serOpts, registry.WithAutoRegister())
	}
	totals, err := registry.NewAvroSerializer[Total](ctx, reg, o.outputTopic, totalSchema, serOpts...)
	if err != nil {
		return fmt.Errorf("output schema: %w", err)
	}
	sinkOpts := func(suffix string) []kafka.SinkOption {
		return job.SinkOpts(kafka.WithLogger(logger), kafka.WithExactlyOnce(o.txnPrefix+"-"+suffix))
	}
	totalsSink, err := kafka.NewSink(kafka.KeyValueSerializer(o.outputTopic, func(t windowTotal) ([]byte, []byte, error) {
		v, err := totals.Encode(Total{Customer: t.Key, WindowStart: t.Window.Start, Orders: t.Value.Orders, AmountCents: t.Value.AmountCents})
		return []byte(t.Key), v, err
	}), sinkOpts("totals")...)
	if err != nil {
		return err
	}
	dlqSink, err := kafka.NewSink(kafka.DeadLetterSerializer(o.dlqTopic), sinkOpts("dlq")...)
	if err != nil {
		return err
	}

	envOpts, err := examplejob.EnvOptions(&job, logger, p.failures, &p.checkpoints, &p.restarts)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts...)
	watermarks := watermark.ForBoundedOutOfOrderness[Order](o.outOfOrderness).
		WithTimestampAssigner(func(ord Order, _ int64) int64 { return ord.TS })
	orders := runtime.FromSource(env, src, "orders", runtime.WithWatermarks(watermarks)).UID("orders").Parallelism(sourcePar).
		DeclareSideOutputs(deadLetters)
	checked := runtime.Map(orders, func(ord Order) (Order, error) {
		n := p.orders.Add(1)
		if p.failures.Fail() {
			return ord, fmt.Errorf("injected failure at order %d (--fail-every %d)", n, o.failEvery)
		}
		return ord, nil
	}).Name("check").UID("check").Parallelism(sourcePar)
	amounts := runtime.Map(checked, func(ord Order) (keyedSum, error) {
		return keyedSum{Customer: ord.Customer, Sum: sum{Orders: 1, AmountCents: ord.AmountCents}}, nil
	}).Name("amount").UID("amount").Parallelism(sourcePar)
	byCustomer := runtime.KeyBy(amounts, func(k keyedSum) string { return k.Customer })
	sums := runtime.WindowAggregate(runtime.Window(byCustomer, window.Tumbling(o.window)), state.Aggregator[keyedSum, sum, sum]{
		Create: func() sum { return sum{} },
		Add: func(a sum, k keyedSum) sum {
			return sum{Orders: a.Orders + k.Sum.Orders, AmountCents: a.AmountCents + k.Sum.AmountCents}
		},
		Merge: func(a, b sum) sum {
			return sum{Orders: a.Orders + b.Orders, AmountCents: a.AmountCents + b.AmountCents}
		},
		Result: func(a sum) sum { return a },
	}).Name("window-sum").UID("window-sum")
	written := runtime.Map(sums, func(t windowTotal) (windowTotal, error) {
		p.totals.Add(1)
		return t, nil
	}).Name("tally").UID("tally")
	runtime.SinkTo(written, totalsSink).Name("totals").UID("totals-sink")
	runtime.SinkTo(runtime.SideOutput(orders, deadLetters), dlqSink).Name("dead-letters").UID("dead-letters-sink")
	return env.Execute(ctx, "ordertotals")
}

// keyedSum is one order's contribution to its customer's window.
type keyedSum struct {
	Customer string
	Sum      sum
}
