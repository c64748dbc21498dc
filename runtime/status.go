package runtime

import (
	"slices"
	"time"
)

// JobStatus is a snapshot of a job as Environment.Status returns it and the
// status API (WithHTTP, /api/v1/job) serves it as JSON. Counters are totals
// since the job started (across restarts where the field says so); a
// reader derives rates by differencing two snapshots.
type JobStatus struct {
	Name string `json:"name"`
	// State is one of "created" (Execute not called yet), "running",
	// "restarting", "finished", "failed", "cancelled".
	State     string    `json:"state"`
	StartTime time.Time `json:"startTime,omitzero"`
	// Now is when the snapshot was taken, so rates need no clock of the
	// reader's own.
	Now time.Time `json:"now"`

	Graph       GraphStatus       `json:"graph"`
	Tasks       []TaskStatus      `json:"tasks"`
	Checkpoints CheckpointsStatus `json:"checkpoints"`
	// Restarts counts restarts of the job or of one of its regions.
	Restarts    int            `json:"restarts"`
	LastFailure *FailureStatus `json:"lastFailure,omitempty"`
	// Restore says where the current attempt resumed; absent before the
	// job decided it.
	Restore *RestoreStatus `json:"restore,omitempty"`
	// Savepoints lists the savepoints the job completed, oldest first
	// (at most the newest 10).
	Savepoints []Savepoint `json:"savepoints,omitempty"`
	// Distributed is this process's share of a distributed job
	// (WithDistributed); absent for a job of one process.
	Distributed *DistributedStatus `json:"distributed,omitempty"`
}

// RestoreStatus says where a run resumed: the checkpoint its newest start
// or restart restored, or a fresh start. The job listener's Restored gets
// the same.
type RestoreStatus struct {
	// Checkpoint is the id restored from; 0 for a fresh start.
	Checkpoint int64 `json:"checkpoint"`
	// Path is where that checkpoint is kept: DIR/chk-N for a checkpoint
	// directory, "memory" for the in-memory storage, the storage's type
	// otherwise.
	Path string `json:"path,omitempty"`
	// TakenAt is when the checkpoint was triggered.
	TakenAt time.Time `json:"takenAt,omitzero"`
	// Sources are the positions each source's readers resumed from.
	Sources []SourcePosition `json:"sources,omitempty"`
	// Skipped lists newer checkpoints passed over because they were
	// damaged and never reported complete (see package checkpoint).
	Skipped []string `json:"skipped,omitempty"`
	// Message is the line logged: "restored from checkpoint N at PATH,
	// taken at T" or "no checkpoint: fresh start".
	Message string `json:"message"`
	// Time is when it was decided.
	Time time.Time `json:"time"`
}

// SourcePosition is where one source's readers resumed.
type SourcePosition struct {
	Operator string `json:"operator"`
	UID      string `json:"uid"`
	// Splits are the splits the readers checkpointed, each as it formats
	// itself (fmt.Stringer; its split id otherwise): a Kafka split shows
	// topic-partition and [next offset, stopping offset). Splits the
	// enumerator had not assigned yet are not listed.
	Splits []string `json:"splits"`
	// Error says why the splits could not be decoded, if so.
	Error string `json:"error,omitempty"`
}

// GraphStatus is the job graph after chaining: one vertex per chain.
type GraphStatus struct {
	Vertices []VertexStatus `json:"vertices"`
	Edges    []EdgeStatus   `json:"edges"`
}

// VertexStatus is one chain of operators, run as Parallelism tasks.
type VertexStatus struct {
	ID          int      `json:"id"`
	Name        string   `json:"name"`      // "Source: a -> Map b"
	Operators   []string `json:"operators"` // head first
	Parallelism int      `json:"parallelism"`
}

// EdgeStatus is a network connection between two vertices.
type EdgeStatus struct {
	From int `json:"from"`
	To   int `json:"to"`
	// Partitioning is "forward", "rebalance", "hash" or "broadcast".
	Partitioning string `json:"partitioning"`
}

// TaskStatus is one subtask of a vertex in the current attempt.
type TaskStatus struct {
	Vertex  int    `json:"vertex"`
	Name    string `json:"name"`
	Subtask int    `json:"subtask"`
	Attempt int    `json:"attempt"`
	// State is "running", "finished", "failed" or "cancelled".
	State string `json:"state"`

	// RecordsIn is what the chain's head took in (for a source, what its
	// reader emitted); RecordsOut what the chain sent to other tasks plus
	// what its sinks were given. They and the times below are totals of
	// the subtask across restarts, published by the task every 200ms.
	RecordsIn  int64 `json:"recordsIn"`
	RecordsOut int64 `json:"recordsOut"`
	// Time the task spent processing, waiting for input, and waiting for
	// room in its output (backpressure), in milliseconds.
	BusyMillis          int64 `json:"busyMillis"`
	IdleMillis          int64 `json:"idleMillis"`
	BackpressuredMillis int64 `json:"backpressuredMillis"`
	// Watermark is the watermark the task passed into its chain last, in
	// milliseconds since the Unix epoch; absent before the first and once
	// the task's input has ended (MaxWatermark marks an end, not a time).
	Watermark *int64 `json:"watermark,omitempty"`
	// Splits are the ids of the splits a source task holds (assigned and
	// not finished); empty for other tasks.
	Splits []string `json:"splits,omitempty"`
}

