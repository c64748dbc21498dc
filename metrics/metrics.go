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
// Jobs take turns on a prometheus.Registry (Open, Close): one job's
// metrics at a time, the previous job's removed when the next one opens.
// Every collector registered here describes its metrics, since the
// registry cannot unregister one that does not. Operator and uid labels are
// made valid UTF-8.
//
// Hot paths never call into this package per record. Counters are added to
// per batch or per fetch, and values the engine keeps in plain fields of its
// goroutines are published to atomics and read at scrape time (Func
// metrics).
package metrics

import (
	"errors"
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
	funcs    map[string]*funcFamily
	funcErr  error
	// owned is every collector this Registry registered, so that the
	// next job on the same prometheus.Registry can remove them.
	owned []prometheus.Collector
	// claim marks the prometheus.Registry as this job's while it runs
	// (Open); nil for a Registry made with NewRegistry.
	claim  *claimCollector
	closed bool
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
	return &Registry{reg: reg, gath: reg, families: map[string]*family{}, funcs: map[string]*funcFamily{}}
}

// Open returns the Registry of a job that is about to run on reg, which
// it holds until Close. Jobs may use one prometheus.Registry one after
// another, never at the same time:
//
//   - While another job's Registry is open on reg, Open fails with an
//     error naming that job.
//   - A closed Registry's metrics stay on reg with their final values
//     (a last scrape, or a program that reads them after the job, sees
//     its totals); the next Open on reg unregisters them first, so the
//     new job's series start afresh instead of clashing with them.
//
// job names the job in that error.
func Open(reg *prometheus.Registry, job string) (*Registry, error) {
	// Opens are rare; one at a time, so that clearing a finished job's
	// series and claiming the registry cannot interleave with another
	// job doing the same.
	openMu.Lock()
	defer openMu.Unlock()
	for {
		r := NewRegistry(reg)
		c := &claimCollector{job: job, r: r}
		r.claim, r.owned = c, []prometheus.Collector{c}
		err := reg.Register(c)
		if err == nil {
			return r, nil
		}
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("metrics: claim the registry: %w", err)
		}
		prev, ok := are.ExistingCollector.(*claimCollector)
		if !ok {
			return nil, fmt.Errorf("metrics: claim the registry: %w", err)
		}
		if !prev.r.isClosed() {
			return nil, fmt.Errorf("metrics: the registry holds the metrics of job %q, which is still running", prev.job)
		}
		// The previous job has ended: its series make way.
		prev.r.unregisterAll()
	}
}

var openMu sync.Mutex

// Close ends the job's use of its prometheus.Registry: the next Open on
// it succeeds. The metrics stay registered until then (see Open).
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// unregisterAll removes every collector r registered, its claim included.
func (r *Registry) unregisterAll() {
	r.mu.Lock()
	owned := r.owned
	r.owned = nil
	r.mu.Unlock()
	// The claim was registered first: removing it last keeps the
	// registry claimed until the rest is gone.
	for _, c := range slices.Backward(owned) {
		r.reg.Unregister(c)
	}
}

// claimCollector marks a prometheus.Registry as holding one job's metrics.
// It describes one metric and collects none: only its description matters,
// since a second description of the same metric is what the registry
// refuses, which makes the claim atomic.
type claimCollector struct {
	job string
	r   *Registry
}

var claimDesc = prometheus.NewDesc(Namespace+"_registry_claim",
	"Marks a registry as holding the metrics of one splitflow job; never exported.", nil, nil)

func (c *claimCollector) Describe(ch chan<- *prometheus.Desc) { ch <- claimDesc }
func (c *claimCollector) Collect(chan<- prometheus.Metric)    {}

// LabelValue returns s as a valid label value: Prometheus refuses label
// values that are not UTF-8 (a client library panics on them), and
// operator names come from the job's author, so invalid bytes become
// U+FFFD instead.
func LabelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

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
	return &Group{r: r, values: []string{LabelValue(operator), LabelValue(uid), s}}
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
		// Something else registered the same name on this registry: keep
		// counting into an unregistered vector rather than fail the
		// operator, and let Err tell the job's owner.
		if r.funcErr == nil {
			r.funcErr = fmt.Errorf("metrics: register %s_%s: %w", Namespace, name, err)
		}
	} else {
		r.owned = append(r.owned, c)
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
// removed (an attempt of a subtask that has not closed yet). Asking for an
// existing name with another kind or other labels is a programming error
// and panics with both definitions.
func (g *Group) Func(kind Kind, name, help string, labels []string, read func(emit func(v float64, labelValues ...string))) (remove func()) {
	if g == nil {
		return func() {}
	}
	f := g.r.funcFamily(kind, name, help, labels)
	e := &funcEntry{group: g.values, read: read}
	key := strings.Join(g.values, "\xff")
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

// funcFamily returns the collector of the Func metrics named name,
// creating and registering it on first use, as vec does for the others.
func (r *Registry) funcFamily(kind Kind, name, help string, labels []string) *funcFamily {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.funcs[name]; ok {
		if f.kind != kind || !slices.Equal(f.labels, labels) {
			panic(fmt.Sprintf("metrics: %s_%s asked for as Func kind %d%v, already defined as kind %d%v", Namespace, name, kind, labels, f.kind, f.labels))
		}
		return f
	}
	f := &funcFamily{
		desc:    prometheus.NewDesc(Namespace+"_"+name, help, append(slices.Clip(groupLabels), labels...), nil),
		kind:    kind,
		labels:  slices.Clone(labels),
		entries: map[string]*funcEntry{},
	}
	if err := r.reg.Register(f); err != nil {
		if r.funcErr == nil {
			r.funcErr = fmt.Errorf("metrics: register %s_%s: %w", Namespace, name, err)
		}
	} else {
		r.owned = append(r.owned, f)
	}
	r.funcs[name] = f
	return f
}

// funcFamily emits the Func metrics of one name, of every group, at scrape
// time. It describes its one metric, so the registry checks it like any
// other and it can be unregistered (a collector that describes nothing
// cannot be).
type funcFamily struct {
	desc   *prometheus.Desc
	kind   Kind
	labels []string // the extra labels, after the group's

	mu      sync.Mutex
	entries map[string]*funcEntry // by group
}

type funcEntry struct {
	group []string // operator, uid, subtask
	read  func(emit func(v float64, labelValues ...string))
}

func (f *funcFamily) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f *funcFamily) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	entries := make([]*funcEntry, 0, len(f.entries))
	for _, e := range f.entries {
		entries = append(entries, e)
	}
	f.mu.Unlock()
	vt := prometheus.GaugeValue
	if f.kind == CounterKind {
		vt = prometheus.CounterValue
	}
	for _, e := range entries {
		e.read(func(v float64, lv ...string) {
			if len(lv) != len(f.labels) {
				return
			}
			// A value that is no valid label (not UTF-8) loses its
			// series, not the scrape.
			if m, err := prometheus.NewConstMetric(f.desc, vt, v, append(slices.Clip(e.group), lv...)...); err == nil {
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
	err := r.reg.Register(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.owned = append(r.owned, c)
	case r.funcErr == nil:
		r.funcErr = fmt.Errorf("metrics: register: %w", err)
	}
}
