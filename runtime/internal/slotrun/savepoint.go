package slotrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/slots"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/status"
)

// MergeGraph is what the merge of a savepoint needs of the job's graph.
type MergeGraph struct {
	// Prints are the fingerprint entries of the job in one process: its
	// operators less the shuffles' (the cut's).
	Prints map[string]stateformat.OperatorPrint
	// Operators are the job's operators by UID.
	Operators map[string]MergeOperator
}

// MergeOperator is one operator of a MergeGraph.
type MergeOperator struct {
	// Cut: one of the shuffles' operators, whose state a job in one
	// process does not have.
	Cut bool
	// MergeCoordinators makes, for a source, the enumerator state of a
	// job in one process from the slots' (the source's
	// connector.SlotEnumeratorStateMerger); nil for an operator that is
	// no source.
	MergeCoordinators func(states [][]byte) ([]byte, error)
}

// Savepoints of a distributed job (scale-out.md, "Savepoints of a
// distributed job"): an operator's command creates a request in the
// job's checkpoint root (slots.SavepointsPath); every process reads it
// (savepointPoll), drains its slots for it (runtime/savepointdrain.go) and
// records each slot's final checkpoint; the process that takes on the
// merge once every slot recorded its own writes the savepoint, in the
// form of a job in one process at parallelism = slots, and the result.
// Then the processes stop (a stop: Execute returns ErrStopped) or their
// slots go on from their final checkpoints.

// savepointPoll is how often a distributed process reads the job's
// savepoint requests: a listing of SavepointsPath (a directory, or one
// request on S3), and a read of the newest request's records while one is
// open.
const savepointPoll = 500 * time.Millisecond

