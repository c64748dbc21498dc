package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/jobstorage"
	"github.com/splitflow/splitflow/runtime/status"
)

// WithRestoreFrom starts the job from a savepoint or checkpoint at path
// (Flink's --fromSavepoint): a savepoint's directory or s3:// URL
// (TriggerSavepoint, StopWithSavepoint), a checkpoint storage (its newest
// checkpoint), or one checkpoint of one (DIR/chk-N, such as a retained
// checkpoint of an earlier job). Its state is matched to this job's
// operators by UID, as on any restore: the job may have changed since
// (added operators start empty, other parallelisms are spread over; the
// state of a removed one is refused unless WithAllowNonRestoredState;
// keyed state needs the max parallelism it was written with). A path that
// is missing, holds no completed checkpoint, or is damaged fails Execute
// with an error naming it, never a fresh start.
//
// It applies while the job's own checkpoint storage holds no checkpoint:
// once the job completed one, every restart resumes from its newest
// checkpoint as usual, and a job started again on a storage that holds
// checkpoints resumes from them (with a warning that path is not used),
// since they are newer than path and their output may be committed. Needs
// WithCheckpointInterval. Default: none.
//
// In a distributed job (WithDistributed) path is a savepoint or
// checkpoint of the job run in one process, and it applies to each slot
// whose log names no checkpoint yet: the slot restores its share of it,
// as subtask i of the job rescaled to one subtask per slot (the key
// groups it owns, the input partitions the source's owner rule gives it,
// the committables of old subtasks j with j mod slots = i); a slot that
// has a checkpoint goes on from it. The first process given path checks
// it and records the checkpoint it names in the job's checkpoint root
// (<root>/<job>/start), and processes started later without
// WithRestoreFrom start their fresh slots from it too; one given another
// path fails with ErrIncompatibleCheckpoint, as does a checkpoint of one
// slot of a distributed job given as path (it holds that slot's subtask
// alone). The first process to start decides for the job: one started
// without WithRestoreFrom records a fresh start, and a process given path
// after that, or in a job whose slots ran before without a savepoint,
// fails with ErrIncompatibleCheckpoint naming both.
func WithRestoreFrom(path string) Option {
	return optionFunc(func(c *config) { c.cp.restoreFrom = path })
}

// WithSavepointDir is where savepoints go when TriggerSavepoint,
// StopWithSavepoint or POST /api/v1/savepoints name no target (Flink's
// state.savepoints.dir): a directory or s3://bucket/prefix. Each savepoint
// is a new directory in it, savepoint-<checkpoint id>-<UTC time>. It is
// also the savepoint root: a target named in POST /api/v1/savepoints must
// lie under it (a relative one is taken under it), unless
// WithSavepointTargetsAnywhere. Default: none, so every call must name its
// target and a request over the status server may name none.
func WithSavepointDir(dir string) Option {
	return optionFunc(func(c *config) { c.cp.savepointDir = dir })
}

// TriggerSavepoint takes a savepoint of the running job and returns once
// it is complete: a checkpoint triggered now (or as soon as the pending
// one ends), then copied, verified, into a new directory under target
// (WithSavepointDir when target is ""): every state file and shared file
// copied, so it outlives the job's checkpoints, and marked a savepoint in
// its metadata. The job goes on; its checkpoint retention never touches
// the savepoint. The checkpoint counts as any other (its transactions
// commit), so a job started from the savepoint later resumes after the
// output committed up to it; whatever the job commits after it, a job
// started from it writes again. Once the checkpoint's transactions are
// committed, the job records so in the savepoint, and a job started from
// it commits none of them again (this job may have reused their ids by
// then). Safe from any goroutine while Execute
// runs. ctx bounds the wait, not the savepoint: one already triggered
// completes. Errors: status.ErrNoRunningJob, status.ErrSavepointRefused, or the failure
// of the checkpoint or of its copy.
//
// In a distributed job (WithDistributed) the savepoint is one of every
// slot, whichever process runs it: a request in the job's checkpoint
// root that every process takes part in; each slot drains (its sources
// stop, the shuffles carry what was written to their readers, its final
// checkpoint is committed), one process writes the slots' final
// checkpoints as a savepoint of the job in one process at parallelism =
// slots, and the slots go on. It restores with WithRestoreFrom in one
// process at any parallelism, or distributed at any slot count. ctx's
// deadline is the request's (default 10 minutes): past it, or when ctx
// is cancelled, the request is abandoned and the slots go on. A request while another is under
// way is refused (status.ErrSavepointRefused).
func (env *Environment) TriggerSavepoint(ctx context.Context, target string) (status.Savepoint, error) {
	return env.savepoint(ctx, target, false)
}

