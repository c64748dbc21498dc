package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/status"
)

// What the engine measures, and how it stays off the hot path:
//
//   - Task goroutines count in plain fields they own (records into each
//     operator in its opInfo, records into each record writer, time spent
//     waiting for input or for room in the output) and publish them to the
//     atomics of their taskStats every publishInterval, as a mail, and
//     once more when they exit. Nothing is atomic or shared per record.
//   - The observer, one per Environment, holds the taskStats of the
//     current attempt, the graph, checkpoint history, restarts and the job
//     state under one mutex. The master goroutine updates it; Status and
//     the Prometheus collector read it from any goroutine.
//   - Counters are totals over the life of the Environment: a subtask
//     rebuilt by a failover starts from the totals its previous attempt
//     published last (taskStats.base), so Prometheus counters never go
//     back.

// publishInterval is how often a task publishes its counters: the
// staleness of a scrape or a Status while the task runs.
const publishInterval = 200 * time.Millisecond

// recentCheckpoints is how many checkpoints Status keeps.
const recentCheckpoints = 20

// gatherer is the registry the job's metrics are registered on, served at
// /metrics by WithHTTP.
func (env *Environment) gatherer() prometheus.Gatherer {
	return env.observer().prom
}

// observer returns the Environment's observer, creating it on first use.
func (env *Environment) observer() *observer {
	env.obsOnce.Do(func() { env.obs = newObserver(env.cfg.metrics.newRegistry()) })
	return env.obs
}

// observer is the job's metrics and status board; see the comment at the
// top of this file.
type observer struct {
	prom *prometheus.Registry
	// reg is the job's hold on prom from attach until Execute returns;
	// nil before.
	reg *metrics.Registry

	cpTotal    *prometheus.CounterVec
	cpDuration prometheus.Histogram
	cpSize     prometheus.Gauge
	cpAlign    prometheus.Gauge
	cpFullSize prometheus.Gauge
	cpSync     prometheus.Gauge
	stateDisk  prometheus.GaugeFunc
	stateCache prometheus.GaugeFunc
	restartsC  prometheus.Counter
	slotM      slotMetrics
	// lag is the job's input lag in this process (sourcelag.go).
	lag sourceLag

	// stateStats, set while a job's pebble backend is open, reports its
	// disk and block cache use.
	statsMu    sync.Mutex
	stateStats func() (disk, cache int64)

	mu         sync.Mutex
	name       string
	state      status.State
	start      time.Time
	graph      status.Graph
	tasks      []*taskStats // current attempt, by vertex then subtask
	cpEnabled  bool
	cpInterval time.Duration
	completed  int64
	failed     int64
	// sinceRestart counts the checkpoints completed since the newest
	// restart (since the start without one).
	sinceRestart int64
	recent       []*checkpointRecord // oldest first, at most recentCheckpoints
	restarts     int
	lastFailure  *status.Failure
	restore      *status.Restore
	savepoints   []status.Savepoint
	// dist is a distributed job's share in this process (slotstatus.go).
	dist *status.Distributed
}

type checkpointRecord struct {
	st      status.Checkpoint
	started time.Time // monotonic, for the duration
	// files are the shared files counted into st.FullSizeBytes.
	files map[string]bool
}