// watchSavepoints reads the job's savepoint requests until ctx ends,
// publishing what it read in dr.spLatest and on dr.spCh.
func (dr *driver) watchSavepoints(ctx context.Context) {
	tk := time.NewTicker(savepointPoll)
	defer tk.Stop()
	var last []byte
	for {
		st, err := slots.ReadSavepoints(dr.spStore)
		if err != nil {
			dr.log.Warn("splitflow: the job's savepoint requests could not be read", "err", err)
		} else {
			b, _ := json.Marshal(st)
			if string(b) != string(last) {
				last = b
				dr.spLatest.Store(&st)
				select {
				case dr.spCh <- st:
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// savepointStep applies what the job's savepoint requests say, on the
// driver's goroutine: true when the process is to stop (its request was
// a stop, and the savepoint is taken).
func (dr *driver) savepointStep(st slots.SavepointState) bool {
	seq := st.Request.Seq
	if st.Open(time.Now()) {
		if dr.spSeq != seq {
			dr.spSeq = seq
			dr.log.Info("splitflow: savepoint of the job requested; the slots drain for it", "request", seq, "stop", st.Request.Stop, "target", st.Request.Target)
			for _, r := range dr.runners {
				r.drainFor(seq)
			}
		}
		if len(st.Slots) == dr.cfg.Slots && !st.Merging && !dr.merging[seq] {
			// The record's bytes are this driver's alone: a create that
			// finds the same bytes in place reads as its own retried
			// create, so two drivers writing equal bytes (two in one
			// process, as in tests) would both take on the merge.
			if err := dr.spStore.CreateRecord(slots.MergeRecord(seq), []byte(dr.mergeToken)); err == nil {
				dr.merging[seq] = true
				dr.wg.Go(func() { dr.merge(st) })
			} else if !errors.Is(err, checkpoint.ErrRecordExists) {
				dr.log.Warn("splitflow: could not take on the savepoint's merge", "request", seq, "err", err)
			}
		}
		return false
	}
	if seq == 0 || dr.spSeq != seq {
		return false
	}
	dr.spSeq = 0
	switch {
	case st.Result == nil:
		dr.log.Warn("splitflow: the savepoint request was abandoned (no result by its deadline); the slots go on", "request", seq)
	case st.Result.Error != "":
		dr.log.Warn("splitflow: the savepoint failed; the slots go on", "request", seq, "err", st.Result.Error)
	case st.Request.Stop:
		dr.log.Info("splitflow: the job stopped with a savepoint", "request", seq, "path", st.Result.Path)
		return true
	default:
		dr.log.Info("splitflow: savepoint taken; the slots go on", "request", seq, "path", st.Result.Path)
	}
	return false
}

// openRequest is the open request and whether slot recorded its final
// checkpoint for it (0: none open).
func (dr *driver) openRequest(slot int) (int64, bool) {
	st := dr.spLatest.Load()
	if st == nil || !st.Open(time.Now()) {
		return 0, false
	}
	_, recorded := st.Slots[slot]
	return st.Request.Seq, recorded
}

// drainFor has the runner's execution drain for request seq.
func (r *runner) drainFor(seq int64) {
	r.drainSeq.Store(seq)
	if ex := r.ex.Load(); ex != nil {
		(*ex).DrainForSavepoint()
	}
}

// drainedForSavepoint is how claimAndRun reports an execution that ended
// by its drain for request seq, with its final checkpoint.
type drainedForSavepoint struct {
	seq        int64
	checkpoint string
}

func (d *drainedForSavepoint) Error() string {
	return fmt.Sprintf("slot drained for savepoint request %d at %s", d.seq, d.checkpoint)
}

// afterDrain records the slot's final checkpoint for its request, then
// waits for the request's result: true when the slot is to stop (the
// savepoint of a stop was taken), false when it goes on (claimed and run
// again from its log).
func (r *runner) afterDrain(d *drainedForSavepoint) (bool, error) {
	rec := slots.NewSavepointRecord(slots.SlotSavepoint{Slot: r.slot, Checkpoint: d.checkpoint})
	if err := r.dr.spStore.CreateRecord(slots.SlotRecord(d.seq, r.slot), slots.EncodeSavepointRecord(rec)); err != nil && !errors.Is(err, checkpoint.ErrRecordExists) {
		r.dr.log.Error("splitflow: could not record the slot's final checkpoint for the savepoint", "slot", r.slot, "request", d.seq, "err", err)
	} else {
		r.dr.log.Info("splitflow: slot drained for the savepoint", "slot", r.slot, "request", d.seq, "checkpoint", d.checkpoint)
	}
	return r.park(d.seq), nil
}

// park holds the slot, not running, while request seq waits for its
// result; true when the result says the job stops.
func (r *runner) park(seq int64) bool {
	tk := time.NewTicker(savepointPoll / 2)
	defer tk.Stop()
	for {
		if st := r.dr.spLatest.Load(); st != nil && st.Request.Seq == seq && !st.Open(time.Now()) {
			return st.Result != nil && st.Result.Error == "" && st.Request.Stop
		} else if st != nil && st.Request.Seq > seq {
			return false
		}
		select {
		case <-r.ctx.Done():
			return true
		case <-tk.C:
		}
	}
}

// merge writes the savepoint of request st from its slots' final
// checkpoints, and its result.
func (dr *driver) merge(st slots.SavepointState) {
	seq := st.Request.Seq
	res := slots.NewSavepointRecord(slots.SavepointResult{})
	path, id, err := dr.writeMerged(st)
	if err != nil {
		res.Error = err.Error()
		dr.log.Error("splitflow: savepoint of the job failed", "request", seq, "err", err)
	} else {
		res.Path, res.Checkpoint = path, id
		dr.log.Info("splitflow: savepoint of the job written", "request", seq, "path", path)
	}
	if err := dr.spStore.CreateRecord(slots.ResultRecord(seq), slots.EncodeSavepointRecord(res)); err != nil {
		dr.log.Error("splitflow: could not record the savepoint's result", "request", seq, "err", err)
	}
}

// writeMerged puts the slots' final checkpoints together into one
// savepoint of a job in one process at parallelism = slots: slot i's
// subtask states are subtask i's (a slot runs subtask i of every chain),
// the sources' enumerator states are merged by the source
// (connector.SlotEnumeratorStateMerger), and the shuffles' operators
// (the cut's) are left out: the drain left nothing in flight, and a job
// in one process has no such operator. Every slot committed its final
// checkpoint before its execution ended, so the savepoint is marked
// committed.
func (dr *driver) writeMerged(st slots.SavepointState) (string, int64, error) {
	g := dr.cfg.Savepoint
	chks := make([]*checkpoint.Checkpoint, dr.cfg.Slots)
	var id int64
	for i := range chks {
		s, ok := st.Slots[i]
		if !ok {
			return "", 0, fmt.Errorf("slot %d recorded no final checkpoint", i)
		}
		chk, err := checkpoint.OpenRestorePoint(s.Checkpoint, checkpoint.WithLogger(dr.log))
		if err != nil {
			return "", 0, fmt.Errorf("slot %d: %w", i, err)
		}
		chks[i] = chk
		id = max(id, chk.ID)
	}
	var parts []checkpoint.SavepointPart
	coords := map[string][][]byte{}
	for i, chk := range chks {
		for _, h := range chk.States {
			n, ok := g.Operators[h.Owner.UID]
			if !ok {
				return "", 0, fmt.Errorf("slot %d's checkpoint %d holds state of %s, which the job does not have", i, chk.ID, h.Owner)
			}
			if n.Cut {
				continue
			}
			if h.Owner.IsCoordinator() {
				b, _, err := chk.State(h.Owner)
				if err != nil {
					return "", 0, fmt.Errorf("slot %d: %w", i, err)
				}
				if coords[h.Owner.UID] == nil {
					coords[h.Owner.UID] = make([][]byte, len(chks))
				}
				coords[h.Owner.UID][i] = b
				continue
			}
			if h.Owner.Subtask != i {
				return "", 0, fmt.Errorf("slot %d's checkpoint %d holds state of %s, another slot's subtask", i, chk.ID, h.Owner)
			}
			parts = append(parts, checkpoint.SavepointPart{Owner: h.Owner, From: chk})
		}
	}
	for uid, states := range coords {
		merge := g.Operators[uid].MergeCoordinators
		if merge == nil {
			return "", 0, fmt.Errorf("operator %s has coordinator state and is no source", uid)
		}
		b, err := merge(states)
		if err != nil {
			return "", 0, fmt.Errorf("source %s: %w", uid, err)
		}
		parts = append(parts, checkpoint.SavepointPart{Owner: checkpoint.CoordinatorOwner(uid), Data: b})
	}
	target := st.Request.Target
	if target == "" {
		target = dr.cfg.SavepointDir
	}
	if target == "" {
		return "", 0, errors.New("the request names no target, and the job was given no savepoint directory (WithSavepointDir): name one (--target)")
	}
	now := time.Now()
	path := checkpoint.SavepointPath(target, id, now)
	meta := checkpoint.Metadata{ID: id, Timestamp: now, Fingerprint: stateformat.Fingerprint(g.Prints)}
	if _, err := checkpoint.WriteSavepointOf(parts, meta, path, "", checkpoint.WithLogger(dr.log)); err != nil {
		return "", 0, err
	}
	if err := checkpoint.MarkSavepointCommitted(path, id, checkpoint.WithLogger(dr.log)); err != nil {
		return "", 0, err
	}
	return path, id, nil
}

// mergeToken names a driver in the merge records it creates: host,
// pid and a random number, no two drivers alike.
func mergeToken() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%016x", host, os.Getpid(), rand.Uint64())
}

// finalCheckpointPath is where an execution's last recorded checkpoint
// is.
func finalCheckpointPath(root, job string, slot int, epoch, id int64) string {
	return slots.EpochPath(root, job, slot, epoch) + "/chk-" + strconv.FormatInt(id, 10)
}

// defaultSavepointWait bounds a savepoint of a distributed job asked
// with a context without deadline: the request's deadline, after which
// the processes give up on it and their slots go on.
const defaultSavepointWait = 10 * time.Minute

// RequestSavepoint is TriggerSavepoint and StopWithSavepoint of a
// distributed job: a request in the job's checkpoint root, which every
// process of the job takes part in (this one too), answered once the
// savepoint is written to target. ctx's deadline is the request's
// (default defaultSavepointWait).
func RequestSavepoint(ctx context.Context, root, job, target string, stop bool, log *slog.Logger) (status.Savepoint, error) {
	rs, err := slots.OpenSavepointRequests(root, job, log)
	if err != nil {
		return status.Savepoint{}, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultSavepointWait)
	}
	res, _, err := slots.RequestSavepoint(ctx, rs, stop, target, deadline, savepointPoll/2)
	if errors.Is(err, slots.ErrSavepointUnderWay) {
		return status.Savepoint{}, fmt.Errorf("%w: job %q: %w", status.ErrSavepointRefused, job, err)
	}
	if err != nil {
		return status.Savepoint{}, fmt.Errorf("savepoint of distributed job %q: %w", job, err)
	}
	return status.Savepoint{Path: res.Path, Checkpoint: res.Checkpoint, TakenAt: time.Now()}, nil
}
