package metrics

import (
	"github.com/splitflow/splitflow/metrics/metricstest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A group's metrics carry its labels under the splitflow_ prefix; asking
// again (a restarted subtask) returns the same series, which counts on.
func TestGroupsShareSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRegistry(reg)
	r.Group("Map", "m", 1).Counter("x_total", "help").Add(2)
	r.Group("Map", "m", 1).Counter("x_total", "help").Add(3)
	r.Group("Source", "s", -1).CounterVec("y_total", "help", "outcome").WithLabelValues("ok").Inc()
	if v, n := metricstest.Sum(t, reg, "splitflow_x_total", map[string]string{"operator": "Map", "uid": "m", "subtask": "1"}); v != 5 || n != 1 {
		t.Errorf("x_total = %v over %d series, want 5 in one", v, n)
	}
	if v, n := metricstest.Sum(t, reg, "splitflow_y_total", map[string]string{"subtask": CoordinatorSubtask, "outcome": "ok"}); v != 1 || n != 1 {
		t.Errorf("y_total = %v over %d series, want 1", v, n)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
}

// Func metrics are read at scrape time, replaced by a newer registration
// of the same group, and gone once removed; a stale remove does not take
// the newer one with it.
func TestFuncMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewRegistry(reg).Group("Source", "s", 0)
	v := 1.0
	rmOld := g.Func(GaugeKind, "lag", "help", []string{"partition"}, func(emit func(float64, ...string)) { emit(v, "0") })
	if got, _ := metricstest.Sum(t, reg, "splitflow_lag", nil); got != 1 {
		t.Errorf("lag = %v, want 1", got)
	}
	v = 7
	if got, _ := metricstest.Sum(t, reg, "splitflow_lag", nil); got != 7 {
		t.Errorf("lag = %v after a change, want 7 (read at scrape)", got)
	}
	rmNew := g.Func(GaugeKind, "lag", "help", []string{"partition"}, func(emit func(float64, ...string)) { emit(42, "0") })
	rmOld()
	if got, n := metricstest.Sum(t, reg, "splitflow_lag", nil); got != 42 || n != 1 {
		t.Errorf("lag = %v over %d series, want the newer registration's 42 alone", got, n)
	}
	rmNew()
	if _, n := metricstest.Sum(t, reg, "splitflow_lag", nil); n != 0 {
		t.Errorf("%d series after remove", n)
	}
}

// A nil group works and exports nothing: connectors need not check for
// contexts without metrics.
func TestNilGroup(t *testing.T) {
	var g *Group
	g.Counter("a", "h").Inc()
	g.CounterVec("b", "h", "l").WithLabelValues("x").Inc()
	g.Gauge("c", "h").Set(1)
	g.Histogram("d", "h", nil).Observe(1)
	g.BytesIn().Add(3)
	g.Func(GaugeKind, "e", "h", nil, nil)()
	if GroupOf(struct{}{}) != nil {
		t.Error("GroupOf of a context without metrics is not nil")
	}
}

// Two jobs on one registry: the second one's registrations fail, and Err
// says so.
func TestSharedRegistryReported(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewRegistry(reg), NewRegistry(reg)
	a.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "splitflow_job_restarts_total", Help: "h"}))
	b.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "splitflow_job_restarts_total", Help: "h"}))
	if a.Err() != nil {
		t.Errorf("first registry: %v", a.Err())
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "register") {
		t.Errorf("second registry: Err = %v, want the failed registration", err)
	}
}
