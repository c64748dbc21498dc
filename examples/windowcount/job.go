package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
)

// windowCount is one output record: a user's count in one window.
type windowCount = window.Result[string, int64]

// lateEvents is the window's side output of the events later than the
// allowed lateness.
var lateEvents = runtime.NewOutputTag[event]("late-events")

// boundedPerEvent is watermark.ForBoundedOutOfOrderness's watermark (the
// largest event time seen minus the bound minus 1 ms), emitted after
// every event that advances it instead of every auto-watermark interval.
// The engine's strategy emits on a wall-clock period, so the watermark an
// event meets depends on how far the reader got between two periods: a
// whole bounded input can be read before the first one, and no event is
// late. Emitted per event, it depends on the order of the events alone,
// which is what lets the verifier say which events are late. The cost is
// a watermark, and so a network batch, per event that advances it.
type boundedPerEvent struct {
	delay int64
	max   int64
	seen  bool
}

func (g *boundedPerEvent) OnEvent(_ event, ts int64, out watermark.Output) {
	if !g.seen || ts > g.max {
		g.max, g.seen = ts, true
		out.EmitWatermark(ts - g.delay - 1)
	}
}

func (g *boundedPerEvent) OnPeriodicEmit(watermark.Output) {}

// runJob builds and runs the pipeline: KafkaSource (bounded at the input's
// end offsets) -> keyBy user -> tumbling event-time windows -> count ->
// KafkaSink, and the window's late events -> another KafkaSink, both
// exactly-once. The source and the failure injection run with
// sourcePar subtasks, at most the input's partitions: a source subtask
// without a partition would hold the watermark back until it learns it
// gets none, which makes lateness depend on timing.
func runJob(ctx context.Context, o options, seeds []string, sourcePar int, p *progress, logger *slog.Logger) error {
	ru := o.rules()
	job := *o.job
	job.Brokers = seeds
	src, err := kafka.NewSource(kafka.ValueDeserializer(parseEvent), job.SourceOpts(
		kafka.WithTopics(o.inputTopic), kafka.WithLogger(logger), kafka.WithBounded(kafka.LatestOffsets()), kafka.WithSkipBadRecords())...)
	if err != nil {
		return err
	}
	sinkOpts := func(suffix string) []kafka.SinkOption {
		return job.SinkOpts(kafka.WithLogger(logger),
			kafka.WithExactlyOnce(o.txnPrefix+"-"+suffix))
	}
	countsSink, err := kafka.NewSink(kafka.KeyValueSerializer(o.outputTopic, func(wc windowCount) ([]byte, []byte, error) {
		return []byte(wc.Key), fmt.Appendf(nil, "%d %d %d", wc.Window.Start, wc.Window.End, wc.Value), nil
	}), sinkOpts("counts")...)
	if err != nil {
		return err
	}
	lateSink, err := kafka.NewSink(kafka.KeyValueSerializer(o.lateTopic, func(e event) ([]byte, []byte, error) {
		return []byte(e.User), []byte(e.Raw), nil
	}), sinkOpts("late")...)
	if err != nil {
		return err
	}

	envOpts, err := examplejob.EnvOptions(&job, logger, p.failures, &p.checkpoints, &p.restarts)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(envOpts...)

	watermarks := watermark.ForGenerator(func() watermark.Generator[event] {
		return &boundedPerEvent{delay: ru.outOfOrderness}
	}).WithTimestampAssigner(func(e event, _ int64) int64 { return e.At })
	events := runtime.FromSource(env, src, "events", runtime.WithWatermarks(watermarks)).UID("events").Parallelism(sourcePar)
	checked := runtime.Map(events, func(e event) (event, error) {
		n := p.events.Add(1)
		if p.failures.Fail() {
			return e, fmt.Errorf("injected failure at event %d (--fail-every %d)", n, o.failEvery)
		}
		return e, nil
	}).Name("check").UID("check").Parallelism(sourcePar)

	byUser := runtime.KeyBy(checked, func(e event) string { return e.User })
	counts := runtime.WindowCount(runtime.Window(byUser, window.Tumbling(o.window),
		runtime.WithAllowedLateness(o.allowedLateness), runtime.WithSideOutputLateRecords(lateEvents))).Name("window-count").UID("window-count")
	written := runtime.Map(counts, func(wc windowCount) (windowCount, error) {
		p.emissions.Add(1)
		return wc, nil
	}).Name("tally").UID("tally")
	runtime.SinkTo(written, countsSink).Name("window-counts").UID("window-counts-sink")
	runtime.SinkTo(runtime.SideOutput(counts, lateEvents), lateSink).Name("late-events").UID("late-events-sink")
	if err := env.Execute(ctx, "windowcount"); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}
