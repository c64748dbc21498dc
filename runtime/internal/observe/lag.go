package observe

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
)

// labelJobName labels the job-level gauges an autoscaler reads
// (splitflow_source_lag_records) with the job's name: the distributed
// job's name (Distributed.Job), else the name given to Execute. It is not
// "job", which Prometheus gives every scraped series (the scrape job's
// name) and which would rename a label of ours to exported_job.
const labelJobName = "job_name"

// sourceLag is the job's input lag in this process: the readers of its
// sources that are connector.LagReporters, from their open to their close.
// Source tasks add and remove readers on their goroutines; a scrape sums
// them on its own.
type sourceLag struct {
	mu      sync.Mutex
	readers map[any]connector.LagReporter // by the key each was added with
}

// add counts r's lag under key until the returned function is called.
func (l *sourceLag) add(key any, r connector.LagReporter) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.readers == nil {
		l.readers = map[any]connector.LagReporter{}
	}
	l.readers[key] = r
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.readers, key)
	}
}

// sum is the lag of every reader counted now. The readers are asked
// outside the lock: a reader's LagRecords does not block, but a task
// closing its reader must not wait for a scrape.
func (l *sourceLag) sum() int64 {
	l.mu.Lock()
	rs := make([]connector.LagReporter, 0, len(l.readers))
	for _, r := range l.readers {
		rs = append(rs, r)
	}
	l.mu.Unlock()
	var n int64
	for _, r := range rs {
		n += r.LagRecords()
	}
	return n
}

// gauge is the job's splitflow_source_lag_records, labelled with its name.
//
// Every process of a distributed job reports the readers of the slots it
// runs, so the job's lag is the sum over its processes' series; a slot
// that is moving counts in neither process, from its old owner's final
// checkpoint until its new owner has fetched (a handover's time).
func (l *sourceLag) gauge(jobName string) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "source_lag_records",
		Help: "Records of the job's input that its sources have not read yet, summed over the readers of every source this process runs " +
			"(a distributed job: of the slots it owns; the shuffle's internal topics are not counted). " +
			"The job's lag is the sum over its processes: sum(splitflow_source_lag_records{job_name=\"...\"}).",
		ConstLabels: prometheus.Labels{labelJobName: metrics.LabelValue(jobName)},
	}, func() float64 { return float64(l.sum()) })
}

// AddLag counts r's lag under key (any value unique to r's reader; the
// engine gives each source subtask a new one) in the job's
// splitflow_source_lag_records until the returned function is called.
func (o *Observer) AddLag(key any, r connector.LagReporter) (remove func()) {
	return o.lag.add(key, r)
}
