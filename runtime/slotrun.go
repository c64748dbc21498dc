package runtime

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
	"github.com/splitflow/splitflow/runtime/internal/slots"
)

// errSlotLost is how a slot of a distributed job ends when another
// process took it over: its ownership log holds a newer claim, or the
// group no longer gives the slot to this process. Nothing the slot
// checkpointed after that is committed.
var errSlotLost = errors.New("the slot was taken over by another process")

// slotRun is what an execution of one slot knows of its slot
// (execution.slot).
type slotRun struct {
	index int
	// epoch is the claim's (the sinks' connector.ClaimInfo).
	epoch int64
	// restorePath is the checkpoint the slot's log names as its restore
	// point (a chk-<id> under another claim's directory), or, for a slot
	// whose log names none, WithRestoreFrom's savepoint (fromSavepoint);
	// "" for a fresh slot.
	restorePath   string
	fromSavepoint bool
	// nextID is the first checkpoint id the execution may take.
	nextID int64
	// recordFn records checkpoint id in the slot's log; recorded is the
	// last id it recorded (master goroutine).
	recordFn func(id int64) error
	recorded int64
	// ownedFn reads the slot's log before the execution restarts within
	// the claim, and fails when a newer claim governs it.
	ownedFn func() error
	// shuffleStarts are the job's recorded shuffle positions by channel
	// (connector.ShuffleStarts); read only.
	shuffleStarts map[string][]int64
	// incarnation is the job's run, from its start record
	// (connector.ClaimIncarnation); read only.
	incarnation string
}

// shuffleEnds is slots.Settle's ends for the job's Shuffle: nil when
// it cannot tell them (not a connector.ShuffleEnds) or the job cuts no edge.
func (env *Environment) shuffleEnds(ctx context.Context) func() (map[string][]int64, error) {
	se, ok := env.cfg.dist.Shuffle.(connector.ShuffleEnds)
	if !ok || len(env.shuffleChannels) == 0 {
		return nil
	}
	return func() (map[string][]int64, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return se.Ends(ctx, maps.Clone(env.shuffleChannels))
	}
}

func (s *slotRun) record(id int64) error {
	if err := s.recordFn(id); err != nil {
		return err
	}
	s.recorded = id
	return nil
}

// slotIndex is the slot the execution runs, -1 for a job of one process.
func (ex *execution) slotIndex() int {
	if ex.slot == nil {
		return -1
	}
	return ex.slot.index
}

// slotLatest is latest for a slot: the last checkpoint this execution
// recorded in the slot's log (a restart within the claim), else the log's
// restore point, else nothing. Never the storage's newest: a checkpoint
// that was stored but not recorded must not be restored, since restoring
// commits its transactions.
func (ex *execution) slotLatest() (*engine.RestoredState, error) {
	var rs *engine.RestoredState
	where := ex.storageName()
	switch {
	case ex.slot.recorded > 0:
		chk, err := ex.storage.Load(ex.slot.recorded)
		if err != nil {
			return nil, &unrecoverableError{Err: fmt.Errorf("restore slot %d from its checkpoint %d: %w", ex.slot.index, ex.slot.recorded, err)}
		}
		rs = &engine.RestoredState{Chk: chk}
	case ex.slot.restorePath != "":
		var err error
		if rs, err = ex.restorePoint(); err != nil {
			return nil, err
		}
		where = rs.Path
	default:
		ex.reportRestore(nil)
		return nil, nil
	}
	if ex.slot.fromSavepoint && ex.slot.recorded == 0 {
		// A savepoint of a job in one process, at whatever parallelism:
		// the slot takes its subtask's share of it, as subtask i of a
		// job rescaled to one subtask per slot (key groups by range,
		// splits by the source's owner rule, committables old subtask
		// j to slot j mod slots).
		if err := slots.NotASlotCheckpoint(rs.Chk, where); err != nil {
			return nil, err
		}
		return ex.checkedRestore(rs, where)
	}
	// The checkpoint holds the slot's subtask only, of a job that runs
	// one subtask per slot.
	rs.Parallelism = ex.cfg.parallelism
	return ex.checkedRestore(rs, where)
}