// CheckpointsStatus summarises checkpointing; Enabled false means the job
// runs without checkpoints.
type CheckpointsStatus struct {
	Enabled        bool  `json:"enabled"`
	IntervalMillis int64 `json:"intervalMillis"`
	Completed      int64 `json:"completed"`
	Failed         int64 `json:"failed"`
	// CompletedSinceRestart counts the checkpoints completed since the
	// newest restart (all of them in a job that has not restarted): a
	// job that restarts over and over completes none.
	CompletedSinceRestart int64 `json:"completedSinceRestart"`
	// Recent holds the newest checkpoints, oldest first (at most 20).
	Recent []CheckpointStatus `json:"recent"`
}

// CheckpointStatus is one checkpoint, in progress or over.
type CheckpointStatus struct {
	ID int64 `json:"id"`
	// Slot is the slot of a distributed job whose checkpoint this is
	// (each slot numbers its own); absent in a job of one process.
	Slot *int `json:"slot,omitempty"`
	// Status is "in_progress", "completed" or "failed".
	Status      string    `json:"status"`
	TriggerTime time.Time `json:"triggerTime"`
	// DurationMillis is from trigger to durable (or to failure); for a
	// checkpoint in progress, the time so far.
	DurationMillis int64 `json:"durationMillis"`
	// SizeBytes is the state this checkpoint wrote (with the pebble
	// backend, the files new since the previous one, and the blobs);
	// FullSizeBytes all the state it covers, with the shared files earlier
	// checkpoints stored; AlignmentMillis the longest barrier alignment
	// and SyncMicros the longest synchronous pause of a state snapshot of
	// any task (at the barrier, on the task goroutine). All 0 until
	// completed.
	SizeBytes       int64  `json:"sizeBytes"`
	FullSizeBytes   int64  `json:"fullSizeBytes"`
	AlignmentMillis int64  `json:"alignmentMillis"`
	SyncMicros      int64  `json:"syncMicros"`
	Error           string `json:"error,omitempty"`
}

// FailureStatus is the newest task failure.
type FailureStatus struct {
	Time time.Time `json:"time"`
	// Task is "<vertex name> (<subtask+1>/<parallelism>)" (1-based, as
	// Flink shows it), "<operator> (coordinator)", or "checkpointing".
	Task  string `json:"task"`
	Error string `json:"error"`
}

// Status returns a snapshot of the job; safe from any goroutine, before,
// during and after Execute. Task counters are published by the tasks
// every publishInterval (200ms) and when they exit, so a running task's
// may lag by that much; after Execute returns they are exact.
func (env *Environment) Status() JobStatus {
	return env.observer().status()
}

func (o *observer) status() JobStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	js := JobStatus{
		Name:      o.name,
		State:     o.state,
		StartTime: o.start,
		Now:       time.Now(),
		Graph: GraphStatus{
			Vertices: slices.Clone(o.graph.Vertices),
			Edges:    slices.Clone(o.graph.Edges),
		},
		Tasks:       make([]TaskStatus, 0, len(o.tasks)),
		Distributed: o.distStatus(),
		Checkpoints: CheckpointsStatus{
			Enabled:               o.cpEnabled,
			IntervalMillis:        o.cpInterval.Milliseconds(),
			Completed:             o.completed,
			Failed:                o.failed,
			CompletedSinceRestart: o.sinceRestart,
			Recent:                make([]CheckpointStatus, 0, len(o.recent)),
		},
		Restarts: o.restarts,
	}
	if js.Graph.Vertices == nil {
		js.Graph.Vertices = []VertexStatus{}
	}
	if js.Graph.Edges == nil {
		js.Graph.Edges = []EdgeStatus{}
	}
	for i := range js.Graph.Vertices {
		js.Graph.Vertices[i].Operators = slices.Clone(js.Graph.Vertices[i].Operators)
	}
	for _, s := range o.tasks {
		tt := s.totals()
		ts := TaskStatus{
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
	js.Restore = o.restore.clone()
	js.Savepoints = slices.Clone(o.savepoints)
	return js
}
