package runtime

import "github.com/splitflow/splitflow/runtime/internal/engine"

// Checkpoint completion is told in two phases, so that nothing upstream
// of a sink acts on a checkpoint whose output is not committed yet.
//
//  1. When checkpoint N is durable, the master tells the operator
//     coordinators and the sink operators (engine.OutputCommitter) of
//     every task. A sink task commits what is due and, once no commit of
//     a checkpoint <= N is left to retry, reports N committed to the
//     master.
//  2. When every sink task of a failover region (the whole job unless it
//     is made of independent pipelines) has reported N or later, the
//     master tells the region's other operators (source readers) of the
//     newest such N. A reader that commits its offsets to an external
//     system (the Kafka source's consumer group) therefore never records
//     a position whose records are not in the committed output: a commit
//     that is still retrying, or that failed (the task fails and reports
//     nothing), holds the notification back. Later checkpoints subsume
//     earlier ones: a reader hears of the newest committed checkpoint
//     only, never of an older one after a newer.
//
// The final checkpoint of a bounded job ends each task only in phase 2,
// so that its readers hear of it before they close.

// notifySinks is phase 1 on the task: the chain's sink operators, tail
// first, hear that checkpoint id is durable.
func (t *task) notifySinks(id int64) error {
	for i := len(t.ops) - 1; i >= 0; i-- {
		if n, ok := t.ops[i].(engine.OutputCommitter); ok {
			if err := n.NotifyCheckpointComplete(id); err != nil {
				return t.ops[i].Info().Wrap(err)
			}
		}
	}
	t.sinkNotified = max(t.sinkNotified, id)
	t.reportCommitted()
	return nil
}

// reportCommitted tells the master the newest checkpoint whose commits
// this task has all settled, once no commit of it is left to retry.
func (t *task) reportCommitted() {
	if t.sinkNotified <= t.sinkReported {
		return
	}
	for _, op := range t.ops {
		if c, ok := op.(engine.Committing); ok && c.CommitsPending() {
			return
		}
	}
	t.sinkReported = t.sinkNotified
	t.ex.committed(t, t.sinkReported)
}

// notifyCommitted is phase 2 on the task: the operators that are not sinks
// (source readers), tail first, hear that checkpoint id is complete and
// its output committed.
func (t *task) notifyCommitted(id int64) error {
	for i := len(t.ops) - 1; i >= 0; i-- {
		if _, ok := t.ops[i].(engine.OutputCommitter); ok {
			continue
		}
		if n, ok := t.ops[i].(engine.CheckpointNotified); ok {
			if err := n.NotifyCheckpointComplete(id); err != nil {
				return t.ops[i].Info().Wrap(err)
			}
		}
	}
	return nil
}

// hasOutputCommitter reports whether the chain holds a sink operator.
func (t *task) hasOutputCommitter() bool {
	for _, op := range t.ops {
		if _, ok := op.(engine.OutputCommitter); ok {
			return true
		}
	}
	return false
}

// notifyComplete is phase 1 on the master, for checkpoint id (final: the
// final checkpoint of a bounded job).
func (ex *execution) notifyComplete(id int64, final bool) {
	ex.completedID = max(ex.completedID, id)
	if final {
		ex.finalID = id
	}
	for _, c := range ex.coords {
		c.NotifyCheckpointComplete(id)
	}
	for _, t := range ex.tasks {
		if t.hasOutputCommitter() {
			t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "checkpoint complete", Run: func() error { return t.notifySinks(id) }})
		}
	}
	ex.release()
}

// committed is a sink task's report that every commit of checkpoints <= id
// is settled; called on the task goroutine.
func (ex *execution) committed(t *task, id int64) {
	if ex == nil {
		return // a task driven by hand in a test
	}
	ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "committed", Run: func() error {
		if ex.current(t) {
			t.committedID = max(t.committedID, id)
			ex.release()
		}
		return nil
	}})
}

// release is phase 2 on the master: each region's tasks hear of the newest
// checkpoint that all of the region's sink tasks committed, and, once that
// is the final checkpoint, finish.
func (ex *execution) release() {
	ex.noteOutputCommitted()
	upTo := map[int]int64{}
	for _, t := range ex.tasks {
		r := ex.notifyRegion(t)
		if _, ok := upTo[r]; !ok {
			upTo[r] = ex.completedID
		}
		if t.hasOutputCommitter() {
			upTo[r] = min(upTo[r], t.committedID)
		}
	}
	for _, t := range ex.tasks {
		id := upTo[ex.notifyRegion(t)]
		if id <= t.releasedID {
			continue
		}
		t.releasedID = id
		t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "checkpoint committed", Run: func() error { return t.notifyCommitted(id) }})
		if ex.finalID > 0 && id >= ex.finalID {
			t.mb.Put(engine.PriorityUrgent, engine.Mail{Name: "finish", Run: func() error {
				t.finishRequested = true
				t.tryFinish()
				return nil
			}})
		}
	}
}

// noteOutputCommitted moves outputCommitted to the newest checkpoint
// every sink task has committed (the newest completed one in a job without
// sinks that commit), and marks the savepoints of checkpoints up to it.
// The minimum is over the tasks of this attempt; outputCommitted keeps the
// highest it reached, since a checkpoint whose output was committed stays
// so when a restart builds new tasks.
func (ex *execution) noteOutputCommitted() {
	upTo := ex.completedID
	for _, t := range ex.tasks {
		if t.hasOutputCommitter() {
			upTo = min(upTo, t.committedID)
		}
	}
	if upTo <= ex.outputCommitted.Load() {
		return
	}
	ex.outputCommitted.Store(upTo)
	keep := ex.unmarked[:0]
	for _, sp := range ex.unmarked {
		if sp.id > upTo {
			keep = append(keep, sp)
			continue
		}
		ex.snapWG.Go(func() { sp.markCommitted(ex.log) })
	}
	ex.unmarked = keep
}

// notifyRegion is the failover region of t for phase 2: its subtask in a
// job of independent pipelines, -1 (the whole job) otherwise.
func (ex *execution) notifyRegion(t *task) int {
	if ex.pointwise {
		return t.region
	}
	return -1
}
