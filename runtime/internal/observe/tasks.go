package observe

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
)

// TaskStats is what one task publishes. The task goroutine writes the
// atomics through the Publish methods; everything else is set before the
// task starts or under Observer.mu.
type TaskStats struct {
	vertex      int
	name        string
	subtask     int
	parallelism int
	attempt     int
	ops         []opStats

	// base holds the totals of the earlier attempts of this subtask.
	base taskTotals

	recordsIn, recordsOut atomic.Int64
	busyNs, idleNs, bpNs  atomic.Int64
	watermark             atomic.Int64 // engine.NoWatermark: none yet

	splitsMu sync.Mutex
	splits   []string

	state string // under Observer.mu
}

type taskTotals struct {
	recordsIn, recordsOut int64
	busyNs, idleNs, bpNs  int64
	opIn, opOut           map[string]int64 // by uid
}

type opStats struct {
	name, uid string
	in, out   atomic.Int64
}

// Operator names one operator of a task's chain.
type Operator struct{ Name, UID string }

// NewTaskStats prepares the stats of subtask of vertex, a task named name
// of the given parallelism and attempt, that runs the chain ops. Names
// become label values: they are repaired into valid ones here.
func NewTaskStats(vertex int, name string, subtask, parallelism, attempt int, ops []Operator) *TaskStats {
	s := &TaskStats{vertex: vertex, name: metrics.LabelValue(name), subtask: subtask, parallelism: parallelism, attempt: attempt, state: "running"}
	s.watermark.Store(engine.NoWatermark)
	s.ops = make([]opStats, len(ops))
	for i, op := range ops {
		s.ops[i].name, s.ops[i].uid = metrics.LabelValue(op.Name), metrics.LabelValue(op.UID)
	}
	return s
}

// PublishOperator publishes what the task's operator i took in and gave
// out. Task goroutine.
func (s *TaskStats) PublishOperator(i int, in, out int64) {
	s.ops[i].in.Store(in)
	s.ops[i].out.Store(out)
}

// PublishTask publishes the records into the task's chain and the records
// out of it. Task goroutine.
func (s *TaskStats) PublishTask(in, out int64) {
	s.recordsIn.Store(in)
	s.recordsOut.Store(out)
}

// PublishTimes publishes the task's busy, idle and backpressured
// nanoseconds. Task goroutine.
func (s *TaskStats) PublishTimes(busyNs, idleNs, bpNs int64) {
	s.busyNs.Store(busyNs)
	s.idleNs.Store(idleNs)
	s.bpNs.Store(bpNs)
}

// PublishWatermark publishes the watermark the task passed into its chain
// last. Task goroutine.
func (s *TaskStats) PublishWatermark(wm int64) { s.watermark.Store(wm) }

// PublishSplits publishes the splits the task's source reader holds.
func (s *TaskStats) PublishSplits(ids []string) {
	s.splitsMu.Lock()
	s.splits = ids
	s.splitsMu.Unlock()
}

// currentWatermark returns the watermark the task published, unless it
// has none yet or its input has ended: engine.MaxWatermark is an
// end-of-input marker, not a time, and as a timestamp it would wreck any
// graph or alert of event-time lag.
func (s *TaskStats) currentWatermark() (int64, bool) {
	wm := s.watermark.Load()
	return wm, wm != engine.NoWatermark && wm != engine.MaxWatermark
}

// totals returns base plus what the task published.
func (s *TaskStats) totals() taskTotals {
	t := taskTotals{
		recordsIn:  s.base.recordsIn + s.recordsIn.Load(),
		recordsOut: s.base.recordsOut + s.recordsOut.Load(),
		busyNs:     s.base.busyNs + s.busyNs.Load(),
		idleNs:     s.base.idleNs + s.idleNs.Load(),
		bpNs:       s.base.bpNs + s.bpNs.Load(),
		opIn:       map[string]int64{},
		opOut:      map[string]int64{},
	}
	for i := range s.ops {
		op := &s.ops[i]
		t.opIn[op.uid] = s.base.opIn[op.uid] + op.in.Load()
		t.opOut[op.uid] = s.base.opOut[op.uid] + op.out.Load()
	}
	return t
}