// runDistributed runs the slots Kafka assigns this process until ctx is
// cancelled (every slot drains with a final checkpoint, and the process
// leaves the group) or a slot fails for good (the error).
func (env *Environment) runDistributed(ctx context.Context, g *jobGraph, name string) error {
	d := env.cfg.dist
	log := env.cfg.distLogger().With("job", d.Job)
	obs := env.observer()
	// The status board shows the job's graph; its checkpoints are the
	// slots', which always checkpoint.
	jobStarted(obs, g, name, true, env.cfg.cp.interval)
	obs.DistStarted(d.Job)
	replication := d.ReplicationFactor
	if replication == 0 {
		replication = -1
	}
	if err := claimDistributedRoot(ctx, env.cfg.cp.dir, d, env.cfg.cp.renamedFrom, log); err != nil {
		err = fmt.Errorf("job %q: %w", name, err)
		obs.JobEnded(ctx, err)
		return err
	}
	// Before joining: no slot is claimed before the job's start point is
	// settled.
	start, err := slots.Settle(env.cfg.cp.dir, d.Job, d.Slots, env.cfg.cp.restoreFrom, env.shuffleEnds(ctx), log)
	if err != nil {
		err = fmt.Errorf("job %q: %w", name, err)
		obs.JobEnded(ctx, err)
		return err
	}
	startFrom := start.Savepoint
	if startFrom != "" && env.cfg.cp.restoreFrom == "" {
		log.Info("splitflow: the job started from a savepoint; slots whose logs name no checkpoint start from it", "savepoint", startFrom)
	}
	m, err := slots.Join(ctx, d.Job, d.Slots,
		slots.WithKafka(d.clientOpts...),
		slots.WithReplicationFactor(replication),
		slots.WithSessionTimeout(d.SessionTimeout),
		// A member learns of a rebalance at its next heartbeat, and a
		// slot moves in two (the revocation, then the assignment): a
		// heartbeat a second keeps a process that joins from waiting
		// up to twice Kafka's 3s default for its first slots.
		slots.WithHeartbeatInterval(min(time.Second, d.SessionTimeout/3)),
		slots.WithMembershipLogger(log),
		// A process of another job (another graph, slot count or max
		// parallelism) is refused by the group before it gets a slot,
		// whether the job starts fresh or goes on from checkpoints.
		slots.WithIdentity(slots.Identity{Fingerprint: g.fingerprint(), Slots: d.Slots, MaxParallelism: env.cfg.maxParallelism}))
	if err != nil {
		err = fmt.Errorf("job %q: %w", name, err)
		obs.JobEnded(ctx, err)
		return err
	}
	dr := &distDriver{env: env, g: g, name: name, d: d, log: log, m: m, startFrom: startFrom, shuffleStarts: start.Shuffles, incarnation: start.Incarnation,
		runners: map[int]*slotRunner{}, ended: make(chan *slotRunner), spCh: make(chan slots.SavepointState), merging: map[int64]bool{}, mergeToken: mergeToken()}
	if dr.spStore, err = slots.OpenSavepointRequests(env.cfg.cp.dir, d.Job, log); err != nil {
		m.Close()
		err = fmt.Errorf("job %q: %w", name, err)
		obs.JobEnded(ctx, err)
		return err
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
	obs.JobEnded(ctx, err)
	return err
}

type distDriver struct {
	env  *Environment
	g    *jobGraph
	name string
	d    *Distributed
	log  *slog.Logger
	m    *slots.Membership
	// startFrom is the savepoint a slot whose log names no checkpoint
	// starts from (slots.Settle); "" for a fresh start.
	startFrom string
	// shuffleStarts are the positions the job's start record holds, where
	// a shuffle reader that restores none of its own starts.
	shuffleStarts map[string][]int64
	// incarnation is the start record's name of this run of the job.
	incarnation string

	runners map[int]*slotRunner
	ended   chan *slotRunner
	wg      sync.WaitGroup

	// The job's savepoint requests (distsavepoint.go): their storage,
	// the newest state read (spLatest; also read by runners) and its
	// changes (spCh), the request this process drains for (spSeq, 0:
	// none) and the merges it took on.
	spStore  checkpoint.RecordStorage
	spLatest atomic.Pointer[slots.SavepointState]
	spCh     chan slots.SavepointState
	spSeq    int64
	merging  map[int64]bool
	// mergeToken is what this driver writes in a merge record.
	mergeToken string
}

func (dr *distDriver) loop(ctx context.Context) (err error) {
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
		dr.env.observer().SlotsStopped()
		errs := []error{err}
		for _, r := range live {
			if r.err != nil && !errors.Is(r.err, errSlotLost) && !errors.Is(r.err, context.Canceled) {
				dr.log.Error("splitflow: slot failed while the process stopped", "slot", r.slot, "err", r.err)
				errs = append(errs, fmt.Errorf("job %q: slot %d: %w", dr.name, r.slot, r.err))
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
			return fmt.Errorf("job %q: %w", dr.name, err)
		case r := <-dr.ended:
			if err := dr.runnerEnded(r); err != nil {
				return err
			}
		case st := <-dr.spCh:
			if dr.savepointStep(st) {
				return ErrStopped
			}
		}
	}
}

// runnerEnded handles the end of a runner reported on ended: the
// process's error if the slot failed.
func (dr *distDriver) runnerEnded(r *slotRunner) error {
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
		dr.env.observer().SlotEnded(r.slot)
	}
	switch {
	case r.err == nil:
		dr.log.Info("splitflow: slot finished", "slot", r.slot)
	case errors.Is(r.err, errSlotLost):
		dr.log.Warn("splitflow: slot taken over by another process", "slot", r.slot, "err", r.err)
	default:
		dr.log.Error("splitflow: slot failed", "slot", r.slot, "err", r.err)
		return fmt.Errorf("job %q: slot %d: %w", dr.name, r.slot, r.err)
	}
	return nil
}