// StopWithSavepoint stops the running job with a final savepoint (Flink's
// stop without --drain): the sources stop at their next step without
// moving event time (no final watermark, so no window fires because of the
// stop), the records in flight drain, the final checkpoint is copied into
// a savepoint under target (WithSavepointDir when ""), its transactions
// commit, and the job ends; Execute then returns ErrStopped. It returns
// once the job has ended, with the savepoint; if the job failed after the
// savepoint was complete, both (the savepoint is whole: a job started
// from it commits what it prepared). Errors as TriggerSavepoint's. In a
// distributed job, as TriggerSavepoint's, and then every process of the
// job stops (Execute returns ErrStopped); it returns once the savepoint
// is written, and this process's Execute returns soon after.
func (env *Environment) StopWithSavepoint(ctx context.Context, target string) (status.Savepoint, error) {
	return env.savepoint(ctx, target, true)
}

// savepointRequest is one TriggerSavepoint or StopWithSavepoint call on
// its way through the master goroutine.
type savepointRequest struct {
	target string
	stop   bool
	done   chan savepointResult // buffered: the master never waits on it
}

type savepointResult struct {
	sp  status.Savepoint
	err error
}

func (r *savepointRequest) reply(sp status.Savepoint, err error) {
	select {
	case r.done <- savepointResult{sp, err}:
	default: // answered already
	}
}

func (env *Environment) savepoint(ctx context.Context, target string, stop bool) (status.Savepoint, error) {
	if env.cfg.dist != nil {
		return env.distributedSavepoint(ctx, target, stop)
	}
	ex := env.running.Load()
	if ex == nil {
		return status.Savepoint{}, status.ErrNoRunningJob
	}
	if target == "" {
		target = env.cfg.cp.savepointDir
	}
	if target == "" {
		return status.Savepoint{}, fmt.Errorf("%w: no target: name a directory or s3://bucket/prefix, or set WithSavepointDir", status.ErrSavepointRefused)
	}
	req := &savepointRequest{target: target, stop: stop, done: make(chan savepointResult, 1)}
	if !ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "savepoint", Run: func() error {
		ex.requestSavepoint(req)
		return nil
	}}) {
		return status.Savepoint{}, status.ErrNoRunningJob
	}
	select {
	case r := <-req.done:
		return r.sp, r.err
	case <-ex.done:
		select {
		case r := <-req.done:
			return r.sp, r.err
		default:
			return status.Savepoint{}, fmt.Errorf("savepoint: the job ended before it was taken: %w", status.ErrNoRunningJob)
		}
	case <-ctx.Done():
		return status.Savepoint{}, ctx.Err()
	}
}

// requestSavepoint takes a request on the master goroutine: refused, or
// queued for the next trigger (a savepoint), or turned into a stop whose
// final checkpoint is the savepoint.
func (ex *execution) requestSavepoint(req *savepointRequest) {
	refuse := func(format string, args ...any) {
		req.reply(status.Savepoint{}, fmt.Errorf("%w: %s", status.ErrSavepointRefused, fmt.Sprintf(format, args...)))
	}
	switch {
	case ex.cc == nil:
		refuse("checkpoints are off; a savepoint is a checkpoint (WithCheckpointInterval)")
		return
	case ex.stopped || ex.draining || ex.stopSavepoint != nil:
		refuse("the job is stopping")
		return
	case req.stop && ex.restarting:
		refuse("the job is restarting after a failure; ask again once it runs")
		return
	}
	if inside, where := jobstorage.Inside(ex.storage, req.target); inside {
		refuse("target %s is inside the job's checkpoint storage %s, whose clean-up would delete it; give a path outside it", req.target, where)
		return
	}
	if req.stop {
		ex.stopSavepoint = req
		ex.log.Info("splitflow: stopping with a savepoint", "target", req.target)
		ex.cancelRun() // the drain of a cancel; its final checkpoint is the savepoint
		return
	}
	ex.savepointQueue = append(ex.savepointQueue, req)
	ex.triggerSavepoints(time.Now())
}