// Times returns the task's busy, idle and backpressured nanoseconds over
// the life of the Environment.
func (s *TaskStats) Times() (busyNs, idleNs, bpNs int64) {
	t := s.totals()
	return t.busyNs, t.idleNs, t.bpNs
}

// taskCollector exports the tasks' published counters at scrape time.
// Its series follow the graph; its metrics are fixed, and it describes
// them so that the registry checks them and the next job on the registry
// can unregister it.
type taskCollector Observer

var (
	descRecordsIn = prometheus.NewDesc(metrics.Namespace+"_operator_records_in_total",
		"Records into an operator (for a source: records its reader emitted).", []string{metrics.LabelOperator, metrics.LabelUID, metrics.LabelSubtask}, nil)
	descRecordsOut = prometheus.NewDesc(metrics.Namespace+"_operator_records_out_total",
		"Records an operator emitted (for a sink: records given to its writer).", []string{metrics.LabelOperator, metrics.LabelUID, metrics.LabelSubtask}, nil)
	taskLabels = []string{"task", "vertex", metrics.LabelSubtask}
	descBusy   = prometheus.NewDesc(metrics.Namespace+"_task_busy_seconds_total",
		"Time a task spent processing (neither idle nor backpressured).", taskLabels, nil)
	descIdle = prometheus.NewDesc(metrics.Namespace+"_task_idle_seconds_total",
		"Time a task spent waiting for input.", taskLabels, nil)
	descBackpressured = prometheus.NewDesc(metrics.Namespace+"_task_backpressured_seconds_total",
		"Time a task spent waiting for room in its output.", taskLabels, nil)
	descWatermark = prometheus.NewDesc(metrics.Namespace+"_task_watermark_seconds",
		"The watermark a task passed into its chain last, as a Unix timestamp in seconds; absent before the first and once the input has ended.", taskLabels, nil)
)

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRecordsIn, descRecordsOut, descBusy, descIdle, descBackpressured, descWatermark} {
		ch <- d
	}
}

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	o := (*Observer)(c)
	o.mu.Lock()
	tasks := slices.Clone(o.tasks)
	o.mu.Unlock()
	// Names come from the job's author and become label values, which
	// must be valid UTF-8. NewTaskStats repairs them; a series that is
	// refused anyway is left out rather than panicking inside Gather and
	// taking every other metric of the scrape with it.
	emit := func(d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
		if m, err := prometheus.NewConstMetric(d, vt, v, labels...); err == nil {
			ch <- m
		}
	}
	for _, s := range tasks {
		tt := s.totals()
		sub := strconv.Itoa(s.subtask)
		for i := range s.ops {
			op := &s.ops[i]
			emit(descRecordsIn, prometheus.CounterValue, float64(tt.opIn[op.uid]), op.name, op.uid, sub)
			emit(descRecordsOut, prometheus.CounterValue, float64(tt.opOut[op.uid]), op.name, op.uid, sub)
		}
		v := strconv.Itoa(s.vertex)
		emit(descBusy, prometheus.CounterValue, float64(tt.busyNs)/1e9, s.name, v, sub)
		emit(descIdle, prometheus.CounterValue, float64(tt.idleNs)/1e9, s.name, v, sub)
		emit(descBackpressured, prometheus.CounterValue, float64(tt.bpNs)/1e9, s.name, v, sub)
		if wm, ok := s.currentWatermark(); ok {
			emit(descWatermark, prometheus.GaugeValue, float64(wm)/1e3, s.name, v, sub)
		}
	}
}

// RecordsIn is the records into the task's chain that this task (this
// attempt, not the subtask's earlier ones) published.
func (s *TaskStats) RecordsIn() int64 { return s.recordsIn.Load() }
