package observe

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/status"
)

// Rule: a subtask's counters are totals over the life of the board: the
// task of a new attempt starts from what its predecessor published, so a
// counter never goes back.
func TestTaskCountersContinueAcrossAttempts(t *testing.T) {
	o := New(prometheus.NewRegistry())
	ops := []Operator{{Name: "map", UID: "m"}}
	first := NewTaskStats(0, "map", 1, 2, 0, ops)
	o.TasksBuilt([]*TaskStats{first})
	first.PublishOperator(0, 10, 7)
	first.PublishTask(10, 7)
	first.PublishTimes(3, 4, 5)
	o.TaskExited(first, TaskFailed)

	second := NewTaskStats(0, "map", 1, 2, 1, ops)
	o.TasksBuilt([]*TaskStats{second})
	second.PublishOperator(0, 1, 1)
	second.PublishTask(1, 1)
	second.PublishTimes(1, 1, 1)

	st := o.Status()
	if len(st.Tasks) != 1 {
		t.Fatalf("tasks %+v, want the one subtask", st.Tasks)
	}
	if got := st.Tasks[0]; got.RecordsIn != 11 || got.RecordsOut != 8 || got.Attempt != 1 || got.State != "running" {
		t.Errorf("task %+v, want records 11 in and 8 out over both attempts, attempt 1, running", got)
	}
	if b, i, p := second.Times(); b != 4 || i != 5 || p != 6 {
		t.Errorf("times %d %d %d, want 4 5 6 over both attempts", b, i, p)
	}
	if second.RecordsIn() != 1 {
		t.Errorf("RecordsIn %d, want this attempt's 1", second.RecordsIn())
	}
}

// Rule: Status lists tasks by vertex, then subtask, whatever order they
// were built in.
func TestStatusOrdersTasksByVertexThenSubtask(t *testing.T) {
	o := New(prometheus.NewRegistry())
	o.TasksBuilt([]*TaskStats{NewTaskStats(1, "b", 0, 1, 0, nil), NewTaskStats(0, "a", 1, 2, 0, nil)})
	o.TasksBuilt([]*TaskStats{NewTaskStats(0, "a", 0, 2, 0, nil)})
	var got [][2]int
	for _, s := range o.Status().Tasks {
		got = append(got, [2]int{s.Vertex, s.Subtask})
	}
	if want := [][2]int{{0, 0}, {0, 1}, {1, 0}}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("tasks %v, want %v", got, want)
	}
}

// Rule: a failed checkpoint reports its reason and no sizes; a completed
// one reports what its acknowledgements added, a shared file counted once.
func TestCheckpointHistory(t *testing.T) {
	o := New(prometheus.NewRegistry())
	o.CheckpointTriggered(-1, 1, time.Now())
	shared := []checkpoint.FileHandle{{Name: "000001.sst", Size: 100}}
	o.CheckpointProgress(-1, 1, CheckpointSizes{Written: 5, Full: 10, Files: shared, Align: time.Second})
	o.CheckpointProgress(-1, 1, CheckpointSizes{Written: 5, Full: 10, Files: shared, Sync: time.Millisecond})
	cp := o.CheckpointCompleted(-1, 1)
	if cp.Status != "completed" || cp.SizeBytes != 10 || cp.FullSizeBytes != 120 || cp.AlignmentMillis != 1000 || cp.SyncMicros != 1000 {
		t.Errorf("completed checkpoint %+v, want 10 bytes written, 120 full (the shared file once), 1s alignment, 1ms pause", cp)
	}
	o.CheckpointTriggered(3, 2, time.Now())
	o.CheckpointProgress(3, 2, CheckpointSizes{Written: 5, Full: 5})
	o.CheckpointFailed(3, 2, "declined")
	st := o.Status().Checkpoints
	if st.Completed != 1 || st.Failed != 1 || len(st.Recent) != 2 {
		t.Fatalf("checkpoints %+v, want one completed and one failed", st)
	}
	if f := st.Recent[1]; f.Status != "failed" || f.Error != "declined" || f.SizeBytes != 0 || f.Slot == nil || *f.Slot != 3 {
		t.Errorf("failed checkpoint %+v, want failed, its reason, no size, slot 3", f)
	}
}

// Rule: the history keeps the newest checkpoints and savepoints only.
func TestHistoryKeepsTheNewest(t *testing.T) {
	o := New(prometheus.NewRegistry())
	for id := int64(1); id <= recentCheckpoints+5; id++ {
		o.CheckpointTriggered(-1, id, time.Now())
		o.CheckpointCompleted(-1, id)
		o.SavepointCompleted(status.Savepoint{Path: "sp", Checkpoint: id})
	}
	st := o.Status()
	if n := len(st.Checkpoints.Recent); n != recentCheckpoints || st.Checkpoints.Recent[0].ID != 6 {
		t.Errorf("%d checkpoints from %d, want the newest %d", n, st.Checkpoints.Recent[0].ID, recentCheckpoints)
	}
	if n := len(st.Savepoints); n != recentSavepoints || st.Savepoints[0].Checkpoint != recentCheckpoints+5-recentSavepoints+1 {
		t.Errorf("%d savepoints, want the newest %d", n, recentSavepoints)
	}
}

// Rule: the job's state follows the run's end: failed with an error,
// cancelled with a cancelled context, finished otherwise.
func TestJobEnded(t *testing.T) {
	o := New(prometheus.NewRegistry())
	o.JobStarted("job", status.Graph{}, true, time.Second)
	if st := o.Status(); st.State != status.StateRunning || st.Name != "job" || !st.Checkpoints.Enabled || st.Checkpoints.IntervalMillis != 1000 {
		t.Fatalf("status %+v, want job running with 1s checkpoints", st)
	}
	o.JobEnded(t.Context(), errors.New("boom"))
	if st := o.Status(); st.State != status.StateFailed {
		t.Errorf("state %s after an error, want failed", st.State)
	}
	o.JobEnded(t.Context(), nil)
	if st := o.Status(); st.State != status.StateFinished {
		t.Errorf("state %s, want finished", st.State)
	}
}
