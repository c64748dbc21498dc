package observe

import (
	"slices"
	"time"

	"github.com/splitflow/splitflow/runtime/status"
)

// Status returns a snapshot of the job; safe from any goroutine.
func (o *Observer) Status() status.Job {
	o.mu.Lock()
	defer o.mu.Unlock()
	js := status.Job{
		Name:      o.name,
		State:     o.state,
		StartTime: o.start,
		Now:       time.Now(),
		Graph: status.Graph{
			Vertices: slices.Clone(o.graph.Vertices),
			Edges:    slices.Clone(o.graph.Edges),
		},
		Tasks:       make([]status.Task, 0, len(o.tasks)),
		Distributed: o.distStatus(),
		Checkpoints: status.Checkpoints{
			Enabled:               o.cpEnabled,
			IntervalMillis:        o.cpInterval.Milliseconds(),
			Completed:             o.completed,
			Failed:                o.failed,
			CompletedSinceRestart: o.sinceRestart,
			Recent:                make([]status.Checkpoint, 0, len(o.recent)),
		},
		Restarts: o.restarts,
	}
	if js.Graph.Vertices == nil {
		js.Graph.Vertices = []status.Vertex{}
	}
	if js.Graph.Edges == nil {
		js.Graph.Edges = []status.Edge{}
	}
	for i := range js.Graph.Vertices {
		js.Graph.Vertices[i].Operators = slices.Clone(js.Graph.Vertices[i].Operators)
	}
	for _, s := range o.tasks {
		tt := s.totals()
		ts := status.Task{
			Vertex: s.vertex, Name: s.name, Subtask: s.subtask, Attempt: s.attempt, State: s.state,
			RecordsIn: tt.recordsIn, RecordsOut: tt.recordsOut,
			BusyMillis: tt.busyNs / 1e6, IdleMillis: tt.idleNs / 1e6, BackpressuredMillis: tt.bpNs / 1e6,
		}
		if wm, ok := s.currentWatermark(); ok {
			ts.Watermark = &wm
		}
		s.splitsMu.Lock()
		ts.Splits = slices.Clone(s.splits)
		s.splitsMu.Unlock()
		js.Tasks = append(js.Tasks, ts)
	}
	for _, r := range o.recent {
		st := r.st
		if st.Status == "in_progress" {
			// Sizes, alignment and pause are reported once complete
			// (the acknowledgements so far add to them); the duration
			// so far is.
			st.DurationMillis = time.Since(r.started).Milliseconds()
			st.SizeBytes, st.FullSizeBytes, st.AlignmentMillis, st.SyncMicros = 0, 0, 0, 0
		}
		js.Checkpoints.Recent = append(js.Checkpoints.Recent, st)
	}
	if o.lastFailure != nil {
		f := *o.lastFailure
		js.LastFailure = &f
	}
	js.Restore = cloneRestore(o.restore)
	js.Savepoints = slices.Clone(o.savepoints)
	return js
}

// cloneRestore is a deep copy of st, nil for nil.
func cloneRestore(st *status.Restore) *status.Restore {
	if st == nil {
		return nil
	}
	c := *st
	c.Skipped = slices.Clone(st.Skipped)
	c.Sources = slices.Clone(st.Sources)
	for i := range c.Sources {
		c.Sources[i].Splits = slices.Clone(c.Sources[i].Splits)
	}
	return &c
}
