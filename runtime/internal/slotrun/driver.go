package slotrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// Config is the job a process runs slots of, as the driver needs it.
type Config struct {
	// Name is the job's name in errors; Job its name in the group and
	// the checkpoint root (Distributed.Job), Slots its slot count.
	Name  string
	Job   string
	Slots int
	// Root is the job's checkpoint root, SavepointDir the default target
	// of its savepoints.
	Root         string
	SavepointDir string
	Log          *slog.Logger
	Obs          *observe.Observer
	// Membership are the options the process joins the job's group
	// with.
	Membership []slots.MembershipOption
	// Start is the job's start point (slots.Settle).
	Start slots.StartPoint
	// NewExecution makes the execution of slot s, taking its checkpoints
	// in dir (the claim's storage) and logging on log.
	NewExecution func(s *Slot, dir string, log *slog.Logger) (Execution, error)
	// Savepoint is what a savepoint of the job merges (savepoint.go).
	Savepoint MergeGraph
}

// Execution is one run of one slot: the job's subtask of every chain
// that the slot is, run by the engine's master.
type Execution interface {
	// Run runs the slot until ctx is cancelled (it drains with a final
	// checkpoint) or it fails for good.
	Run(ctx context.Context) error
	// Stop stops the execution at once with err, committing nothing
	// more; any goroutine.
	Stop(err error)
	// DrainForSavepoint has the execution drain for a savepoint of the
	// job: its sources stop, and it ends with a final checkpoint once the
	// shuffles are drained; any goroutine.
	DrainForSavepoint()
	// DrainedForSavepoint reports, after Run, that it ended by such a
	// drain.
	DrainedForSavepoint() bool
	// Storage is the execution's checkpoint storage; Release releases
	// it once the execution ended.
	Storage() checkpoint.Storage
	Release()
}

// Run joins the job's group and runs the slots it assigns this process
// until ctx is cancelled (every slot drains with a final checkpoint, and
// the process leaves the group), a stop with savepoint is taken
// (engine.ErrStopped), or a slot fails for good (the error).
func Run(ctx context.Context, cfg Config) error {
	m, err := slots.Join(ctx, cfg.Job, cfg.Slots, cfg.Membership...)
	if err != nil {
		return fmt.Errorf("job %q: %w", cfg.Name, err)
	}
	dr := &driver{cfg: cfg, log: cfg.Log, m: m,
		runners: map[int]*runner{}, ended: make(chan *runner), spCh: make(chan slots.SavepointState), merging: map[int64]bool{}, mergeToken: mergeToken()}
	if dr.spStore, err = slots.OpenSavepointRequests(cfg.Root, cfg.Job, cfg.Log); err != nil {
		m.Close()
		return fmt.Errorf("job %q: %w", cfg.Name, err)
	}
	if st, err := slots.ReadSavepoints(dr.spStore); err == nil {
		// A slot claimed from here on sees a request open already.
		dr.spLatest.Store(&st)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	watchWG.Go(func() { dr.watchSavepoints(watchCtx) })
	err = dr.loop(ctx)
	stopWatch()
	watchWG.Wait()
	return err
}

type driver struct {
	cfg Config
	log *slog.Logger
	m   *slots.Membership

	runners map[int]*runner
	ended   chan *runner
	wg      sync.WaitGroup

	// The job's savepoint requests (savepoint.go): their storage, the
	// newest state read (spLatest; also read by runners) and its changes
	// (spCh), the request this process drains for (spSeq, 0: none) and
	// the merges it took on.
	spStore  checkpoint.RecordStorage
	spLatest atomic.Pointer[slots.SavepointState]
	spCh     chan slots.SavepointState
	spSeq    int64
	merging  map[int64]bool
	// mergeToken is what this driver writes in a merge record.
	mergeToken string
}

func (dr *driver) loop(ctx context.Context) (err error) {
	defer func() {
		// Every slot drains (final checkpoint, commit) before the process
		// leaves the group, so the next owners start from there; a slot
		// that could not (its drain timed out, it failed meanwhile) is
		// the process's error, as it would be a job's.
		for _, r := range dr.runners {
			r.drain()
		}
		live := slices.Collect(maps.Values(dr.runners))
		dr.awaitAll()
		dr.m.Close()
		dr.cfg.Obs.SlotsStopped()
		errs := []error{err}
		for _, r := range live {
			if r.err != nil && !errors.Is(r.err, ErrSlotLost) && !errors.Is(r.err, context.Canceled) {
				dr.log.Error("splitflow: slot failed while the process stopped", "slot", r.slot, "err", r.err)
				errs = append(errs, fmt.Errorf("job %q: slot %d: %w", dr.cfg.Name, r.slot, r.err))
			}
		}
		err = errors.Join(errs...)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-dr.m.Changes():
			dr.change(ctx, c)
		case err := <-dr.m.Failed():
			var other *slots.DifferentJobError
			if errors.As(err, &other) {
				err = other.Explain()
			}
			dr.log.Error("splitflow: the job's group refused this process", "err", err)
			return fmt.Errorf("job %q: %w", dr.cfg.Name, err)
		case r := <-dr.ended:
			if err := dr.runnerEnded(r); err != nil {
				return err
			}
		case st := <-dr.spCh:
			if dr.savepointStep(st) {
				return engine.ErrStopped
			}
		}
	}
}

