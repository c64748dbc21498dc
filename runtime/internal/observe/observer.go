// Package observe is a job's metrics and status board: what its tasks,
// its checkpoints, its restarts and (for a distributed job) its slots did,
// served as Prometheus metrics and as the status.Job snapshot of
// Environment.Status.
//
// How it stays off the hot path:
//
//   - Task goroutines count in plain fields they own (records into each
//     operator, records into each record writer, time spent waiting for
//     input or for room in the output) and publish them to the atomics of
//     their TaskStats every PublishInterval, as a mail, and once more when
//     they exit. Nothing is atomic or shared per record.
//   - The Observer, one per Environment, holds the TaskStats of the
//     current attempt, the graph, checkpoint history, restarts and the job
//     state under one mutex. The master goroutine updates it; Status and
//     the Prometheus collector read it from any goroutine.
//   - Counters are totals over the life of the Environment: a subtask
//     rebuilt by a failover starts from the totals its previous attempt
//     published last (TaskStats' base), so Prometheus counters never go
//     back.
package observe

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/status"
)

// PublishInterval is how often a task publishes its counters: the
// staleness of a scrape or a Status while the task runs.
const PublishInterval = 200 * time.Millisecond

// recentCheckpoints is how many checkpoints Status keeps.
const recentCheckpoints = 20

// recentSavepoints is how many savepoints Status keeps.
const recentSavepoints = 10

// Observer is the job's metrics and status board; see the package comment.
type Observer struct {
	prom *prometheus.Registry
	// reg is the job's hold on prom from Attach until Execute returns;
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
	// lag is the job's input lag in this process (lag.go).
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
	tasks      []*TaskStats // current attempt, by vertex then subtask
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
	// dist is a distributed job's share in this process (slots.go).
	dist *status.Distributed
}

type checkpointRecord struct {
	st      status.Checkpoint
	started time.Time // monotonic, for the duration
	// files are the shared files counted into st.FullSizeBytes.
	files map[string]bool
}

// New returns the board of a job whose metrics go to reg.
func New(reg *prometheus.Registry) *Observer {
	o := &Observer{prom: reg, state: status.StateCreated, slotM: newSlotMetrics()}
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

// Gatherer is the registry the job's metrics are registered on.
func (o *Observer) Gatherer() prometheus.Gatherer { return o.prom }

// Attach registers the job's metrics on the registry for the run of
// Execute, which calls it once, before anything runs; the returned
// function ends the job's hold on the registry when Execute returns. Jobs
// take turns on a registry given with WithMetricsRegistry: a job that ended
// leaves its final values there until the next job's Attach replaces them,
// and a registry is refused only while another job runs on it. jobName
// labels the job-level gauges (labelJobName).
func (o *Observer) Attach(job, jobName string) (release func(), err error) {
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

// Group is the metric group of an operator instance (subtask -1: its
// coordinator) on the registry the job holds; Attach must have run.
func (o *Observer) Group(operator, uid string, subtask int) *metrics.Group {
	return o.reg.Group(operator, uid, subtask)
}

// Observer updates, from the master goroutine.

// JobStarted records the start of a run of the job: its name (the one
// before stays when empty), its graph, and whether it checkpoints and how
// often.
func (o *Observer) JobStarted(name string, g status.Graph, cpEnabled bool, cpInterval time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.state, o.start, o.graph = status.StateRunning, time.Now(), g
	if name != "" {
		o.name = name
	}
	o.cpEnabled = cpEnabled
	if cpEnabled {
		o.cpInterval = cpInterval
	}
}

// TasksBuilt installs the stats of freshly built tasks (all of them, or a
// region's), continuing each subtask's totals from its previous task.
func (o *Observer) TasksBuilt(stats []*TaskStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range stats {
		i := slices.IndexFunc(o.tasks, func(p *TaskStats) bool { return p.vertex == s.vertex && p.subtask == s.subtask })
		if i < 0 {
			o.tasks = append(o.tasks, s)
			continue
		}
		s.base = o.tasks[i].totals()
		o.tasks[i] = s
	}
	slices.SortFunc(o.tasks, func(a, b *TaskStats) int {
		if a.vertex != b.vertex {
			return a.vertex - b.vertex
		}
		return a.subtask - b.subtask
	})
}

// Task states TaskExited records.
const (
	TaskFinished  = "finished"
	TaskCancelled = "cancelled"
	TaskFailed    = "failed"
)

// TaskExited records the end of the task of s (nil: a task with no stats)
// in state, one of the Task constants.
func (o *Observer) TaskExited(s *TaskStats, state string) {
	if s == nil {
		return
	}
	o.mu.Lock()
	s.state = state
	o.mu.Unlock()
}

// SetState sets the job's state.
func (o *Observer) SetState(st status.State) {
	o.mu.Lock()
	o.state = st
	o.mu.Unlock()
}

// Failed records the newest failure.
func (o *Observer) Failed(f status.Failure) {
	o.mu.Lock()
	o.lastFailure = &f
	o.mu.Unlock()
}

// Restarted records the job's nth restart.
func (o *Observer) Restarted(n int) {
	o.restartsC.Inc()
	o.mu.Lock()
	o.restarts, o.state, o.sinceRestart = n, status.StateRestarting, 0
	o.mu.Unlock()
}

// JobEnded sets the final state: failed with an error, cancelled when ctx
// was cancelled, finished otherwise.
func (o *Observer) JobEnded(ctx context.Context, err error) {
	st := status.StateFinished
	switch {
	case err != nil:
		st = status.StateFailed
	case ctx.Err() != nil:
		st = status.StateCancelled
	}
	o.SetState(st)
}

// Restored records where the current attempt resumed.
func (o *Observer) Restored(st status.Restore) {
	o.mu.Lock()
	o.restore = &st
	o.mu.Unlock()
}

// SavepointCompleted adds sp to the status, keeping the newest
// recentSavepoints.
func (o *Observer) SavepointCompleted(sp status.Savepoint) {
	o.mu.Lock()
	o.savepoints = append(o.savepoints, sp)
	if n := len(o.savepoints); n > recentSavepoints {
		o.savepoints = slices.Delete(o.savepoints, 0, n-recentSavepoints)
	}
	o.mu.Unlock()
}

// stateUsage is the pebble backend's disk and block cache use, 0 when
// none is open.
func (o *Observer) stateUsage() (disk, cache int64) {
	o.statsMu.Lock()
	f := o.stateStats
	o.statsMu.Unlock()
	if f == nil {
		return 0, 0
	}
	return f()
}

// SetStateStats installs (or, with nil, removes) the state backend's
// report of its disk and block cache use.
func (o *Observer) SetStateStats(f func() (disk, cache int64)) {
	o.statsMu.Lock()
	o.stateStats = f
	o.statsMu.Unlock()
}
