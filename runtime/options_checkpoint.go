package runtime

import (
	"errors"
	"log/slog"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/srccoord"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
)

// checkpointConfig holds the checkpointing and failover options.
type checkpointConfig struct {
	interval  time.Duration // 0: checkpointing off
	timeout   time.Duration
	minPause  time.Duration
	tolerable int
	dir       string
	retained  int
	storage   checkpoint.Storage
	// rescaledToEnumerator hands checkpointed splits to the enumerator
	// instead of the readers when the parallelism changed.
	rescaledToEnumerator bool
	allowNonRestored     bool
	restart              restart.Strategy
	restartSet           bool
	startupTimeout       time.Duration // 0: restart as the strategy allows
	logger               *slog.Logger
	listener             JobListener
	// gate holds test knobs: the operator-coordinator gate switched off
	// (the gate), to show what it prevents, and an event delay.
	gate srccoord.GateOptions

	// restoreFrom is WithRestoreFrom's path; savepointDir the default
	// target of savepoints (savepoint.go).
	restoreFrom, savepointDir string
	// renamedFrom is WithRenamedFrom's name.
	renamedFrom string
	// savepointAnywhere is WithSavepointTargetsAnywhere: a savepoint
	// requested over the status server may go anywhere.
	savepointAnywhere bool
}

func defaultCheckpointConfig() checkpointConfig {
	return checkpointConfig{timeout: 2 * time.Minute, retained: 3, startupTimeout: 2 * time.Minute}
}

func (c *checkpointConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, invalidGraph(format, args...)) }
	if c.interval < 0 {
		bad("checkpoint interval must be >= 0 (0 disables checkpoints), got %v", c.interval)
	}
	if c.interval > 0 && c.timeout <= 0 {
		bad("checkpoint timeout must be > 0, got %v", c.timeout)
	}
	if c.minPause < 0 {
		bad("min pause between checkpoints must be >= 0, got %v", c.minPause)
	}
	if c.tolerable < 0 {
		bad("tolerable checkpoint failures must be >= 0, got %d", c.tolerable)
	}
	if c.startupTimeout < 0 {
		bad("startup failure timeout must be >= 0 (0 restarts as the restart strategy allows), got %v", c.startupTimeout)
	}
	if c.restartSet && c.restart == nil {
		bad("restart strategy is nil: use restart.None(), restart.FixedDelay or restart.ExponentialDelay")
	} else if c.restartSet {
		if err := c.restart.Validate(); err != nil {
			bad("%v", err)
		}
	}
	if c.retained < 1 {
		bad("retained checkpoints must be >= 1, got %d", c.retained)
	}
	if c.interval == 0 && (c.dir != "" || c.storage != nil) {
		bad("a checkpoint directory or storage needs checkpoints: set WithCheckpointInterval > 0")
	}
	if c.interval == 0 && c.restoreFrom != "" {
		bad("WithRestoreFrom needs checkpoints: set WithCheckpointInterval > 0")
	}
	if c.dir != "" && c.storage != nil {
		bad("WithCheckpointDir and WithCheckpointStorage exclude each other")
	}
	return errors.Join(errs...)
}

func (c *checkpointConfig) enabled() bool { return c.interval > 0 }

func (c *checkpointConfig) restartStrategy() restart.Strategy {
	if c.restartSet {
		return c.restart
	}
	if c.enabled() {
		// Flink's default with checkpointing on: restart without end, a
		// second apart.
		return restart.FixedDelay(restart.Unlimited, time.Second)
	}
	return restart.None()
}

// WithCheckpointInterval turns checkpoints on: one is triggered every d
// (Flink's execution.checkpointing.interval). Default 0: no checkpoints, no
// restore, sinks commit only at the end of input.
func WithCheckpointInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.cp.interval = d })
}

// WithCheckpointTimeout aborts a checkpoint not complete d after its
// trigger (Flink's execution.checkpointing.timeout). Default 2m.
func WithCheckpointTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.cp.timeout = d })
}