// runnerEnded handles the end of a runner reported on ended: the
// process's error if the slot failed.
func (dr *driver) runnerEnded(r *runner) error {
	select {
	case <-r.forgotten:
		// Released (await) or the process stopping: its end was handled
		// there. The runner's select may still have sent it, since the
		// driver can be back in its own select, ready to hear, by the
		// time the runner gets to choose; only the driver's goroutine
		// forgets, so this check cannot miss.
		return nil
	default:
	}
	if dr.runners[r.slot] == r {
		delete(dr.runners, r.slot)
		dr.cfg.Obs.SlotEnded(r.slot)
	}
	switch {
	case r.err == nil:
		dr.log.Info("splitflow: slot finished", "slot", r.slot)
	case errors.Is(r.err, ErrSlotLost):
		dr.log.Warn("splitflow: slot taken over by another process", "slot", r.slot, "err", r.err)
	default:
		dr.log.Error("splitflow: slot failed", "slot", r.slot, "err", r.err)
		return fmt.Errorf("job %q: slot %d: %w", dr.cfg.Name, r.slot, r.err)
	}
	return nil
}

// change applies one step of the group's assignment.
func (dr *driver) change(ctx context.Context, c slots.Change) {
	if len(c.Revoked) > 0 {
		var stopping []*runner
		for _, s := range c.Revoked {
			r := dr.runners[s]
			if r == nil {
				continue
			}
			switch {
			case c.Lost:
				r.kill()
			case !r.recorded.Load():
				// Nothing recorded under this runner: the next owner
				// restores the same point a final checkpoint would
				// leave, less the work since the claim, which it does
				// again. A slot revoked while it starts (its writers
				// registering, a new shuffle topic not yet led) would
				// hold the rebalance, and so the process that joined,
				// until its first checkpoint completed.
				dr.log.Info("splitflow: slot revoked before its first checkpoint; stopped without one", "slot", s)
				r.kill()
			default:
				r.drain()
			}
			stopping = append(stopping, r)
		}
		start := time.Now()
		for _, r := range stopping {
			dr.await(r)
		}
		dr.log.Info("splitflow: slots released", "slots", c.Revoked, "lost", c.Lost, "took", time.Since(start))
		c.Done()
		dr.cfg.Obs.SlotsReleased(time.Since(start))
		dr.cfg.Obs.SlotChange(c.Member, c.Generation, nil, c.Revoked)
	}
	if len(c.Assigned) > 0 {
		dr.cfg.Obs.SlotChange(c.Member, c.Generation, c.Assigned, nil)
	}
	for _, s := range c.Assigned {
		if old := dr.runners[s]; old != nil {
			// Still stopping from an earlier revocation: it ends first.
			old.kill()
			dr.await(old)
		}
		r := &runner{dr: dr, slot: s, member: c.Member, gen: c.Generation, done: make(chan struct{}), forgotten: make(chan struct{})}
		r.ctx, r.cancel = context.WithCancel(ctx)
		dr.runners[s] = r
		dr.wg.Add(1)
		go func() {
			defer dr.wg.Done()
			r.ended(r.run())
		}()
		dr.log.Info("splitflow: slot assigned", "slot", s, "member", c.Member, "generation", c.Generation)
	}
}

