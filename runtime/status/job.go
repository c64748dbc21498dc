package status

import "time"

// State is a job's state in its status. Its JSON form is the constant's
// string.
type State string

// The states of a job, in the order a run goes through them.
const (
	// StateCreated: Execute has not been called yet.
	StateCreated State = "created"
	// StateRunning: the job's tasks run.
	StateRunning State = "running"
	// StateRestarting: a failure stopped the job, or a region of it, which
	// waits for its restart.
	StateRestarting State = "restarting"
	// StateFinished: every source ended and everything they produced
	// reached the sinks.
	StateFinished State = "finished"
	// StateFailed: Execute returned an error.
	StateFailed State = "failed"
	// StateCancelled: the job was stopped (Execute's context cancelled,
	// POST /api/v1/job/stop, a stop with a savepoint).
	StateCancelled State = "cancelled"
)

// Job is a snapshot of a job as runtime's Environment.Status returns it
// and the status server serves it as JSON at /api/v1/job. Counters are
// totals since the job started (across restarts where the field says so);
// a reader derives rates by differencing two snapshots.
type Job struct {
	Name      string    `json:"name"`
	State     State     `json:"state"`
	StartTime time.Time `json:"startTime,omitzero"`
	// Now is when the snapshot was taken, so rates need no clock of the
	// reader's own.
	Now time.Time `json:"now"`

	Graph       Graph       `json:"graph"`
	Tasks       []Task      `json:"tasks"`
	Checkpoints Checkpoints `json:"checkpoints"`
	// Restarts counts restarts of the job or of one of its regions.
	Restarts    int      `json:"restarts"`
	LastFailure *Failure `json:"lastFailure,omitempty"`
	// Restore says where the current attempt resumed; absent before the
	// job decided it.
	Restore *Restore `json:"restore,omitempty"`
	// Savepoints lists the savepoints the job completed, oldest first
	// (at most the newest 10).
	Savepoints []Savepoint `json:"savepoints,omitempty"`
	// Distributed is this process's share of a distributed job
	// (runtime.WithDistributed); absent for a job of one process.
	Distributed *Distributed `json:"distributed,omitempty"`
}

// Restore says where a run resumed: the checkpoint its newest start or
// restart restored, or a fresh start. The job listener's Restored gets the
// same.
type Restore struct {
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

// Graph is the job graph after chaining: one vertex per chain.
type Graph struct {
	Vertices []Vertex `json:"vertices"`
	Edges    []Edge   `json:"edges"`
}

// Vertex is one chain of operators, run as Parallelism tasks.
type Vertex struct {
	ID          int      `json:"id"`
	Name        string   `json:"name"`      // "Source: a -> Map b"
	Operators   []string `json:"operators"` // head first
	Parallelism int      `json:"parallelism"`
}

// Edge is a network connection between two vertices.
type Edge struct {
	From int `json:"from"`
	To   int `json:"to"`
	// Partitioning is "forward", "rebalance", "hash" or "broadcast".
	Partitioning string `json:"partitioning"`
}

// Task is one subtask of a vertex in the current attempt.
type Task struct {
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

// Checkpoints summarises checkpointing; Enabled false means the job runs
// without checkpoints.
type Checkpoints struct {
	Enabled        bool  `json:"enabled"`
	IntervalMillis int64 `json:"intervalMillis"`
	Completed      int64 `json:"completed"`
	Failed         int64 `json:"failed"`
	// CompletedSinceRestart counts the checkpoints completed since the
	// newest restart (all of them in a job that has not restarted): a
	// job that restarts over and over completes none.
	CompletedSinceRestart int64 `json:"completedSinceRestart"`
	// Recent holds the newest checkpoints, oldest first (at most 20).
	Recent []Checkpoint `json:"recent"`
}

// Checkpoint is one checkpoint, in progress or over.
type Checkpoint struct {
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

// Failure is the newest task failure.
type Failure struct {
	Time time.Time `json:"time"`
	// Task is "<vertex name> (<subtask+1>/<parallelism>)" (1-based, as
	// Flink shows it), "<operator> (coordinator)", or "checkpointing".
	Task  string `json:"task"`
	Error string `json:"error"`
}

// Savepoint is a completed savepoint: where it is and which checkpoint of
// the job it copies. runtime's TriggerSavepoint and StopWithSavepoint
// return it, and POST /api/v1/savepoints answers it as JSON.
type Savepoint struct {
	// Path is the savepoint's directory or s3:// URL, what
	// runtime.WithRestoreFrom takes.
	Path string `json:"path"`
	// Checkpoint is the id of the job's checkpoint it copies.
	Checkpoint int64 `json:"checkpoint"`
	// TakenAt is when that checkpoint was triggered.
	TakenAt time.Time `json:"takenAt"`
}

// Distributed is a process's share of a distributed job
// (runtime.WithDistributed): the group member it is and the slots it runs.
type Distributed struct {
	Job string `json:"job"`
	// Member is the process's member id in the job's consumer group; ""
	// before it joined.
	Member string `json:"member,omitempty"`
	// Slots are the slots the process runs now, by slot.
	Slots []Slot `json:"slots"`
	// Rebalances counts the group's assignment changes this process took
	// part in.
	Rebalances int `json:"rebalances"`
}

// Slot is one slot a process runs.
type Slot struct {
	Slot int `json:"slot"`
	// Generation is the group generation the slot was assigned in; Epoch
	// the epoch of this process's claim in the slot's log (0 while it is
	// being claimed).
	Generation int64 `json:"generation"`
	Epoch      int64 `json:"epoch,omitempty"`
	// Restored is the checkpoint the slot was restored from (its log's
	// restore point); 0 for a fresh slot or while it is being claimed.
	Restored int64 `json:"restored,omitempty"`
	// Savepoint is the savepoint the slot took its share of, its log
	// naming no checkpoint (runtime.WithRestoreFrom, or the job's start
	// record).
	Savepoint string `json:"savepoint,omitempty"`
	// Since is when the slot was assigned to this process.
	Since time.Time `json:"since"`
	// Running: claimed and restored, its tasks run.
	Running bool `json:"running"`
}
