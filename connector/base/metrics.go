package base

import (
	"github.com/splitflow/splitflow/metrics"
)

// registerQueueMetrics exports the fill of a reader's elements queue and
// the time its fetchers spent blocked on it, read at scrape time (the
// queue's own lock, taken once per scrape, guards them). g may be nil (a
// context without metrics): nothing is exported then. The returned
// function removes the metrics; Close calls it.
func registerQueueMetrics[B any](g *metrics.Group, q *elementsQueue[B]) func() {
	rmFill := g.Func(metrics.GaugeKind, "source_elements_queue_batches",
		"Batches waiting in a source reader's elements queue, between its fetchers and its task.",
		nil, func(emit func(float64, ...string)) { emit(float64(q.Len())) })
	rmCap := g.Func(metrics.GaugeKind, "source_elements_queue_capacity",
		"Batches a source reader's elements queue holds before its fetchers block.",
		nil, func(emit func(float64, ...string)) { emit(float64(q.Cap())) })
	rmBlocked := g.Func(metrics.CounterKind, "source_fetcher_blocked_seconds_total",
		"Time a source reader's fetchers spent blocked on its full elements queue (backpressure).",
		nil, func(emit func(float64, ...string)) { emit(q.BlockedTime().Seconds()) })
	return func() { rmFill(); rmCap(); rmBlocked() }
}