// WithMinPauseBetweenCheckpoints leaves at least d between the end of one
// checkpoint and the trigger of the next (Flink's
// execution.checkpointing.min-pause). Default 0.
func WithMinPauseBetweenCheckpoints(d time.Duration) Option {
	return optionFunc(func(c *config) { c.cp.minPause = d })
}

// WithTolerableCheckpointFailures lets n checkpoints in a row fail before
// the job is failed and restarted (Flink's
// execution.checkpointing.tolerable-failed-checkpoints). Default 0. It
// covers failures that lose nothing: timeouts, storage errors, an operator
// whose state cannot be taken this time. A sink writer whose flush or
// prepare fails at a barrier is not among them: it fails its task at once,
// whatever n, since its open transaction may be gone.
func WithTolerableCheckpointFailures(n int) Option {
	return optionFunc(func(c *config) { c.cp.tolerable = n })
}

// WithCheckpointDir keeps checkpoints in dir (chk-<id>/ directories, see
// package checkpoint). A job started on a directory that holds checkpoints
// resumes from the newest one. When that one cannot be read, or is damaged
// and may have been reported complete, Execute fails with an error naming
// it and saying how to proceed; only a damaged checkpoint whose commit
// never returned is passed over (logged). The directory is locked while
// the job runs (an OS file lock on DIR/_lock holding the pid): a second job
// on it, in this process or another, fails at start naming the holder.
//
// dir may be s3://bucket/prefix instead: checkpoints then go to S3 or an
// S3-compatible server (checkpoint.NewS3Storage: credentials, region and
// AWS_ENDPOINT_URL the standard way of the AWS SDK), checked when the job
// starts (a bad URL, a missing bucket, no credentials or an unreachable
// endpoint fail Execute with an error saying so). S3 has no lock, but a
// root belongs to the job that first ran on it (its owner record,
// checkpoint.ClaimOwner): a job of another name fails at start with a
// *checkpoint.OwnedError, in any process (WithRenamedFrom hands the root
// to a job renamed), and a second job of this process on a prefix in use
// with a *checkpoint.LockedError.
// Default: checkpoints in memory, lost with the process.
func WithCheckpointDir(dir string) Option {
	return optionFunc(func(c *config) { c.cp.dir = dir })
}

// WithRenamedFrom says the job was called previous before, and takes over
// the checkpoint root (WithCheckpointDir, WithCheckpointStorage) that
// belongs to previous: the root's owner record (checkpoint.ClaimOwner)
// then names this job, and the job resumes from previous's checkpoints
// as a restart of it would. A checkpoint root belongs to the first job
// that ran on it, by name, and a job of another name is refused at start
// (*checkpoint.OwnedError): two jobs on one root delete each other's
// checkpoints and resume from each other's newest. Stop the job under its
// old name first; once the root is this job's, the option changes nothing
// and may stay set, and the old name is refused like any other. A root
// that belongs to neither previous nor this job is refused all the same.
// A distributed job keeps its checkpoints under <root>/<job>, so a
// distributed job renamed takes the root over but starts without the old
// name's checkpoints (restore it from a savepoint, WithRestoreFrom).
// Default: "" (a root of another job is refused).
func WithRenamedFrom(previous string) Option {
	return optionFunc(func(c *config) { c.cp.renamedFrom = previous })
}

// WithCheckpointStorage keeps checkpoints in s instead of memory or a
// directory; a job resumes from the newest valid checkpoint s holds. A
// *checkpoint.DirStorage is locked for the job's run (unless it holds its
// lock already, which it then keeps after the job) and serves one running
// job at a time: an Execute on it while another job of the process runs
// on it fails at start with a *checkpoint.LockedError.
func WithCheckpointStorage(s checkpoint.Storage) Option {
	return optionFunc(func(c *config) { c.cp.storage = s })
}

// WithCheckpointsRetained keeps the newest n completed checkpoints in the
// default storages (Flink's state.checkpoints.num-retained). Default 3, so
// that an operator who chooses to move a damaged newest checkpoint away
// has older ones to resume from.
func WithCheckpointsRetained(n int) Option {
	return optionFunc(func(c *config) { c.cp.retained = n })
}