// await waits for r to end and forgets it, without reporting its end on
// ended.
func (dr *driver) await(r *runner) {
	<-r.done
	r.forget()
	if dr.runners[r.slot] == r {
		delete(dr.runners, r.slot)
	}
	if r.err != nil && !errors.Is(r.err, ErrSlotLost) && !errors.Is(r.err, context.Canceled) {
		dr.log.Warn("splitflow: slot ended with an error while it was released", "slot", r.slot, "err", r.err)
	}
}

func (dr *driver) awaitAll() {
	for _, r := range dr.runners {
		r.forget()
	}
	dr.wg.Wait()
}

// runner runs one slot this process was assigned: it claims the slot
// in its ownership log, restores it, runs it, and records each of its
// checkpoints in the log before the checkpoint is notified.
type runner struct {
	dr     *driver
	slot   int
	member string
	gen    int64

	ctx    context.Context // cancelled: drain
	cancel context.CancelFunc
	// lost is set when the slot may be another process's already: no
	// checkpoint is recorded from then on.
	lost atomic.Bool

	mu  sync.Mutex // the ownership and the log's storage
	own *slots.Ownership
	// recorded is set once a checkpoint of the runner is recorded in the
	// slot's log: the storages of older claims are then being removed,
	// and a revocation drains the slot with a final checkpoint.
	recorded atomic.Bool
	logStore checkpoint.RecordStorage
	holder   checkpoint.Holder
	release  func()
	ex       atomic.Pointer[Execution]
	// drainSeq is the savepoint request the runner's execution drains
	// for, 0 for none.
	drainSeq atomic.Int64

	done chan struct{}
	err  error
	// forgotten is closed once the driver no longer wants to hear of the
	// runner's end on ended.
	forgotten  chan struct{}
	forgetOnce sync.Once
}

func (r *runner) forget() {
	r.forgetOnce.Do(func() { close(r.forgotten) })
}

// ended reports the runner's end with err to the driver, unless the
// driver forgot it.
func (r *runner) ended(err error) {
	r.err = err
	close(r.done)
	select {
	case r.dr.ended <- r:
	case <-r.forgotten:
	}
}

// drain stops the slot with a final checkpoint.
func (r *runner) drain() { r.cancel() }

// kill stops the slot at once, committing nothing more.
func (r *runner) kill() {
	r.lost.Store(true)
	r.cancel()
	if ex := r.ex.Load(); ex != nil {
		(*ex).Stop(fmt.Errorf("slot %d: %w", r.slot, ErrSlotLost))
	}
}

// errClaimAgain: the log could not be read or written with a known
// outcome; the slot is claimed again from the log.
type errClaimAgain struct{ err error }

func (e *errClaimAgain) Error() string { return e.err.Error() }
func (e *errClaimAgain) Unwrap() error { return e.err }

