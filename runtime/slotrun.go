package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/jobstorage"
	"github.com/splitflow/splitflow/runtime/internal/slotrun"
	"github.com/splitflow/splitflow/runtime/internal/slots"
	"github.com/splitflow/splitflow/runtime/status"
)

// A distributed job's process: runDistributed settles the job's start
// and hands the slots Kafka assigns it to the driver
// (runtime/internal/slotrun), which claims each and runs it as an
// execution of its own (slotExecution).

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

// slotIndex is the slot the execution runs, -1 for a job of one process.
func (ex *execution) slotIndex() int {
	if ex.slot == nil {
		return -1
	}
	return ex.slot.Index
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
	case ex.slot.Recorded() > 0:
		chk, err := ex.storage.Load(ex.slot.Recorded())
		if err != nil {
			return nil, &unrecoverableError{Err: fmt.Errorf("restore slot %d from its checkpoint %d: %w", ex.slot.Index, ex.slot.Recorded(), err)}
		}
		rs = &engine.RestoredState{Chk: chk}
	case ex.slot.RestorePath != "":
		var err error
		if rs, err = ex.restorePoint(); err != nil {
			return nil, err
		}
		where = rs.Path
	default:
		ex.reportRestore(nil)
		return nil, nil
	}
	if ex.slot.FromSavepoint && ex.slot.Recorded() == 0 {
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
	err := env.runSlots(ctx, g, name, log)
	obs.JobEnded(ctx, err)
	return err
}

func (env *Environment) runSlots(ctx context.Context, g *jobGraph, name string, log *slog.Logger) error {
	d := env.cfg.dist
	replication := d.ReplicationFactor
	if replication == 0 {
		replication = -1
	}
	if err := jobstorage.ClaimDistributedRoot(ctx, env.cfg.cp.dir, d.Job, d.Cluster, env.cfg.cp.renamedFrom, log); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	// Before joining: no slot is claimed before the job's start point is
	// settled.
	start, err := slots.Settle(env.cfg.cp.dir, d.Job, d.Slots, env.cfg.cp.restoreFrom, env.shuffleEnds(ctx), log)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if start.Savepoint != "" && env.cfg.cp.restoreFrom == "" {
		log.Info("splitflow: the job started from a savepoint; slots whose logs name no checkpoint start from it", "savepoint", start.Savepoint)
	}
	return slotrun.Run(ctx, slotrun.Config{
		Name: name, Job: d.Job, Slots: d.Slots,
		Root: env.cfg.cp.dir, SavepointDir: env.cfg.cp.savepointDir,
		Log: log, Obs: env.observer(),
		Membership: []slots.MembershipOption{
			slots.WithKafka(d.clientOpts...),
			slots.WithReplicationFactor(replication),
			slots.WithSessionTimeout(d.SessionTimeout),
			// A member learns of a rebalance at its next heartbeat, and
			// a slot moves in two (the revocation, then the
			// assignment): a heartbeat a second keeps a process that
			// joins from waiting up to twice Kafka's 3s default for its
			// first slots.
			slots.WithHeartbeatInterval(min(time.Second, d.SessionTimeout/3)),
			slots.WithMembershipLogger(log),
			// A process of another job (another graph, slot count or
			// max parallelism) is refused by the group before it gets
			// a slot, whether the job starts fresh or goes on from
			// checkpoints.
			slots.WithIdentity(slots.Identity{Fingerprint: g.fingerprint(), Slots: d.Slots, MaxParallelism: env.cfg.maxParallelism}),
		},
		Start: start,
		NewExecution: func(s *slotrun.Slot, dir string, log *slog.Logger) (slotrun.Execution, error) {
			cfg := env.cfg
			cfg.cp.dir = dir
			cfg.cp.restoreFrom = s.RestorePath
			// A slot restores one subtask of a job with one per slot:
			// splits of a checkpoint at another parallelism (a
			// savepoint) go to its enumerator, which gives the slot's
			// reader those the owner rule gives it, and keeps the
			// rest, which no reader of it asks for.
			cfg.cp.rescaledToEnumerator = true
			cfg.cp.logger = log
			ex, err := newExecutionWith(env, g, name, &cfg, s)
			if err != nil {
				return nil, err
			}
			return slotExecution{ex: ex, name: name}, nil
		},
		Savepoint: g.mergeGraph(),
	})
}

// mergeGraph is what a savepoint of the distributed job merges: the
// graph in one process, without the shuffles' operators.
func (g *jobGraph) mergeGraph() slotrun.MergeGraph {
	m := slotrun.MergeGraph{Prints: g.prints(), Operators: map[string]slotrun.MergeOperator{}}
	for _, n := range g.nodes {
		op := slotrun.MergeOperator{Cut: n.cut}
		if n.source != nil {
			op.MergeCoordinators = n.source.mergeSlotCoordinators
		}
		m.Operators[n.uid] = op
		if n.cut {
			delete(m.Prints, n.uid)
		}
	}
	return m
}

// slotExecution is an execution as the distributed driver runs it.
type slotExecution struct {
	ex   *execution
	name string
}

func (s slotExecution) Run(ctx context.Context) error { return s.ex.named(s.name).run(ctx) }

func (s slotExecution) Stop(err error) {
	s.ex.master.Put(engine.PriorityUrgent, engine.Mail{Name: "slot lost", Run: func() error {
		s.ex.stop(err)
		return nil
	}})
}

func (s slotExecution) DrainForSavepoint() {
	s.ex.master.Put(engine.PriorityDefault, engine.Mail{Name: "savepoint drain", Run: func() error {
		s.ex.beginSavepointDrain()
		return nil
	}})
}

func (s slotExecution) DrainedForSavepoint() bool   { return s.ex.savepointDrain }
func (s slotExecution) Storage() checkpoint.Storage { return s.ex.storage }
func (s slotExecution) Release()                    { s.ex.releaseStorage() }

// distributedSavepoint is TriggerSavepoint and StopWithSavepoint of a
// distributed job (slotrun.RequestSavepoint).
func (env *Environment) distributedSavepoint(ctx context.Context, target string, stop bool) (status.Savepoint, error) {
	d := env.cfg.dist
	if target == "" {
		target = env.cfg.cp.savepointDir
	}
	if target == "" {
		// The merging process may be another, given another directory:
		// the Go call names its own.
		return status.Savepoint{}, fmt.Errorf("%w: no target: name a directory or s3://bucket/prefix, or set WithSavepointDir", status.ErrSavepointRefused)
	}
	if env.cfg.cp.dir == "" || env.cfg.cp.interval <= 0 {
		return status.Savepoint{}, fmt.Errorf("%w: job %q takes checkpoints in no checkpoint root", status.ErrSavepointRefused, d.Job)
	}
	return slotrun.RequestSavepoint(ctx, env.cfg.cp.dir, d.Job, target, stop, env.cfg.distLogger())
}
