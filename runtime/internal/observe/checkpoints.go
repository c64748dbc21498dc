package observe

import (
	"slices"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/status"
)

// The checkpoint methods take the slot of a distributed job's execution
// (-1: a job of one process), since every slot numbers its checkpoints
// from its own log: a record is a slot's checkpoint id.

// CheckpointTriggered records the trigger of checkpoint id at at.
func (o *Observer) CheckpointTriggered(slot int, id int64, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.find(slot, id) != nil {
		return
	}
	o.addRecord(&checkpointRecord{st: status.Checkpoint{ID: id, Slot: slotOf(slot), Status: "in_progress", TriggerTime: at}, started: time.Now()})
}

// addRecord appends r to the history, dropping the oldest beyond
// recentCheckpoints. o.mu is held.
func (o *Observer) addRecord(r *checkpointRecord) {
	o.recent = append(o.recent, r)
	if n := len(o.recent) - recentCheckpoints; n > 0 {
		o.recent = slices.Delete(o.recent, 0, n)
	}
}

func slotOf(slot int) *int {
	if slot < 0 {
		return nil
	}
	return &slot
}

func (o *Observer) find(slot int, id int64) *checkpointRecord {
	for i := len(o.recent) - 1; i >= 0; i-- {
		st := &o.recent[i].st
		if st.ID == id && (st.Slot == nil && slot < 0 || st.Slot != nil && *st.Slot == slot) {
			return o.recent[i]
		}
	}
	return nil
}

// CheckpointSizes is what one acknowledgement (or the coordinators'
// snapshots) added to a checkpoint: bytes written, the full size of the
// state it covers (with shared files stored by earlier checkpoints), its
// alignment and its task's synchronous pause.
type CheckpointSizes struct {
	Written, Full int64
	// Files are shared files the state uses, counted into the full size
	// once per checkpoint (subtasks restored from one old subtask share
	// its files).
	Files       []checkpoint.FileHandle
	Align, Sync time.Duration
}

// CheckpointProgress adds an acknowledgement to checkpoint id.
func (o *Observer) CheckpointProgress(slot int, id int64, s CheckpointSizes) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := o.find(slot, id); r != nil {
		r.st.SizeBytes += s.Written
		r.st.FullSizeBytes += s.Full
		for _, f := range s.Files {
			if r.files == nil {
				r.files = map[string]bool{}
			}
			if !r.files[f.Name] {
				r.files[f.Name] = true
				r.st.FullSizeBytes += f.Size
			}
		}
		r.st.AlignmentMillis = max(r.st.AlignmentMillis, s.Align.Milliseconds())
		r.st.SyncMicros = max(r.st.SyncMicros, s.Sync.Microseconds())
	}
}

// CheckpointCompleted records the completion of checkpoint id and returns
// its status.
func (o *Observer) CheckpointCompleted(slot int, id int64) status.Checkpoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, d := o.ended(slot, id)
	r.st.Status = "completed"
	o.completed++
	o.sinceRestart++
	o.cpTotal.WithLabelValues("completed").Inc()
	o.cpDuration.Observe(d.Seconds())
	o.cpSize.Set(float64(r.st.SizeBytes))
	o.cpFullSize.Set(float64(r.st.FullSizeBytes))
	o.cpAlign.Set(float64(r.st.AlignmentMillis) / 1000)
	o.cpSync.Set(float64(r.st.SyncMicros) / 1e6)
	return r.st
}

// CheckpointFailed records the failure of checkpoint id, for the reason
// given.
func (o *Observer) CheckpointFailed(slot int, id int64, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, _ := o.ended(slot, id)
	r.st.Status, r.st.Error = "failed", reason
	r.st.SizeBytes, r.st.FullSizeBytes, r.st.AlignmentMillis, r.st.SyncMicros = 0, 0, 0, 0
	o.failed++
	o.cpTotal.WithLabelValues("failed").Inc()
}

// ended returns the record of checkpoint id, made if the history has none,
// with its duration set. o.mu is held.
func (o *Observer) ended(slot int, id int64) (*checkpointRecord, time.Duration) {
	r := o.find(slot, id)
	if r == nil {
		r = &checkpointRecord{st: status.Checkpoint{ID: id, Slot: slotOf(slot), TriggerTime: time.Now()}, started: time.Now()}
		o.addRecord(r)
	}
	d := time.Since(r.started)
	r.st.DurationMillis = d.Milliseconds()
	return r, d
}
