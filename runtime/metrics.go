package runtime

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/sourceop"
	"github.com/splitflow/splitflow/runtime/status"
)

// The job's metrics and status board is runtime/internal/observe's
// Observer, one per Environment. This file is the engine's side of it:
// what tasks count on their goroutines and publish, and what the master
// reports of the graph, its tasks and their failures.

// gatherer is the registry the job's metrics are registered on, served at
// /metrics by WithHTTP.
func (env *Environment) gatherer() prometheus.Gatherer {
	return env.observer().Gatherer()
}

// observer returns the Environment's observer, creating it on first use.
func (env *Environment) observer() *observe.Observer {
	env.obsOnce.Do(func() { env.obs = observe.New(env.cfg.metrics.newRegistry()) })
	return env.obs
}

// counter is something a task counts records in, on its goroutine.
type counter interface{ Count() int64 }

// taskMeter is the task goroutine's side of its observe.TaskStats.
type taskMeter struct {
	stats   *observe.TaskStats
	started time.Time
	idleNs  int64
	bpNs    int64
	// outs[i] counts what operator i emitted: the records into its first
	// output (a chained operator or a record writer); nil for sinks,
	// whose output is what they were given.
	outs    []counter
	writers []counter
	sinks   []*engine.OpInfo
	// splitsVer is the version of the held splits published last.
	splitsVer int
	timer     *time.Timer
}

// watermarked is a task input that knows the watermark it passed into
// the chain last.
type watermarked interface{ CurrentWatermark() int64 }

// splitHolder is a source input that knows the splits its reader holds.
type splitHolder interface {
	HeldSplits(sinceVersion int) (ids []string, version int, changed bool)
}

var (
	_ watermarked = (*gateInput[int])(nil)
	_ watermarked = (*sourceop.Operator[int, connector.Split, int])(nil)
	_ splitHolder = (*sourceop.Operator[int, connector.Split, int])(nil)
)

// publish copies the task's counters into its observe.TaskStats. Task
// goroutine.
func (t *task) publish() {
	m := &t.meter
	s := m.stats
	if s == nil {
		return
	}
	for i, op := range t.ops {
		info := op.Info()
		out := info.Records
		if i < len(m.outs) && m.outs[i] != nil {
			out = m.outs[i].Count()
		}
		s.PublishOperator(i, info.Records, out)
	}
	var in int64
	if len(t.ops) > 0 {
		in = t.ops[0].Info().Records
	}
	var out int64
	for _, w := range m.writers {
		out += w.Count()
	}
	for _, op := range m.sinks {
		out += op.Records
	}
	s.PublishTask(in, out)
	if !m.started.IsZero() {
		elapsed := int64(time.Since(m.started))
		s.PublishTimes(max(0, elapsed-m.idleNs-m.bpNs), m.idleNs, m.bpNs)
	}
	if w, ok := t.input.(watermarked); ok {
		s.PublishWatermark(w.CurrentWatermark())
	}
	if h, ok := t.input.(splitHolder); ok {
		if ids, ver, changed := h.HeldSplits(m.splitsVer); changed {
			m.splitsVer = ver
			s.PublishSplits(ids)
		}
	}
}

func (t *task) publishMail() error {
	t.publish()
	t.meter.timer.Reset(observe.PublishInterval)
	return nil
}

// tasksBuilt gives freshly built tasks (all of them, or a region's) their
// stats, which continue each subtask's totals from its previous task.
func tasksBuilt(o *observe.Observer, tasks []*task) {
	stats := make([]*observe.TaskStats, len(tasks))
	for i, t := range tasks {
		ops := make([]observe.Operator, len(t.ops))
		for j, op := range t.ops {
			ops[j] = observe.Operator{Name: op.Info().Name, UID: op.Info().UID}
		}
		t.meter.stats = observe.NewTaskStats(t.vertex, t.name, t.subtask, t.parallelism, t.attempt, ops)
		stats[i] = t.meter.stats
	}
	o.TasksBuilt(stats)
}

// jobStarted reports the start of a run of job name, of graph g, which
// checkpoints every interval if cpEnabled.
func jobStarted(o *observe.Observer, g *jobGraph, name string, cpEnabled bool, interval time.Duration) {
	sg := status.Graph{}
	for _, c := range g.chains {
		v := status.Vertex{ID: c.id, Name: c.name(), Parallelism: c.parallelism}
		for _, n := range c.nodes {
			v.Operators = append(v.Operators, n.name)
		}
		sg.Vertices = append(sg.Vertices, v)
		for _, e := range c.inEdges {
			sg.Edges = append(sg.Edges, status.Edge{From: g.chain[e.from].id, To: c.id, Partitioning: partitioningName(e.kind)})
		}
	}
	o.JobStarted(name, sg, cpEnabled, interval)
}

// partitioningName is how status and errors name k.
func partitioningName(k engine.PartitionKind) string { return strings.ToLower(k.String()) }

// reportTaskExit reports the end of task t, with the error its run returned.
func reportTaskExit(o *observe.Observer, t *task, err error) {
	st := observe.TaskFinished
	switch {
	case errors.Is(err, errTaskCancelled):
		st = observe.TaskCancelled
	case err != nil:
		st = observe.TaskFailed
	}
	o.TaskExited(t.meter.stats, st)
}

// failedWith reports the newest failure: of task t, or of a coordinator or
// of checkpointing when t is nil.
func failedWith(o *observe.Observer, t *task, err error) {
	f := status.Failure{Time: time.Now(), Error: statusText(err)}
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
	o.Failed(f)
}

// metricGroup is the metric group of operator info in this task; nil for
// a task driven by hand in a test.
func (t *task) metricGroup(info engine.OpInfo) *metrics.Group {
	if t == nil || t.ex == nil {
		return nil
	}
	return t.ex.env.observer().Group(info.Name, info.UID, info.Subtask)
}

// named sets the job's name for Status; Execute calls it before run.
func (ex *execution) named(name string) *execution {
	ex.name = name
	return ex
}
