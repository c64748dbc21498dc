package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metricsConfig struct {
	registry *prometheus.Registry
}

// WithMetricsRegistry registers the job's metrics (every splitflow_* metric
// of the engine and of its connectors, and the franz-go client metrics of
// the Kafka connectors) on reg, and serves reg at /metrics with WithHTTP.
// One registry holds the metrics of one job: a second Environment on the
// same registry makes Execute fail with an error saying so.
//
// Default: a private registry per Environment, holding the job's metrics
// and the Go runtime and process collectors, so that two jobs in one
// process never clash on registration.
func WithMetricsRegistry(reg *prometheus.Registry) Option {
	return optionFunc(func(c *config) { c.metrics.registry = reg })
}

// newRegistry returns the configured registry or a new private one.
func (c *metricsConfig) newRegistry() *prometheus.Registry {
	if c.registry != nil {
		return c.registry
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