// WithRestartStrategy decides whether and when a failed job restarts from
// its latest checkpoint (Flink's restart-strategy.type). Default: no
// restart when checkpoints are off; restart.FixedDelay(restart.Unlimited, time.Second)
// when they are on, as in Flink.
func WithRestartStrategy(s restart.Strategy) Option {
	return optionFunc(func(c *config) { c.cp.restart, c.cp.restartSet = s, true })
}

// WithStartupFailureTimeout bounds how long a job that never got going may
// keep failing and restarting: once d has passed since Execute began, a
// failure of a job that has not yet completed a checkpoint, whose sources
// have not yet emitted a record, and whose failing attempt (the failed
// task's, since it started or restarted) ran less than d, fails the job
// with an error wrapping ErrNeverStarted and the failure, whatever the
// restart strategy allows. Such a job cannot reach its external systems
// (wrong brokers, a missing topic, refused credentials): it fails fast,
// on every attempt, and restarting it every second only hides that. An
// attempt that ran d without failing got going, even with nothing to
// read (an empty topic) and no checkpoint due yet. Once the job got going
// the restart strategy alone decides. 0 turns the bound off. Default 2m.
func WithStartupFailureTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.cp.startupTimeout = d })
}

// WithLogger sets where the engine logs restarts and skipped checkpoints.
// Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.cp.logger = l })
}

// WithRescaledSplitsToEnumerator decides what happens to the splits of a
// source's readers when a job restores with another parallelism: by default
// they are dealt out round-robin to the new readers; with this option
// they go to the split enumerator instead, through AddSplitsBack(splits,
// oldSubtask) once per old subtask (oldSubtask may be beyond the current
// parallelism), and the enumerator assigns them as it sees fit.
func WithRescaledSplitsToEnumerator() Option {
	return optionFunc(func(c *config) { c.cp.rescaledToEnumerator = true })
}

// WithAllowNonRestoredState lets a job restore a checkpoint that holds
// state no operator of the job claims (its UID is gone or changed),
// dropping that state with a logged warning (Flink's
// --allowNonRestoredState). Default: such a restore is refused with an
// error naming the UIDs, since the sources would resume from the
// checkpoint while the dropped state (counts, windows, pending
// transactions) starts empty.
func WithAllowNonRestoredState() Option {
	return optionFunc(func(c *config) { c.cp.allowNonRestored = true })
}

// withGateDisabled switches the coordinator gate off. Tests only.
func withGateDisabled() Option { return optionFunc(func(c *config) { c.cp.gate.Off = true }) }

// withEventDelay delays every coordinator event by delay(). Tests only.
func withEventDelay(delay func()) Option {
	return optionFunc(func(c *config) { c.cp.gate.Delay = delay })
}

// JobListener receives a running job's milestones, for progress displays
// and operators' tooling. Its functions run on the job's driver goroutine,
// which also runs checkpoints and restarts: they must return promptly and
// must not call back into the job. A nil function is skipped.
type JobListener struct {
	// CheckpointCompleted is called once checkpoint checkpointID is durable,
	// before tasks and sinks are told (so before its transactions commit).
	CheckpointCompleted func(checkpointID int64)
	// Restarting is called when a failure restarts the job or one of its
	// regions: restart counts restarts so far (1 for the first), err is
	// the failure.
	Restarting func(restart int, err error)
	// Restored is called when the job starts and at every restart, once
	// it is decided where the attempt resumes: the checkpoint restored
	// (r.Checkpoint > 0, with its path, time and the sources' positions)
	// or a fresh start (r.Checkpoint == 0). It comes before any task of
	// the attempt starts.
	Restored func(r status.Restore)
}

// WithJobListener sets the job's listener (default: none).
func WithJobListener(l JobListener) Option {
	return optionFunc(func(c *config) { c.cp.listener = l })
}