// change applies one step of the group's assignment.
func (dr *distDriver) change(ctx context.Context, c slots.Change) {
	if len(c.Revoked) > 0 {
		var stopping []*slotRunner
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
		dr.env.observer().SlotsReleased(time.Since(start))
		dr.env.observer().SlotChange(c.Member, c.Generation, nil, c.Revoked)
	}
	if len(c.Assigned) > 0 {
		dr.env.observer().SlotChange(c.Member, c.Generation, c.Assigned, nil)
	}
	for _, s := range c.Assigned {
		if old := dr.runners[s]; old != nil {
			// Still stopping from an earlier revocation: it ends first.
			old.kill()
			dr.await(old)
		}
		r := &slotRunner{dr: dr, slot: s, member: c.Member, gen: c.Generation, done: make(chan struct{}), forgotten: make(chan struct{})}
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
func (dr *distDriver) await(r *slotRunner) {
	<-r.done
	r.forget()
	if dr.runners[r.slot] == r {
		delete(dr.runners, r.slot)
	}
	if r.err != nil && !errors.Is(r.err, errSlotLost) && !errors.Is(r.err, context.Canceled) {
		dr.log.Warn("splitflow: slot ended with an error while it was released", "slot", r.slot, "err", r.err)
	}
}

func (dr *distDriver) awaitAll() {
	for _, r := range dr.runners {
		r.forget()
	}
	dr.wg.Wait()
}

// slotRunner runs one slot this process was assigned: it claims the slot
// in its ownership log, restores it, runs it, and records each of its
// checkpoints in the log before the checkpoint is notified.
type slotRunner struct {
	dr     *distDriver
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
	ex       atomic.Pointer[execution]
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

func (r *slotRunner) forget() {
	r.forgetOnce.Do(func() { close(r.forgotten) })
}

// ended reports the runner's end with err to the driver, unless the
// driver forgot it.
func (r *slotRunner) ended(err error) {
	r.err = err
	close(r.done)
	select {
	case r.dr.ended <- r:
	case <-r.forgotten:
	}
}

// drain stops the slot with a final checkpoint.
func (r *slotRunner) drain() { r.cancel() }

// kill stops the slot at once, committing nothing more.
func (r *slotRunner) kill() {
	r.lost.Store(true)
	r.cancel()
	if ex := r.ex.Load(); ex != nil {
		ex.master.Put(engine.PriorityUrgent, engine.Mail{Name: "slot lost", Run: func() error {
			ex.stop(fmt.Errorf("slot %d: %w", r.slot, errSlotLost))
			return nil
		}})
	}
}

// errClaimAgain: the log could not be read or written with a known
// outcome; the slot is claimed again from the log.
type errClaimAgain struct{ err error }

func (e *errClaimAgain) Error() string { return e.err.Error() }
func (e *errClaimAgain) Unwrap() error { return e.err }

func (r *slotRunner) run() error {
	root := r.dr.env.cfg.cp.dir
	st, err := checkpoint.OpenStorage(slots.LogPath(root, r.dr.d.Job, r.slot), checkpoint.WithLogger(r.dr.log))
	if err != nil {
		return fmt.Errorf("open the slot's log: %w", err)
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return fmt.Errorf("the checkpoint storage %s cannot keep the slot's log (%T)", slots.LogPath(root, r.dr.d.Job, r.slot), st)
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
func (r *slotRunner) claimAndRun(root string) error {
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
		return fmt.Errorf("%w: %w", errSlotLost, res.stop)
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
	cfg := r.dr.env.cfg
	cfg.cp.dir = slots.EpochPath(root, r.dr.d.Job, r.slot, rp.ClaimEpoch)
	slot := &slotRun{index: r.slot, epoch: rp.ClaimEpoch, nextID: rp.NextCheckpointID, recordFn: r.record, ownedFn: r.owned,
		shuffleStarts: r.dr.shuffleStarts, incarnation: r.dr.incarnation}
	switch {
	case rp.Checkpoint > 0:
		// WithRestoreFrom's savepoint is where the slot started; its log
		// says where it is now.
		slot.restorePath = slots.EpochPath(root, r.dr.d.Job, r.slot, rp.Epoch) + "/chk-" + strconv.FormatInt(rp.Checkpoint, 10)
	case r.dr.startFrom != "":
		slot.restorePath, slot.fromSavepoint = r.dr.startFrom, true
	}
	cfg.cp.restoreFrom = slot.restorePath
	// A slot restores one subtask of a job with one per slot: splits of
	// a checkpoint at another parallelism (a savepoint) go to its
	// enumerator, which gives the slot's reader those the owner rule
	// gives it, and keeps the rest, which no reader of it asks for.
	cfg.cp.rescaledToEnumerator = true
	// The execution's lines (checkpoints, restores, splits) name the job
	// and the slot, once each: the driver's logger carries the job.
	cfg.cp.logger = r.dr.log.With("slot", r.slot)
	r.dr.log.Info("splitflow: slot claimed", "slot", r.slot, "epoch", rp.ClaimEpoch, "restore", slot.restorePath, "ignored", len(rp.Ignored))
	ex, err := newExecutionWith(r.dr.env, r.dr.g, r.dr.name, &cfg, slot)
	if err != nil {
		return err
	}
	var savepoint string
	if slot.fromSavepoint {
		savepoint = slot.restorePath
	}
	r.dr.env.observer().SlotRunning(r.slot, rp.ClaimEpoch, rp.Checkpoint, savepoint)
	defer ex.releaseStorage()
	r.mu.Lock()
	r.holder, _ = ex.storage.(checkpoint.Holder)
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
	r.ex.Store(ex)
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
	err = ex.named(r.dr.name).run(r.ctx)
	if seq := r.drainSeq.Swap(0); err == nil && seq > 0 && ex.savepointDrain && r.ctx.Err() == nil {
		if ex.slot.recorded == 0 {
			return fmt.Errorf("slot %d drained for savepoint request %d without recording a checkpoint", r.slot, seq)
		}
		return &drainedForSavepoint{seq: seq, checkpoint: finalCheckpointPath(root, r.dr.d.Job, r.slot, rp.ClaimEpoch, ex.slot.recorded)}
	}
	return err
}

// record is the execution's slotRun.recordFn: it records checkpoint id
// in the slot's log, on the master goroutine, and returns nil once the
// checkpoint may be notified complete.
func (r *slotRunner) record(id int64) error {
	if r.lost.Load() {
		return fmt.Errorf("slot %d, checkpoint %d: %w", r.slot, id, errSlotLost)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.perform(r.own.Persisted(id))
	recorded := slices.Contains(res.notified, id)
	switch {
	case !recorded && res.stop != nil:
		return fmt.Errorf("checkpoint %d: %w: %w", id, errSlotLost, res.stop)
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
func (r *slotRunner) pruneOlderClaims(epoch int64) {
	root, job := r.dr.env.cfg.cp.dir, r.dr.d.Job
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

// owned is the execution's slotRun.ownedFn: it reads the slot's log, and
// fails with errSlotLost when a newer claim governs it (an *errClaimAgain
// when the log cannot be read).
func (r *slotRunner) owned() error {
	if r.lost.Load() {
		return fmt.Errorf("slot %d: %w", r.slot, errSlotLost)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.perform(r.own.Start())
	switch {
	case res.stop != nil:
		return fmt.Errorf("%w: %w", errSlotLost, res.stop)
	case res.fail != nil:
		return &errClaimAgain{fmt.Errorf("read the log before a restart: %w", res.fail)}
	}
	return nil
}

// claimEpochs lists the epochs of the slot's claims that have a storage:
// the epoch-<E> children of the slot's storage path (on S3, the key
// prefixes that hold objects).
func (r *slotRunner) claimEpochs() ([]int64, error) {
	names, err := checkpoint.Children(slots.StoragePath(r.dr.env.cfg.cp.dir, r.dr.d.Job, r.slot), checkpoint.WithLogger(r.dr.log))
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
func (r *slotRunner) storedIDs() ([]int64, error) {
	root, job := r.dr.env.cfg.cp.dir, r.dr.d.Job
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

// claimConfirmTimeout bounds the confirmation of a slot's claim, a part
// of a takeover (connector.Takeover).
const claimConfirmTimeout = 30 * time.Second

type ownershipResult struct {
	restore  *slots.Restore
	notified []int64
	stop     error
	fail     error
}

// perform carries out the ownership's actions, and those they lead to, in
// order. r.mu is held.
func (r *slotRunner) perform(acts []slots.Action) ownershipResult {
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
			ctx, cancel := context.WithTimeout(r.ctx, claimConfirmTimeout)
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
