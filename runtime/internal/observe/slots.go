package observe

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/status"
)

// slotMetrics are a distributed job's metrics; registered with the rest
// (Observer.Attach), flat for a job of one process.
type slotMetrics struct {
	owned      prometheus.Gauge
	rebalances prometheus.Counter
	handover   *prometheus.HistogramVec
}

func newSlotMetrics() slotMetrics {
	return slotMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "slots_owned",
			Help: "Slots of a distributed job this process runs now.",
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "slot_rebalances_total",
			Help: "Assignment changes of a distributed job's group that gave this process slots or took them.",
		}),
		handover: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "slot_handover_seconds",
			Help:    "Handover of slots: phase claim is from a slot's assignment to its tasks running (claim in its log, restore); phase release from a revocation to its slots stopped (final checkpoint, commit).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"phase"}),
	}
}

func (m slotMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.owned, m.rebalances, m.handover}
}

// DistStarted marks the status as a distributed job's.
func (o *Observer) DistStarted(job string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dist = &status.Distributed{Job: job, Slots: []status.Slot{}}
}

// SlotChange records one rebalance step: member, the slots assigned (in
// generation gen) and revoked.
func (o *Observer) SlotChange(member string, gen int64, assigned, revoked []int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dist == nil {
		return
	}
	o.dist.Member = member
	o.dist.Rebalances++
	o.dist.Slots = slices.DeleteFunc(o.dist.Slots, func(s status.Slot) bool {
		return slices.Contains(revoked, s.Slot) || slices.Contains(assigned, s.Slot)
	})
	now := time.Now()
	for _, s := range assigned {
		o.dist.Slots = append(o.dist.Slots, status.Slot{Slot: s, Generation: gen, Since: now})
	}
	slices.SortFunc(o.dist.Slots, func(a, b status.Slot) int { return a.Slot - b.Slot })
	o.slotM.owned.Set(float64(len(o.dist.Slots)))
	o.slotM.rebalances.Inc()
}

// SlotRunning records that slot runs under the claim of epoch, restored
// from checkpoint restored (0: fresh, or from savepoint).
func (o *Observer) SlotRunning(slot int, epoch, restored int64, savepoint string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dist == nil {
		return
	}
	for i := range o.dist.Slots {
		if s := &o.dist.Slots[i]; s.Slot == slot {
			s.Epoch, s.Restored, s.Savepoint, s.Running = epoch, restored, savepoint, true
			o.slotM.handover.WithLabelValues("claim").Observe(time.Since(s.Since).Seconds())
		}
	}
}

// SlotEnded drops slot, which ended by itself (lost, or its job ended).
func (o *Observer) SlotEnded(slot int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dist == nil {
		return
	}
	o.dist.Slots = slices.DeleteFunc(o.dist.Slots, func(s status.Slot) bool { return s.Slot == slot })
	o.slotM.owned.Set(float64(len(o.dist.Slots)))
}

// SlotsStopped drops every slot: the process stopped them all and left
// the group, so it runs none, whichever slots its last generation gave it.
func (o *Observer) SlotsStopped() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dist == nil {
		return
	}
	o.dist.Slots = o.dist.Slots[:0]
	o.slotM.owned.Set(0)
}

// SlotsReleased records how long releasing revoked slots took.
func (o *Observer) SlotsReleased(d time.Duration) {
	o.slotM.handover.WithLabelValues("release").Observe(d.Seconds())
}

func (o *Observer) distStatus() *status.Distributed {
	if o.dist == nil {
		return nil
	}
	d := *o.dist
	d.Slots = slices.Clone(d.Slots)
	return &d
}