// triggerSavepoints starts the checkpoint of the queued savepoints when
// one can start (none pending, the job running); otherwise the next tick
// asks again, ahead of that tick's periodic trigger, so that a savepoint
// waits for the checkpoints pending when it was asked for and no others
// (Flink's coordinator queues it so too). Every request queued by then
// shares the checkpoint.
func (ex *execution) triggerSavepoints(now time.Time) {
	if len(ex.savepointQueue) == 0 || ex.restarting || ex.stopped || ex.draining {
		return
	}
	id, acts := ex.cc.TriggerNow(now)
	if id == 0 {
		return
	}
	ex.savepointFor[id] = ex.savepointQueue
	ex.savepointQueue = nil
	ex.perform(acts)
}

// savepointPersisted runs once checkpoint id is durable in the job's
// storage, before anything is notified: the savepoints waiting for it are
// copied from it. The copy runs off the master goroutine (savepoints of a
// large state take a while), so the master keeps serving ticks,
// acknowledgements, later checkpoints and stop requests meanwhile: the
// storage holds checkpoint id (checkpoint.Holder) so that the retention of
// those later checkpoints neither removes it nor collects its shared
// files while the copy reads them. The copy goroutine is waited for
// before Execute returns (snapWG), so a stop's savepoint is complete, or
// has failed, by then. A storage that cannot hold a checkpoint is copied
// from on the master goroutine, between commits, as nothing else keeps it.
// A copy that fails fails its requests only: the checkpoint itself is
// complete.
func (ex *execution) savepointPersisted(id int64, final bool, taken time.Time) {
	reqs := ex.savepointFor[id]
	delete(ex.savepointFor, id)
	stop := ex.stopSavepoint
	if final && stop != nil {
		reqs = append(reqs, stop)
	}
	if len(reqs) == 0 {
		return
	}
	storage, log, obs, where := ex.storage, ex.log, ex.obs, ex.checkpointPath(id)
	copyAll := func() (copied copiedSavepoint) {
		copied.id = id
		chk, err := storage.Load(id)
		for _, req := range reqs {
			sp, werr := status.Savepoint{}, err
			if werr == nil {
				sp = status.Savepoint{Path: checkpoint.SavepointPath(req.target, id, taken), Checkpoint: id, TakenAt: taken}
				_, werr = checkpoint.WriteSavepoint(chk, sp.Path, "", checkpoint.WithLogger(log))
			}
			if werr != nil {
				werr = fmt.Errorf("savepoint of checkpoint %d (complete at %s): %w", id, where, werr)
				log.Error("splitflow: savepoint failed", "checkpoint", id, "err", werr)
			} else {
				log.Info("splitflow: savepoint completed", "checkpoint", id, "path", sp.Path)
				obs.SavepointCompleted(sp)
				copied.paths = append(copied.paths, sp.Path)
			}
			if req == stop {
				ex.stopResult.Store(&savepointResult{sp, werr})
				continue // answered when the job has ended
			}
			req.reply(sp, werr)
		}
		if chk != nil {
			chk.DropVerified()
		}
		return copied
	}
	h, ok := storage.(checkpoint.Holder)
	if !ok {
		ex.markWhenCommitted(copyAll())
		return
	}
	release := h.Hold(id)
	ex.snapWG.Go(func() {
		defer release()
		copied := copyAll()
		switch {
		case len(copied.paths) == 0:
		case ex.outputCommitted.Load() >= id:
			// Also after the master has stopped serving: a stop's
			// final checkpoint is committed before the job ends.
			copied.markCommitted(log)
		default:
			ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "savepoint copied", Run: func() error {
				ex.markWhenCommitted(copied)
				return nil
			}})
		}
	})
}

