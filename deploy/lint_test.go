package deploy

import (
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// Helm's own linter, as `helm lint --strict deploy/helm/splitflow` runs it,
// finds nothing of WARNING severity or above in the chart: with the
// chart's defaults alone (what `helm lint` without values sees; in lint
// mode the templates' fail calls are only logged, so the required values'
// absence is no finding), with the required values, and with every
// optional object on (the KEDA ScaledObject, the ServiceMonitor).
//
// Warnings fail the test, not only errors: a warning is a rule a chart
// repository's CI holds charts to (`helm lint --strict`, chart-testing),
// such as a template that renders no valid top-level YAML or an API
// version the target Kubernetes removed. INFO findings (no icon in
// Chart.yaml) are advice, logged only.
func TestChartPassesHelmLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{
		{"defaults", nil},
		{"required values", required()},
		{"KEDA, ServiceMonitor and every option", allOn()},
		{"KEDA on Prometheus", merge(required(), map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "trigger": "prometheus",
			"prometheus": map[string]any{"serverAddress": "http://prometheus-operated.monitoring:9090"}}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lint.All(chartDir, tc.vals, "streams", true)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}
