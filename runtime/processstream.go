package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/chainop"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// ProcessContext is what the function of Process sees: the current
// record's timestamp, the watermark, an output and side outputs (Output).
// It is valid only during the call it was passed to.
type ProcessContext[O any] struct {
	out       engine.Output[O]
	ts        int64
	err       error
	info      *engine.OpInfo
	watermark int64
	clock     func() int64 // the job's processing time (config.clock)
}

// Timestamp is the current record's event timestamp
// (connector.NoTimestamp if none).
func (c *ProcessContext[O]) Timestamp() int64 { return c.ts }

// SubtaskIndex is the subtask running the function.
func (c *ProcessContext[O]) SubtaskIndex() int { return c.info.Subtask }

// Collect emits v with the current timestamp.
func (c *ProcessContext[O]) Collect(v O) { c.CollectWithTimestamp(v, c.ts) }

// CollectWithTimestamp emits v with timestamp ts.
func (c *ProcessContext[O]) CollectWithTimestamp(v O, ts int64) {
	if c.err == nil {
		c.err = c.out.Collect(v, ts)
	}
}

// CurrentWatermark is the operator's input watermark (math.MinInt64 before
// the first one).
func (c *ProcessContext[O]) CurrentWatermark() int64 { return c.watermark }

// CurrentProcessingTime is the processing time, the wall clock in
// milliseconds since the Unix epoch.
func (c *ProcessContext[O]) CurrentProcessingTime() int64 {
	if c.clock == nil {
		return wallClock()
	}
	return c.clock()
}

func (c *ProcessContext[O]) sideOutputs() (*sideOutputs, int64, *error) {
	return sidesOf(c.info), c.ts, &c.err
}

// Process runs fn on every record of a stream that is not keyed
// (Flink's ProcessFunction): it emits zero or more records with
// ctx.Collect, and side outputs with Output, which FlatMap cannot. It has
// no keyed state and no timers; a keyed stream has KeyedProcess. Like FlatMap's
// function, fn is shared by every subtask and runs on each subtask's task
// goroutine, so it must keep nothing of its own between calls. An error
// from fn fails the job.
func Process[I, O any](ds DataStream[I], fn func(ctx *ProcessContext[O], v I) error) DataStream[O] {
	n := &node{out: typeOpsFor[O]{}, in: typeOpsFor[I]{}, sideCapable: true}
	if fn == nil {
		n.errs = append(n.errs, errNilFunction("process function"))
	}
	n.build = func(info engine.OpInfo, _ int, out any) (engine.Lifecycle, any) {
		op := &processOperator[I, O]{Base: chainop.Base{Op: info}, fn: fn}
		op.ctx = ProcessContext[O]{out: out.(engine.Output[O]), info: &op.Op, watermark: engine.NoWatermark}
		return op, engine.Output[I](op)
	}
	ds.env.addNode("Process", n)
	connect(ds, n, ds.part, ds.explicit, nil)
	return DataStream[O]{env: ds.env, node: n}
}

// processOperator runs the function of Process.
type processOperator[I, O any] struct {
	chainop.Base
	fn  func(*ProcessContext[O], I) error
	ctx ProcessContext[O]
	// t is the task running the operator (bindTask).
	t *task
}

func (p *processOperator[I, O]) bindTask(t *task) { p.t = t }

func (p *processOperator[I, O]) Open(engine.Task) error {
	p.ctx.clock = p.t.cfg.processingTime()
	return nil
}

func (p *processOperator[I, O]) Collect(v I, ts int64) error {
	p.Op.Records++
	p.ctx.ts, p.ctx.err = ts, nil
	if err := p.fn(&p.ctx, v); err != nil {
		return p.Op.Wrap(err)
	}
	return p.ctx.err
}

func (p *processOperator[I, O]) EmitWatermark(wm int64) error {
	p.ctx.watermark = max(p.ctx.watermark, wm)
	return p.ctx.out.EmitWatermark(wm)
}

func (p *processOperator[I, O]) EmitStatus(idle bool) error { return p.ctx.out.EmitStatus(idle) }
