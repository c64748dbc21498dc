// Package metrics is where a splitflow job's Prometheus metrics live: one
// Registry per job, on a prometheus.Registry the job's owner chooses, and
// Groups that scope metrics to one operator subtask (or coordinator) for
// the engine and for connectors.
//
// Every metric is named splitflow_<name> and labelled operator (its name),
// uid and subtask ("coordinator" for an operator's coordinator), plus the
// labels its creator adds. A metric is created and registered the first time
// any Group asks for it, and the same series is returned to every later
// asker with the same labels: a subtask restarted by a failover counts on
// where its previous attempt stopped, and nothing is registered twice.
//
// Hot paths never call into this package per record. Counters are added to
// per batch or per fetch, and values the engine keeps in plain fields of its
// goroutines are published to atomics and read at scrape time (Func
// metrics).
package metrics

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "splitflow"

// CoordinatorSubtask is the subtask label of metrics of an operator's
// coordinator (a source's enumerator), which belongs to no subtask.
const CoordinatorSubtask = "coordinator"

// Standard label names.
const (
	LabelOperator = "operator"
	LabelUID      = "uid"
	LabelSubtask  = "subtask"
)

var groupLabels = []string{LabelOperator, LabelUID, LabelSubtask}

// Registry is the metrics of one job. Its methods are safe for concurrent
// use.
type Registry struct {
	reg  prometheus.Registerer
	gath prometheus.Gatherer

	mu       sync.Mutex
	families map[string]*family
	funcs    *funcCollector
	funcErr  error
}

type family struct {
	kind   string // "counter", "gauge", "histogram"
	help   string
	labels []string
	vec    any // *prometheus.CounterVec, *GaugeVec or *HistogramVec
}

// NewRegistry returns a Registry that registers on reg. Registration
// problems (another job's splitflow metrics on the same registry) are
// reported by Err.
func NewRegistry(reg *prometheus.Registry) *Registry {
	r := &Registry{reg: reg, gath: reg, families: map[string]*family{}}
	r.funcs = &funcCollector{entries: map[string]*funcEntry{}}
	if err := reg.Register(r.funcs); err != nil {
		r.funcErr = err
	}
	return r
}

// Registerer is where the job's metrics are registered.
func (r *Registry) Registerer() prometheus.Registerer { return r.reg }

// Gatherer serves the job's metrics (the /metrics endpoint).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.gath }

// Err reports a registration that failed, typically because the registry
// already holds the metrics of another job; nil when all is well.
func (r *Registry) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.funcErr
}

// Group returns the scope of one operator subtask; subtask < 0 is the
// operator's coordinator.
func (r *Registry) Group(operator, uid string, subtask int) *Group {
	s := CoordinatorSubtask
	if subtask >= 0 {
		s = strconv.Itoa(subtask)
	}
	return &Group{r: r, values: []string{operator, uid, s}}
}

// vec returns the vector for name, creating and registering it on first
// use. Asking for an existing name with another kind or other labels is a
// programming error and panics with both definitions.
func (r *Registry) vec(kind, name, help string, labels []string, buckets []float64) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.families[name]; ok {
		if f.kind != kind || !slices.Equal(f.labels, labels) {
			panic(fmt.Sprintf("metrics: %s_%s asked for as %s%v, already defined as %s%v", Namespace, name, kind, labels, f.kind, f.labels))
		}
		return f.vec
	}
	var c prometheus.Collector
	var v any
	switch kind {
	case "counter":
		cv := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		c, v = cv, cv
	case "gauge":
		gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		c, v = gv, gv
	case "histogram":
		hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
		c, v = hv, hv
	}
	if err := r.reg.Register(c); err != nil {
		// Another job registered the same name on this registry: keep
		// counting into an unregistered vector rather than fail the
		// operator, and let Err tell the job's owner.
		if r.funcErr == nil {
			r.funcErr = fmt.Errorf("metrics: register %s_%s: %w", Namespace, name, err)
		}
	}
	r.families[name] = &family{kind: kind, help: help, labels: labels, vec: v}
	return v
}

// Group scopes metrics to one operator subtask. A nil *Group is valid: its
// metrics work but are exported nowhere, so a connector can use the group
// of a context that has none without checking.
type Group struct {
	r      *Registry
	values []string // operator, uid, subtask
}

// Registry returns the job's registry, nil for a nil Group.
func (g *Group) Registry() *Registry {
	if g == nil {
		return nil
	}
	return g.r
}

// Labels returns the group's labels, for collectors registered by other
// means (franz-go's kprom plugin).
func (g *Group) Labels() prometheus.Labels {
	if g == nil {
		return prometheus.Labels{}
	}
	return prometheus.Labels{LabelOperator: g.values[0], LabelUID: g.values[1], LabelSubtask: g.values[2]}
}

func (g *Group) names(extra []string) []string {
	return append(slices.Clip(groupLabels), extra...)
}

