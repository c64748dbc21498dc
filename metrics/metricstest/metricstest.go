// Package metricstest reads metrics back from a Prometheus gatherer in
// tests of the engine and of connectors.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds up the samples of metric name whose labels include every pair
// of labels (nil matches every series) and returns the sum and the number
// of series that matched. Counters and gauges add their values, histograms
// and summaries their observation counts.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (sum float64, series int) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			series++
			sum += value(mf.GetType(), m)
		}
	}
	return sum, series
}

func value(tp dto.MetricType, m *dto.Metric) float64 {
	switch tp {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	case dto.MetricType_SUMMARY:
		return float64(m.GetSummary().GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}
