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
// Jobs take turns on a registry: while one runs on reg, Execute of another
// Environment on reg fails at once with an error saying so. A job that
// ended leaves its series on reg with their final values, and the next
// job's Execute removes them before it registers its own, so a program
// can run jobs one after another on one registry.
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