// Counter returns the counter splitflow_<name> of this group.
func (g *Group) Counter(name, help string) prometheus.Counter {
	if g == nil {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return g.r.vec("counter", name, help, groupLabels, nil).(*prometheus.CounterVec).WithLabelValues(g.values...)
}

// CounterVec returns the counters splitflow_<name> of this group, by the
// extra labels.
func (g *Group) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	if g == nil {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	v := g.r.vec("counter", name, help, g.names(labels), nil).(*prometheus.CounterVec)
	return v.MustCurryWith(g.Labels())
}

// Gauge returns the gauge splitflow_<name> of this group.
func (g *Group) Gauge(name, help string) prometheus.Gauge {
	if g == nil {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	return g.r.vec("gauge", name, help, groupLabels, nil).(*prometheus.GaugeVec).WithLabelValues(g.values...)
}

// Histogram returns the histogram splitflow_<name> of this group; nil
// buckets are prometheus.DefBuckets.
func (g *Group) Histogram(name, help string, buckets []float64) prometheus.Observer {
	if g == nil {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	return g.r.vec("histogram", name, help, groupLabels, buckets).(*prometheus.HistogramVec).WithLabelValues(g.values...)
}

// BytesIn counts the bytes an operator read from an external system:
// splitflow_operator_bytes_in_total. Only connectors that know the size
// of what they read count it (the Kafka source: key + value + headers).
func (g *Group) BytesIn() prometheus.Counter {
	return g.Counter("operator_bytes_in_total", "Bytes an operator read from an external system (connectors that know record sizes only).")
}

// BytesOut counts the bytes an operator wrote to an external system:
// splitflow_operator_bytes_out_total.
func (g *Group) BytesOut() prometheus.Counter {
	return g.Counter("operator_bytes_out_total", "Bytes an operator wrote to an external system (connectors that know record sizes only).")
}

// Kind is the Prometheus type of a Func metric.
type Kind uint8

const (
	// GaugeKind is a value that goes up and down.
	GaugeKind Kind = iota
	// CounterKind is a total that only grows.
	CounterKind
)

// Func registers splitflow_<name>, read at scrape time: read is called
// with an emit function and emits one value per combination of the extra
// labels (values in the order of labels). read runs on the scraping
// goroutine, so it must be safe to call concurrently with the code that
// owns the values (read atomics or take a lock). The returned function
// removes the metric; call it when the values' owner is closed. A later
// Func with the same name and group replaces an earlier one that was not
// removed (an attempt of a subtask that has not closed yet).
func (g *Group) Func(kind Kind, name, help string, labels []string, read func(emit func(v float64, labelValues ...string))) (remove func()) {
	if g == nil {
		return func() {}
	}
	e := &funcEntry{
		desc:   prometheus.NewDesc(Namespace+"_"+name, help, labels, g.Labels()),
		kind:   kind,
		labels: len(labels),
		read:   read,
	}
	key := name + "\xff" + strings.Join(g.values, "\xff")
	f := g.r.funcs
	f.mu.Lock()
	f.entries[key] = e
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.entries[key] == e {
			delete(f.entries, key)
		}
		f.mu.Unlock()
	}
}

// funcCollector emits every Func metric at scrape time. It is an
// unchecked collector (it describes nothing), since its metrics come and
// go with the operators that own them.
type funcCollector struct {
	mu      sync.Mutex
	entries map[string]*funcEntry
}

type funcEntry struct {
	desc   *prometheus.Desc
	kind   Kind
	labels int
	read   func(emit func(v float64, labelValues ...string))
}

func (f *funcCollector) Describe(chan<- *prometheus.Desc) {}

func (f *funcCollector) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	entries := make([]*funcEntry, 0, len(f.entries))
	for _, e := range f.entries {
		entries = append(entries, e)
	}
	f.mu.Unlock()
	for _, e := range entries {
		vt := prometheus.GaugeValue
		if e.kind == CounterKind {
			vt = prometheus.CounterValue
		}
		e.read(func(v float64, lv ...string) {
			if len(lv) != e.labels {
				return
			}
			if m, err := prometheus.NewConstMetric(e.desc, vt, v, lv...); err == nil {
				ch <- m
			}
		})
	}
}

// GroupProvider is an optional capability of the engine's contexts
// (connector.SourceReaderContext, connector.SplitEnumeratorContext,
// connector.SinkInitContext): the metric group of the subtask or
// coordinator the context belongs to. It lives here rather than in package
// connector so that the connector contracts import no client library.
type GroupProvider interface {
	// MetricGroup returns the group; it may be called from any goroutine.
	MetricGroup() *Group
}

// GroupOf returns ctx's metric group, or nil (a valid, unexported group)
// when ctx does not provide one, as test fakes do not.
func GroupOf(ctx any) *Group {
	if p, ok := ctx.(GroupProvider); ok {
		return p.MetricGroup()
	}
	return nil
}

// Register registers a collector of the engine's own; a failure is kept
// for Err instead of failing the job.
func (r *Registry) Register(c prometheus.Collector) {
	if err := r.reg.Register(c); err != nil {
		r.mu.Lock()
		if r.funcErr == nil {
			r.funcErr = fmt.Errorf("metrics: register: %w", err)
		}
		r.mu.Unlock()
	}
}