func newObserver(reg *prometheus.Registry) *observer {
	o := &observer{prom: reg, state: status.StateCreated, slotM: newSlotMetrics()}
	o.cpTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "checkpoints_total",
		Help: "Checkpoints that ended, by result (completed, failed).",
	}, []string{"result"})
	o.cpDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Name: "checkpoint_duration_seconds",
		Help:    "Time from the trigger of a checkpoint to its metadata being durable, for completed checkpoints.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	})
	o.cpSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "checkpoint_last_size_bytes",
		Help: "State bytes written by the newest completed checkpoint.",
	})
	o.cpAlign = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "checkpoint_last_alignment_seconds",
		Help: "Longest barrier alignment of any task in the newest completed checkpoint.",
	})
	o.cpFullSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "checkpoint_last_full_size_bytes",
		Help: "Size of all the state the newest completed checkpoint covers, with the shared files earlier checkpoints stored.",
	})
	o.cpSync = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "checkpoint_last_sync_pause_seconds",
		Help: "Longest synchronous pause of any task's state snapshot (at the barrier, on the task goroutine) in the newest completed checkpoint.",
	})
	o.stateDisk = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "state_disk_bytes",
		Help: "Size on local disk of the pebble state backend's DBs (0 with the heap backend).",
	}, func() float64 { d, _ := o.stateUsage(); return float64(d) })
	o.stateCache = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "state_block_cache_bytes",
		Help: "Bytes in use of the pebble state backend's block cache (0 with the heap backend).",
	}, func() float64 { _, c := o.stateUsage(); return float64(c) })
	o.restartsC = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "job_restarts_total",
		Help: "Restarts of the job or of one of its regions.",
	})
	// Both results exist from the start, so a rate over them is defined
	// before the first failure.
	o.cpTotal.WithLabelValues("completed")
	o.cpTotal.WithLabelValues("failed")
	return o
}

// attach registers the job's metrics on the registry for the run of
// Execute, which calls it once, before anything runs; the returned
// function ends the job's hold on the registry when Execute returns. Jobs
// take turns on a registry given with WithMetricsRegistry: a job that ended
// leaves its final values there until the next job's attach replaces them,
// and a registry is refused only while another job runs on it. jobName
// labels the job-level gauges (labelJobName).
func (o *observer) attach(job, jobName string) (release func(), err error) {
	reg, err := metrics.Open(o.prom, job)
	if err != nil {
		return nil, fmt.Errorf("%w; run one job at a time on a registry, or give each Environment its own (WithMetricsRegistry)", err)
	}
	for _, c := range append([]prometheus.Collector{o.cpTotal, o.cpDuration, o.cpSize, o.cpAlign, o.cpFullSize, o.cpSync, o.stateDisk, o.stateCache, o.restartsC, (*taskCollector)(o), o.lag.gauge(jobName)}, o.slotM.collectors()...) {
		reg.Register(c)
	}
	if err := reg.Err(); err != nil {
		reg.Close()
		return nil, fmt.Errorf("%w; the registry holds other metrics named splitflow_*: give the job a registry of its own (WithMetricsRegistry)", err)
	}
	o.mu.Lock()
	o.reg = reg
	o.mu.Unlock()
	return reg.Close, nil
}

