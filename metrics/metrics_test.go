package metrics

import (
	"fmt"
	"github.com/splitflow/splitflow/metrics/metricstest"
	"strings"
	"sync"
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

// Jobs take turns on one prometheus.Registry: Open is refused while
// another job's Registry is open, and after Close the next Open removes
// the previous job's series (vectors, Func families and collectors given
// to Register alike) before the new job registers its own.
func TestOpenTakesTurns(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Open(reg, "a")
	if err != nil {
		t.Fatal(err)
	}
	ga := a.Group("Map", "m", 0)
	ga.Counter("x_total", "help").Add(2)
	ga.Func(GaugeKind, "lag", "help", []string{"partition"}, func(emit func(float64, ...string)) { emit(5, "0") })
	a.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "splitflow_job_restarts_total", Help: "h"}))
	if _, err := Open(reg, "b"); err == nil || !strings.Contains(err.Error(), `job "a", which is still running`) {
		t.Fatalf("Open while a runs: %v, want refused naming a", err)
	}
	a.Close()
	if v, _ := metricstest.Sum(t, reg, "splitflow_x_total", nil); v != 2 {
		t.Errorf("after Close: x_total %v, want a's final 2", v)
	}
	b, err := Open(reg, "b")
	if err != nil {
		t.Fatalf("Open after a closed: %v", err)
	}
	for _, name := range []string{"splitflow_x_total", "splitflow_lag", "splitflow_job_restarts_total"} {
		if _, n := metricstest.Sum(t, reg, name, nil); n != 0 {
			t.Errorf("%s: %d series of the closed job remain", name, n)
		}
	}
	gb := b.Group("Map", "m", 0)
	gb.Counter("x_total", "help").Inc()
	gb.Func(GaugeKind, "lag", "help", []string{"partition"}, func(emit func(float64, ...string)) { emit(1, "0") })
	b.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "splitflow_job_restarts_total", Help: "h"}))
	if err := b.Err(); err != nil {
		t.Errorf("second job's registrations: %v", err)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_x_total", nil); v != 1 {
		t.Errorf("x_total %v, want the new job's 1", v)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

// Label values that are not UTF-8 are repaired, not refused.
func TestInvalidUTF8LabelValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewRegistry(reg).Group("M\xffap", "m\xfe", 0)
	g.Counter("x_total", "help").Inc()
	g.Func(GaugeKind, "lag", "help", []string{"topic"}, func(emit func(float64, ...string)) {
		emit(1, "ok")
		emit(2, "bad\xff") // dropped: the value is the caller's
	})
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
	if v, _ := metricstest.Sum(t, reg, "splitflow_x_total", map[string]string{"operator": "M\uFFFDap", "uid": "m\uFFFD"}); v != 1 {
		t.Errorf("x_total under the repaired labels: %v, want 1", v)
	}
	if v, n := metricstest.Sum(t, reg, "splitflow_lag", nil); v != 1 || n != 1 {
		t.Errorf("lag %v over %d series, want the valid one alone", v, n)
	}
}

// Jobs starting at once on one registry, after a job that ended: exactly
// one claims it, and its own registrations do not clash with the ended
// job's series, which it cleared.
func TestOpenRacesHaveOneWinner(t *testing.T) {
	for round := range 200 {
		reg := prometheus.NewRegistry()
		old, err := Open(reg, "old")
		if err != nil {
			t.Fatal(err)
		}
		old.Group("Map", "m", 0).Counter("x_total", "help").Inc()
		old.Close()
		const n = 4
		opened := make(chan *Registry, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if r, err := Open(reg, fmt.Sprint("job", i)); err == nil {
					opened <- r
				}
			})
		}
		wg.Wait()
		close(opened)
		var winners []*Registry
		for r := range opened {
			winners = append(winners, r)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d jobs claimed the registry, want 1", round, len(winners))
		}
		winners[0].Group("Map", "m", 0).Counter("x_total", "help").Add(3)
		if err := winners[0].Err(); err != nil {
			t.Fatalf("round %d: winner's registration: %v", round, err)
		}
		if v, _ := metricstest.Sum(t, reg, "splitflow_x_total", nil); v != 3 {
			t.Fatalf("round %d: x_total %v, want the winner's 3", round, v)
		}
	}
}