func (r *runner) run() error {
	root := r.dr.cfg.Root
	st, err := checkpoint.OpenStorage(slots.LogPath(root, r.dr.cfg.Job, r.slot), checkpoint.WithLogger(r.dr.log))
	if err != nil {
		return fmt.Errorf("open the slot's log: %w", err)
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return fmt.Errorf("the checkpoint storage %s cannot keep the slot's log (%T)", slots.LogPath(root, r.dr.cfg.Job, r.slot), st)
	}
	r.logStore = rs
	pause := 100 * time.Millisecond
	for {
		if r.ctx.Err() != nil || r.lost.Load() {
			return nil
		}
		if seq, recorded := r.dr.openRequest(r.slot); recorded {
			// Drained for the open savepoint request under an earlier
			// owner: it runs again only once the request is over.
			if r.park(seq) {
				return nil
			}
			continue
		}
		err := r.claimAndRun(root)
		var drained *drainedForSavepoint
		if errors.As(err, &drained) {
			if stop, err := r.afterDrain(drained); err != nil || stop {
				return err
			}
			continue
		}
		var again *errClaimAgain
		if !errors.As(err, &again) {
			return err
		}
		r.dr.log.Warn("splitflow: slot's log failed; claiming it again", "slot", r.slot, "err", err, "pause", pause)
		select {
		case <-r.ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// claimAndRun claims the slot, then runs it from the log's restore point
// until it drains, fails, or the slot is lost.
func (r *runner) claimAndRun(root string) error {
	own, err := slots.NewOwnership(r.slot, r.member, r.gen)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.own = own
	res := r.perform(own.Start())
	r.mu.Unlock()
	switch {
	case res.stop != nil && (errors.Is(res.stop, slots.ErrNotAssigned) || errors.Is(res.stop, slots.ErrSlotLost)):
		return fmt.Errorf("%w: %w", ErrSlotLost, res.stop)
	case res.stop != nil:
		// The slot's log is gone while its checkpoints remain: starting
		// it afresh would replay or lose what they committed.
		return res.stop
	case res.fail != nil && errors.Is(res.fail, connector.ErrInvalidConfiguration):
		// A right missing (slots.NotAllowed): claiming again is refused
		// again.
		return res.fail
	case res.fail != nil:
		return &errClaimAgain{res.fail}
	case res.restore == nil:
		return &errClaimAgain{errors.New("the claim ended without a restore point")}
	}
	rp := res.restore
	slot := &Slot{Index: r.slot, Epoch: rp.ClaimEpoch, NextID: rp.NextCheckpointID, recordFn: r.record, ownedFn: r.owned,
		ShuffleStarts: r.dr.cfg.Start.Shuffles, Incarnation: r.dr.cfg.Start.Incarnation}
	switch {
	case rp.Checkpoint > 0:
		// WithRestoreFrom's savepoint is where the slot started; its log
		// says where it is now.
		slot.RestorePath = slots.EpochPath(root, r.dr.cfg.Job, r.slot, rp.Epoch) + "/chk-" + strconv.FormatInt(rp.Checkpoint, 10)
	case r.dr.cfg.Start.Savepoint != "":
		slot.RestorePath, slot.FromSavepoint = r.dr.cfg.Start.Savepoint, true
	}
	r.dr.log.Info("splitflow: slot claimed", "slot", r.slot, "epoch", rp.ClaimEpoch, "restore", slot.RestorePath, "ignored", len(rp.Ignored))
	// The execution's lines (checkpoints, restores, splits) name the job
	// and the slot, once each: the driver's logger carries the job.
	ex, err := r.dr.cfg.NewExecution(slot, slots.EpochPath(root, r.dr.cfg.Job, r.slot, rp.ClaimEpoch), r.dr.log.With("slot", r.slot))
	if err != nil {
		return err
	}
	var savepoint string
	if slot.FromSavepoint {
		savepoint = slot.RestorePath
	}
	r.dr.cfg.Obs.SlotRunning(r.slot, rp.ClaimEpoch, rp.Checkpoint, savepoint)
	defer ex.Release()
	r.mu.Lock()
	r.holder, _ = ex.Storage().(checkpoint.Holder)
	if r.holder != nil && rp.Checkpoint > 0 && rp.Epoch == rp.ClaimEpoch {
		// Claimed again after a log failure: the restore point is in
		// this claim's storage, and the checkpoints the earlier run
		// stored but did not record must not retain it away.
		r.release = r.holder.Hold(rp.Checkpoint)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.release != nil {
			r.release()
			r.release = nil
		}
		r.mu.Unlock()
	}()
	// A request the driver passed on while no execution ran is read
	// again below, if it is still open.
	r.drainSeq.Store(0)
	r.ex.Store(&ex)
	defer r.ex.Store(nil)
	if r.lost.Load() {
		return nil
	}
	if seq, _ := r.dr.openRequest(r.slot); seq > 0 {
		// Claimed while a savepoint of the job is under way: the slot
		// drains for it from the start.
		r.drainFor(seq)
	}
	// A log failure while recording comes back as an *errClaimAgain
	// inside the execution's error, which run claims again on.
	err = ex.Run(r.ctx)
	if seq := r.drainSeq.Swap(0); err == nil && seq > 0 && ex.DrainedForSavepoint() && r.ctx.Err() == nil {
		if slot.Recorded() == 0 {
			return fmt.Errorf("slot %d drained for savepoint request %d without recording a checkpoint", r.slot, seq)
		}
		return &drainedForSavepoint{seq: seq, checkpoint: finalCheckpointPath(root, r.dr.cfg.Job, r.slot, rp.ClaimEpoch, slot.Recorded())}
	}
	return err
}

// record is the slot's recordFn (Slot.Record): it records checkpoint id
// in the slot's log, on the master goroutine, and returns nil once the
// checkpoint may be notified complete.
func (r *runner) record(id int64) error {
	if r.lost.Load() {
		return fmt.Errorf("slot %d, checkpoint %d: %w", r.slot, id, ErrSlotLost)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.perform(r.own.Persisted(id))
	recorded := slices.Contains(res.notified, id)
	switch {
	case !recorded && res.stop != nil:
		return fmt.Errorf("checkpoint %d: %w: %w", id, ErrSlotLost, res.stop)
	case !recorded && res.fail != nil:
		return &errClaimAgain{fmt.Errorf("record checkpoint %d: %w", id, res.fail)}
	case !recorded:
		return &errClaimAgain{fmt.Errorf("checkpoint %d was not recorded", id)}
	case res.stop != nil || res.fail != nil:
		// The checkpoint is in the log; what failed after it (a floor
		// record of the compaction) ends the run once this checkpoint
		// is notified: the next checkpoint's record finds the same.
		r.dr.log.Warn("splitflow: slot's log after recording a checkpoint", "slot", r.slot, "checkpoint", id, "stop", res.stop, "fail", res.fail)
	}
	if !r.recorded.Swap(true) {
		// The restore point is in this claim's storage from now on, and
		// a later owner restores from it or a newer one: the storages of
		// older claims are never read again.
		r.dr.wg.Add(1)
		go func(epoch int64) {
			defer r.dr.wg.Done()
			r.pruneOlderClaims(epoch)
		}(r.own.Epoch())
	}
	// The log's restore point stays until a newer one is recorded: a
	// later checkpoint's retention must not delete it.
	if r.holder != nil {
		rel := r.holder.Hold(id)
		if r.release != nil {
			r.release()
		}
		r.release = rel
	}
	return nil
}

// pruneOlderClaims removes the checkpoint storages of the slot's claims
// older than epoch, once a checkpoint of epoch is recorded. A failure is
// logged: the next claim's owner tries again.
func (r *runner) pruneOlderClaims(epoch int64) {
	root, job := r.dr.cfg.Root, r.dr.cfg.Job
	epochs, err := r.claimEpochs()
	if err != nil {
		r.dr.log.Warn("splitflow: listing the storages of the slot's older claims", "slot", r.slot, "err", err)
		return
	}
	var removed []int64
	for _, e := range epochs {
		if e >= epoch {
			continue
		}
		if err := checkpoint.RemoveAll(slots.EpochPath(root, job, r.slot, e), checkpoint.WithLogger(r.dr.log)); err != nil {
			r.dr.log.Warn("splitflow: removing the storage of an older claim", "slot", r.slot, "epoch", e, "err", err)
			continue
		}
		removed = append(removed, e)
	}
	if len(removed) > 0 {
		r.dr.log.Info("splitflow: removed the checkpoints of the slot's older claims", "slot", r.slot, "epochs", removed, "claim", epoch)
	}
}

// owned is the slot's ownedFn (Slot.Owned): it reads the slot's log, and
// fails with ErrSlotLost when a newer claim governs it (an *errClaimAgain
// when the log cannot be read).
func (r *runner) owned() error {
	if r.lost.Load() {
		return fmt.Errorf("slot %d: %w", r.slot, ErrSlotLost)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.perform(r.own.Start())
	switch {
	case res.stop != nil:
		return fmt.Errorf("%w: %w", ErrSlotLost, res.stop)
	case res.fail != nil:
		return &errClaimAgain{fmt.Errorf("read the log before a restart: %w", res.fail)}
	}
	return nil
}

// claimEpochs lists the epochs of the slot's claims that have a storage:
// the epoch-<E> children of the slot's storage path (on S3, the key
// prefixes that hold objects).
func (r *runner) claimEpochs() ([]int64, error) {
	names, err := checkpoint.Children(slots.StoragePath(r.dr.cfg.Root, r.dr.cfg.Job, r.slot), checkpoint.WithLogger(r.dr.log))
	if err != nil {
		return nil, err
	}
	var epochs []int64
	for _, name := range names {
		if e, ok := slots.ParseEpochDir(name); ok {
			epochs = append(epochs, e)
		}
	}
	return epochs, nil
}

// storedIDs lists the checkpoint ids the slot's claims' storages hold, so
// that the ownership refuses a log that is gone while checkpoints remain
// (ErrLogMissing) and numbers new checkpoints above them.
func (r *runner) storedIDs() ([]int64, error) {
	root, job := r.dr.cfg.Root, r.dr.cfg.Job
	epochs, err := r.claimEpochs()
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range epochs {
		st, err := checkpoint.OpenStorageForInspection(slots.EpochPath(root, job, r.slot, e), checkpoint.WithLogger(r.dr.log))
		if err != nil {
			return nil, err
		}
		got, err := st.List()
		if err != nil {
			return nil, fmt.Errorf("list the checkpoints of epoch %d: %w", e, err)
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// ClaimConfirmTimeout bounds the confirmation of a slot's claim, a part
// of a takeover (connector.Takeover).
const ClaimConfirmTimeout = 30 * time.Second

type ownershipResult struct {
	restore  *slots.Restore
	notified []int64
	stop     error
	fail     error
}

// perform carries out the ownership's actions, and those they lead to, in
// order. r.mu is held.
func (r *runner) perform(acts []slots.Action) ownershipResult {
	var res ownershipResult
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		var next []slots.Action
		switch a := a.(type) {
		case slots.ReadLog:
			recs, err := slots.LoadLog(r.logStore)
			var stored []int64
			if err == nil {
				stored, err = r.storedIDs()
			}
			next = r.own.LogRead(recs, stored, err)
		case slots.Confirm:
			ctx, cancel := context.WithTimeout(r.ctx, ClaimConfirmTimeout)
			err := r.dr.m.Confirm(ctx, r.slot, r.member)
			cancel()
			next = r.own.Confirmed(err)
		case slots.Append:
			err := slots.StoreRecord(r.logStore, a.Record)
			next = r.own.Appended(a.Record.Seq, err)
		case slots.CheckFloor:
			marker, err := slots.HighestFloorMarker(r.logStore)
			next = r.own.FloorChecked(a.Seq, marker, err)
		case slots.Compact:
			if err := slots.CompactLog(r.logStore, a.Floor); err != nil {
				r.dr.log.Warn("splitflow: compacting the slot's log", "slot", r.slot, "err", err)
			}
		case slots.Restore:
			res.restore = &a
		case slots.NotifyComplete:
			res.notified = append(res.notified, a.ID)
		case slots.Stop:
			res.stop = a.Err
		case slots.Fail:
			res.fail = a.Err
		}
		acts = append(acts, next...)
	}
	return res
}