// taskStats is what one task publishes. The task goroutine writes the
// atomics; everything else is set before the task starts or under
// observer.mu.
type taskStats struct {
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
	watermark             atomic.Int64 // noWatermark: none yet

	splitsMu sync.Mutex
	splits   []string

	state string // under observer.mu
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

// currentWatermark returns the watermark the task published, unless it
// has none yet or its input has ended: maxWatermark is an end-of-input
// marker, not a time, and as a timestamp it would wreck any graph or
// alert of event-time lag.
func (s *taskStats) currentWatermark() (int64, bool) {
	wm := s.watermark.Load()
	return wm, wm != engine.NoWatermark && wm != engine.MaxWatermark
}

// totals returns base plus what the task published.
func (s *taskStats) totals() taskTotals {
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

// counter is something a task counts records in, on its goroutine.
type counter interface{ Count() int64 }

func (i *opInfo) Count() int64 { return i.records }

// taskMeter is the task goroutine's side of its taskStats.
type taskMeter struct {
	stats   *taskStats
	started time.Time
	idleNs  int64
	bpNs    int64
	// outs[i] counts what operator i emitted: the records into its first
	// output (a chained operator or a record writer); nil for sinks,
	// whose output is what they were given.
	outs    []counter
	writers []counter
	sinks   []*opInfo
	// splitsVer is the version of the held splits published last.
	splitsVer int
	timer     *time.Timer
}

// watermarked is a task input that knows the watermark it passed into
// the chain last.
type watermarked interface{ currentWatermark() int64 }

// splitHolder is a source input that knows the splits its reader holds.
type splitHolder interface {
	heldSplits(sinceVersion int) (ids []string, version int, changed bool)
}

// publish copies the task's counters into its taskStats. Task goroutine.
func (t *task) publish() {
	m := &t.meter
	s := m.stats
	if s == nil {
		return
	}
	for i, op := range t.ops {
		info := op.operator()
		s.ops[i].in.Store(info.records)
		if i < len(m.outs) && m.outs[i] != nil {
			o := m.outs[i]
			s.ops[i].out.Store(o.Count())
		} else {
			s.ops[i].out.Store(info.records)
		}
	}
	if len(t.ops) > 0 {
		s.recordsIn.Store(t.ops[0].operator().records)
	}
	var out int64
	for _, w := range m.writers {
		out += w.Count()
	}
	for _, op := range m.sinks {
		out += op.records
	}
	s.recordsOut.Store(out)
	if !m.started.IsZero() {
		elapsed := int64(time.Since(m.started))
		s.busyNs.Store(max(0, elapsed-m.idleNs-m.bpNs))
		s.idleNs.Store(m.idleNs)
		s.bpNs.Store(m.bpNs)
	}
	if w, ok := t.input.(watermarked); ok {
		s.watermark.Store(w.currentWatermark())
	}
	if h, ok := t.input.(splitHolder); ok {
		if ids, ver, changed := h.heldSplits(m.splitsVer); changed {
			m.splitsVer = ver
			s.splitsMu.Lock()
			s.splits = ids
			s.splitsMu.Unlock()
		}
	}
}

func (t *task) publishMail() error {
	t.publish()
	t.meter.timer.Reset(publishInterval)
	return nil
}

// newTaskStats prepares the stats of t, continuing the totals of prev (the
// same subtask's task of the previous attempt, nil for none).
func newTaskStats(t *task, vertex int, prev *taskStats) *taskStats {
	s := &taskStats{vertex: vertex, name: metrics.LabelValue(t.name), subtask: t.subtask, parallelism: t.parallelism, attempt: t.attempt, state: "running"}
	s.watermark.Store(engine.NoWatermark)
	s.ops = make([]opStats, len(t.ops))
	for i, op := range t.ops {
		s.ops[i].name, s.ops[i].uid = metrics.LabelValue(op.operator().name), metrics.LabelValue(op.operator().uid)
	}
	if prev != nil {
		s.base = prev.totals()
	}
	return s
}

// Observer updates, from the master goroutine.

func (o *observer) jobStarted(ex *execution) {
	g := status.Graph{}
	for _, c := range ex.g.chains {
		v := status.Vertex{ID: c.id, Name: c.name(), Parallelism: c.parallelism}
		for _, n := range c.nodes {
			v.Operators = append(v.Operators, n.name)
		}
		g.Vertices = append(g.Vertices, v)
		for _, e := range c.inEdges {
			g.Edges = append(g.Edges, status.Edge{From: ex.g.chain[e.from].id, To: c.id, Partitioning: partitioningName(e.kind)})
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.state, o.start, o.graph = status.StateRunning, time.Now(), g
	if ex.name != "" {
		o.name = ex.name
	}
	o.cpEnabled = ex.cc != nil
	if o.cpEnabled {
		o.cpInterval = ex.cfg.cp.interval
	}
}

func partitioningName(k engine.PartitionKind) string {
	switch k {
	case engine.PartitionForward:
		return "forward"
	case engine.PartitionRebalance:
		return "rebalance"
	case engine.PartitionHash:
		return "hash"
	case engine.PartitionBroadcast:
		return "broadcast"
	}
	return "unknown"
}

// tasksBuilt installs the stats of freshly built tasks (all of them, or a
// region's), continuing each subtask's totals from its previous task.
func (o *observer) tasksBuilt(ex *execution, tasks []*task) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range tasks {
		vertex := t.vertex
		i := slices.IndexFunc(o.tasks, func(s *taskStats) bool { return s.vertex == vertex && s.subtask == t.subtask })
		var prev *taskStats
		if i >= 0 {
			prev = o.tasks[i]
		}
		t.meter.stats = newTaskStats(t, vertex, prev)
		if i >= 0 {
			o.tasks[i] = t.meter.stats
		} else {
			o.tasks = append(o.tasks, t.meter.stats)
		}
	}
	slices.SortFunc(o.tasks, func(a, b *taskStats) int {
		if a.vertex != b.vertex {
			return a.vertex - b.vertex
		}
		return a.subtask - b.subtask
	})
}

func (o *observer) taskExited(s *taskStats, err error) {
	if s == nil {
		return
	}
	st := "finished"
	switch {
	case errors.Is(err, errTaskCancelled):
		st = "cancelled"
	case err != nil:
		st = "failed"
	}
	o.mu.Lock()
	s.state = st
	o.mu.Unlock()
}

func (o *observer) setState(st status.State) {
	o.mu.Lock()
	o.state = st
	o.mu.Unlock()
}

// failedWith records the newest failure: of task t, or of a coordinator or of
// checkpointing when t is nil.
func (o *observer) failedWith(t *task, err error) {
	f := &status.Failure{Time: time.Now(), Error: statusText(err)}
	var oe *OperatorError
	switch {
	case t != nil:
		f.Task = fmt.Sprintf("%s (%d/%d)", t.name, t.subtask+1, t.parallelism)
	case errors.As(err, &oe) && oe.Subtask < 0:
		f.Task = oe.Operator + " (coordinator)"
	case errors.As(err, &oe):
		f.Task = fmt.Sprintf("%s (%d)", oe.Operator, oe.Subtask+1)
	default:
		f.Task = "checkpointing"
	}
	o.mu.Lock()
	o.lastFailure = f
	o.mu.Unlock()
}

func (o *observer) restarted(n int) {
	o.restartsC.Inc()
	o.mu.Lock()
	o.restarts, o.state, o.sinceRestart = n, status.StateRestarting, 0
	o.mu.Unlock()
}

// The checkpoint methods take the slot of a distributed job's execution
// (-1: a job of one process), since every slot numbers its checkpoints
// from its own log: a record is a slot's checkpoint id.

func (o *observer) checkpointTriggered(slot int, id int64, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.find(slot, id) != nil {
		return
	}
	o.addRecord(&checkpointRecord{st: status.Checkpoint{ID: id, Slot: slotOf(slot), Status: "in_progress", TriggerTime: at}, started: time.Now()})
}

// addRecord appends r to the history, dropping the oldest beyond
// recentCheckpoints. o.mu is held.
func (o *observer) addRecord(r *checkpointRecord) {
	o.recent = append(o.recent, r)
	if n := len(o.recent) - recentCheckpoints; n > 0 {
		o.recent = slices.Delete(o.recent, 0, n)
	}
}

func slotOf(slot int) *int {
	if slot < 0 {
		return nil
	}
	return &slot
}

func (o *observer) find(slot int, id int64) *checkpointRecord {
	for i := len(o.recent) - 1; i >= 0; i-- {
		st := &o.recent[i].st
		if st.ID == id && (st.Slot == nil && slot < 0 || st.Slot != nil && *st.Slot == slot) {
			return o.recent[i]
		}
	}
	return nil
}

// checkpointSizes is what one acknowledgement (or the coordinators'
// snapshots) added to a checkpoint: bytes written, the full size of the
// state it covers (with shared files stored by earlier checkpoints), its
// alignment and its task's synchronous pause.
type checkpointSizes struct {
	written, full int64
	// files are shared files the state uses, counted into the full size
	// once per checkpoint (subtasks restored from one old subtask share
	// its files).
	files       []checkpoint.FileHandle
	align, sync time.Duration
}

// checkpointProgress adds an acknowledgement to checkpoint id.
func (o *observer) checkpointProgress(slot int, id int64, s checkpointSizes) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.find(slot, id); r != nil {
		r.st.SizeBytes += s.written
		r.st.FullSizeBytes += s.full
		for _, f := range s.files {
			if r.files == nil {
				r.files = map[string]bool{}
			}
			if !r.files[f.Name] {
				r.files[f.Name] = true
				r.st.FullSizeBytes += f.Size
			}
		}
		r.st.AlignmentMillis = max(r.st.AlignmentMillis, s.align.Milliseconds())
		r.st.SyncMicros = max(r.st.SyncMicros, s.sync.Microseconds())
	}
}

// checkpointEnded records the end of checkpoint id and returns its
// status; err nil means completed.
func (o *observer) checkpointEnded(slot int, id int64, err error) status.Checkpoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.find(slot, id)
	if r == nil {
		r = &checkpointRecord{st: status.Checkpoint{ID: id, Slot: slotOf(slot), TriggerTime: time.Now()}, started: time.Now()}
		o.addRecord(r)
	}
	d := time.Since(r.started)
	r.st.DurationMillis = d.Milliseconds()
	if err == nil {
		r.st.Status = "completed"
		o.completed++
		o.sinceRestart++
		o.cpTotal.WithLabelValues("completed").Inc()
		o.cpDuration.Observe(d.Seconds())
		o.cpSize.Set(float64(r.st.SizeBytes))
		o.cpFullSize.Set(float64(r.st.FullSizeBytes))
		o.cpAlign.Set(float64(r.st.AlignmentMillis) / 1000)
		o.cpSync.Set(float64(r.st.SyncMicros) / 1e6)
	} else {
		r.st.Status, r.st.Error = "failed", statusText(err)
		r.st.SizeBytes, r.st.FullSizeBytes, r.st.AlignmentMillis, r.st.SyncMicros = 0, 0, 0, 0
		o.failed++
		o.cpTotal.WithLabelValues("failed").Inc()
	}
	return r.st
}

// taskCollector exports the tasks' published counters at scrape time.
// Its series follow the graph; its metrics are fixed, and it describes
// them so that the registry checks them and the next job on the registry
// can unregister it.
type taskCollector observer

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
	o := (*observer)(c)
	o.mu.Lock()
	tasks := slices.Clone(o.tasks)
	o.mu.Unlock()
	// Names come from the job's author and become label values, which
	// must be valid UTF-8. newTaskStats repairs them; a series that is
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

// metricGroup is the metric group of operator info in this task; nil for
// a task driven by hand in a test.
func (t *task) metricGroup(info opInfo) *metrics.Group {
	if t == nil || t.ex == nil {
		return nil
	}
	return t.ex.env.observer().reg.Group(info.name, info.uid, info.subtask)
}

// jobEnded sets the final state: failed with an error, cancelled when ctx
// was cancelled, finished otherwise.
func (o *observer) jobEnded(ctx context.Context, err error) {
	st := status.StateFinished
	switch {
	case err != nil:
		st = status.StateFailed
	case ctx.Err() != nil:
		st = status.StateCancelled
	}
	o.setState(st)
}

// named sets the job's name for Status; Execute calls it before run.
func (ex *execution) named(name string) *execution {
	ex.name = name
	return ex
}

// stateUsage is the pebble backend's disk and block cache use, 0 when
// none is open.
func (o *observer) stateUsage() (disk, cache int64) {
	o.statsMu.Lock()
	f := o.stateStats
	o.statsMu.Unlock()
	if f == nil {
		return 0, 0
	}
	return f()
}

// setStateStats installs (or, with nil, removes) the backend's report.
func (o *observer) setStateStats(f func() (disk, cache int64)) {
	o.statsMu.Lock()
	o.stateStats = f
	o.statsMu.Unlock()
}