// copiedSavepoint is the savepoints copied from checkpoint id.
type copiedSavepoint struct {
	id    int64
	paths []string
}

// markCommitted records in each savepoint that the job committed the
// output of its checkpoint, so that a job started from one does not
// commit it again: this job goes on and reuses the transactional ids of
// those committables, and a commit on a reused Kafka id is refused as
// PRODUCER_FENCED, which would read as lost records. A mark that cannot
// be written leaves the savepoint as it was (a job started from it
// commits its committables again), with a warning.
func (c copiedSavepoint) markCommitted(log *slog.Logger) {
	for _, path := range c.paths {
		if err := checkpoint.MarkSavepointCommitted(path, c.id, checkpoint.WithLogger(log)); err != nil {
			log.Warn("splitflow: the savepoint's output is committed, but the savepoint could not record it: a job started from it commits its transactions again, and reports them lost if this job has reused their transactional ids by then",
				"checkpoint", c.id, "path", path, "err", err)
		}
	}
}

// markWhenCommitted marks the savepoints copied once every sink task has
// committed the output of their checkpoint: now, or in release when it
// comes. On the master goroutine.
func (ex *execution) markWhenCommitted(c copiedSavepoint) {
	switch {
	case len(c.paths) == 0:
	case ex.outputCommitted.Load() >= c.id:
		ex.snapWG.Go(func() { c.markCommitted(ex.log) })
	default:
		ex.unmarked = append(ex.unmarked, c)
	}
}

// savepointAborted fails the savepoints waiting for checkpoint id.
func (ex *execution) savepointAborted(id int64, err error) {
	for _, req := range ex.savepointFor[id] {
		req.reply(status.Savepoint{}, fmt.Errorf("savepoint: checkpoint %d aborted: %w", id, err))
	}
	delete(ex.savepointFor, id)
}

// endSavepoints answers every request left when the job has ended; the
// stop's with its savepoint and how the job ended after it.
func (ex *execution) endSavepoints() {
	gone := fmt.Errorf("savepoint: the job ended before it was taken: %w", status.ErrNoRunningJob)
	if ex.err != nil {
		gone = fmt.Errorf("savepoint: the job ended before it was taken: %w", ex.err)
	}
	for _, req := range ex.savepointQueue {
		req.reply(status.Savepoint{}, gone)
	}
	ex.savepointQueue = nil
	for id := range ex.savepointFor {
		ex.savepointAborted(id, gone)
	}
	if req := ex.stopSavepoint; req != nil {
		switch r := ex.stopResult.Load(); {
		case r == nil:
			req.reply(status.Savepoint{}, fmt.Errorf("stop with savepoint: the job ended without a final checkpoint: %w", cmpErr(ex.err, errors.New("no checkpoint could complete"))))
		case r.err == nil && ex.err != nil:
			req.reply(r.sp, fmt.Errorf("stop with savepoint: the savepoint at %s is complete, but the job failed after it: %w", r.sp.Path, ex.err))
		default:
			req.reply(r.sp, r.err)
		}
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// restorePoint loads WithRestoreFrom's checkpoint, when the job's own
// storage holds none; nil when no path was given.
func (ex *execution) restorePoint() (*engine.RestoredState, error) {
	path := ex.cfg.cp.restoreFrom
	if path == "" {
		return nil, nil
	}
	chk, err := checkpoint.OpenRestorePoint(path, checkpoint.WithLogger(ex.log))
	if err != nil {
		return nil, &unrecoverableError{Err: fmt.Errorf("%w (WithRestoreFrom)", err)}
	}
	return &engine.RestoredState{Chk: chk, Path: path, Foreign: true}, nil
}

// WithSavepointTargetsAnywhere lets POST /api/v1/savepoints name any
// directory or s3://bucket/prefix as its target, with the job's own
// rights on the file system and its S3 credentials. Without it a request's
// target is confined to WithSavepointDir (see there). The Go calls
// TriggerSavepoint and StopWithSavepoint, made by the program itself, are
// never confined. Default: confined.
func WithSavepointTargetsAnywhere() Option {
	return optionFunc(func(c *config) { c.cp.savepointAnywhere = true })
}
