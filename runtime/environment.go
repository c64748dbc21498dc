package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/status"
)

// Option configures an Environment.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	parallelism           int
	maxParallelism        int
	bufferSize            int
	buffersPerChannel     int
	flushTimeout          time.Duration
	chaining              bool
	autoWatermarkInterval time.Duration
	drainTimeout          time.Duration
	cancelTimeout         time.Duration // 0: wait for cancelled tasks without end
	cp                    checkpointConfig
	state                 stateConfig   // options_state.go
	http                  httpConfig    // http.go
	metrics               metricsConfig // options_metrics.go
	// clock is the job's processing time in milliseconds since the Unix
	// epoch: what CurrentProcessingTime returns, what processing-time
	// timers and windows fire by and what state TTL stamps and expires
	// by. nil is the wall clock; tests set one they move by hand
	// (processingTime reads it).
	clock func() int64
	// dist is set for a distributed job (distributed.go).
	dist *Distributed
}

// processingTime is the job's processing-time clock (config.clock).
func (c *config) processingTime() func() int64 {
	if c.clock != nil {
		return c.clock
	}
	return wallClock
}

func defaultConfig() config {
	return config{
		parallelism:           1,
		maxParallelism:        keygroup.DefaultMaxParallelism,
		bufferSize:            512,
		buffersPerChannel:     2,
		flushTimeout:          100 * time.Millisecond,
		chaining:              true,
		autoWatermarkInterval: 200 * time.Millisecond,
		drainTimeout:          30 * time.Second,
		cancelTimeout:         180 * time.Second,
		cp:                    defaultCheckpointConfig(),
		state:                 defaultStateConfig(),
	}
}

// validate is the one place options are checked; Execute calls it.
func (c *config) validate() error {
	// Every problem is reported at once, so that a user fixes them in one
	// go (errors.Join; each wraps ErrInvalidGraph).
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, invalidGraph(format, args...)) }
	if c.parallelism <= 0 {
		bad("parallelism must be > 0, got %d", c.parallelism)
	}
	if c.maxParallelism <= 0 || c.maxParallelism > keygroup.UpperBoundMaxParallelism {
		bad("max parallelism must be in [1, %d], got %d", keygroup.UpperBoundMaxParallelism, c.maxParallelism)
	} else if c.maxParallelism < c.parallelism {
		bad("max parallelism %d is below the parallelism %d; raise WithMaxParallelism (it is the number of key groups)", c.maxParallelism, c.parallelism)
	}
	if c.bufferSize <= 0 {
		bad("buffer size must be > 0 records, got %d", c.bufferSize)
	}
	if c.buffersPerChannel <= 0 {
		bad("buffers per channel must be > 0, got %d", c.buffersPerChannel)
	}
	if c.drainTimeout <= 0 {
		bad("drain timeout must be > 0, got %v", c.drainTimeout)
	}
	if c.cancelTimeout < 0 {
		bad("task cancellation timeout must be >= 0 (0 waits without end), got %v", c.cancelTimeout)
	}
	return errors.Join(append(errs, c.state.validate(), c.cp.validate(), c.validateDistributed())...)
}

// WithParallelism sets the default parallelism of every operator (Flink's
// parallelism.default). Default 1.
func WithParallelism(n int) Option { return optionFunc(func(c *config) { c.parallelism = n }) }

// WithMaxParallelism sets the number of key groups, the upper bound of any
// operator's parallelism and the unit in which keyed state will be
// redistributed (Flink's pipeline.max-parallelism). Changing it changes
// which subtask owns which key, so keep it fixed for the life of a job.
// Default 128, at most 32768 (Flink's upper bound, 2^15).
func WithMaxParallelism(n int) Option { return optionFunc(func(c *config) { c.maxParallelism = n }) }

// WithBufferSize sets how many records a network buffer (a batch between
// two tasks) holds. Default 512.
func WithBufferSize(records int) Option {
	return optionFunc(func(c *config) { c.bufferSize = records })
}

// WithBuffersPerChannel sets how many full buffers each input channel
// queues before its producer is backpressured (Flink's
// taskmanager.network.memory.buffers-per-channel). Default 2.
func WithBuffersPerChannel(n int) Option {
	return optionFunc(func(c *config) { c.buffersPerChannel = n })
}

// WithFlushTimeout sets how long a partly filled buffer may wait before it
// is sent (Flink's execution.buffer-timeout). 0 sends after every step of
// a task (lowest latency); a negative value sends only full buffers and
// before events. Default 100ms.
func WithFlushTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.flushTimeout = d })
}

// WithoutChaining turns operator chaining off for the whole job, so every
// operator runs in a task of its own (Flink's
// pipeline.operator-chaining: false). Default: chaining on.
func WithoutChaining() Option { return optionFunc(func(c *config) { c.chaining = false }) }

// WithAutoWatermarkInterval sets how often sources call
// watermark.Generator.OnPeriodicEmit (Flink's pipeline.auto-watermark-interval);
// 0 disables periodic emission. Default 200ms.
func WithAutoWatermarkInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.autoWatermarkInterval = d })
}

// WithDrainTimeout bounds the graceful stop that follows the cancellation
// of Execute's context: if the job has not drained by then, it is stopped
// hard and Execute returns ErrDrainTimeout. Default 30s.
func WithDrainTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.drainTimeout = d })
}

// WithTaskCancellationTimeout bounds how long a cancelled task (stopped
// for a restart, or hard after a failure or the drain timeout) may take
// to exit (Flink's task.cancellation.timeout). A task that ignores its
// cancellation (a user function blocked on a channel, a connector call
// without a context) would otherwise hold the restart, or Execute's
// return, forever: past d the job fails with a *TaskCancellationError
// naming the task and showing where its goroutine is, and Execute returns
// without waiting for that goroutine, which is left running. 0 waits
// without end. Default 180s. Keep it well above what connectors take to
// close with their broker away: an exactly-once Kafka sink takes up to
// 15 s (aborting its open transaction, then checking its commits' markers).
func WithTaskCancellationTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.cancelTimeout = d })
}

// Environment collects the operators of one job and runs it. Build the
// graph with FromSource and the other functions of this package, then call
// Execute once. An Environment is not safe for concurrent use while the
// graph is being built.
type Environment struct {
	cfg      config
	nodes    []*node
	executed bool
	// shuffleChannels are the channels a distributed job's cut made,
	// with their partition counts (cutShuffles), whose ends a fresh
	// start records.
	shuffleChannels map[string]int

	// hooks lets tests observe tasks; nil in production.
	hooks *testHooks

	// httpServer is the WithHTTP server while Execute runs; HTTPAddr
	// reads it from other goroutines.
	httpServer atomic.Pointer[status.Server]
	// running is the execution while Execute runs it, for
	// TriggerSavepoint and StopWithSavepoint from other goroutines.
	running atomic.Pointer[execution]

	// obs holds the job's metrics and status (runtime/internal/observe), created on
	// first use by whichever goroutine asks first.
	obsOnce sync.Once
	obs     *observe.Observer
}

type testHooks struct {
	taskCreated func(*task)
	// checkpointCompleted runs on the master goroutine after checkpoint
	// id was persisted, before anything is notified.
	checkpointCompleted func(id int64, s checkpoint.Storage)
	// barrierInjected runs on the master goroutine when barrier id is
	// put into the source tasks' mailboxes.
	barrierInjected func(id int64)
}

// NewEnvironment returns an empty job with the given options. Options are
// validated by Execute.
func NewEnvironment(opts ...Option) *Environment {
	env := &Environment{cfg: defaultConfig()}
	for _, o := range opts {
		o.apply(&env.cfg)
	}
	return env
}

// Execute runs the job until it finishes, is stopped, or ctx is cancelled.
//
//   - When every source is bounded and has ended, and everything they
//     produced has reached the sinks (each sink was flushed with
//     Flush(true)), Execute returns nil.
//   - When ctx is cancelled, the job stops gracefully: sources stop reading
//     at their next step (no final watermark is emitted, and no watermark
//     moves because of the stop: see Event time in the package doc), the
//     records in flight drain through the job, sinks are flushed and
//     closed, and Execute returns nil: the caller asked for the end. If
//     draining takes longer than the drain timeout, the job is stopped
//     hard and Execute returns ErrDrainTimeout.
//   - When the job is stopped while it runs, by StopWithSavepoint or by
//     POST /api/v1/job/stop of the status server, it ends as on a cancel
//     of ctx, and Execute returns ErrStopped (or ErrDrainTimeout), so
//     that its caller tells a stop from the end of the input; a program
//     that stops its own job treats ErrStopped as success.
//   - When ctx is cancelled while the job waits to restart after a
//     failure, the restart runs at once as such a drain (its sinks commit
//     the transactions restored from the last completed checkpoint, its
//     sources stop before reading on), and Execute returns an error
//     wrapping ErrCancelledWhileRestarting and the failure; if that drain
//     fails too, the error says the restored transactions may still be
//     open and how to commit them.
//   - When an operator fails, every task and the source coordinators stop,
//     every reader and writer is closed, and Execute returns the first
//     failure as an *OperatorError naming the operator and subtask.
//   - An invalid graph is rejected before anything runs, with an error
//     wrapping ErrInvalidGraph.
//
// In every case Execute returns only after all goroutines it started have
// exited, the WithHTTP server's included, with one exception: a task that
// ignores its cancellation for longer than WithTaskCancellationTimeout
// fails the job with a *TaskCancellationError, and its goroutine is left
// running. name is used in errors.
func (env *Environment) Execute(ctx context.Context, name string) error {
	if env.executed {
		return ErrAlreadyExecuted
	}
	env.executed = true
	// The status server holds a status.WithListener listener from here
	// and closes it on every path, also when the job is refused before
	// the server starts (Close is once; a started server is stopped
	// below, earlier).
	srv, httpErr := env.newHTTP()
	if srv != nil {
		defer srv.Close()
	}
	if err := errors.Join(env.cfg.validate(), httpErr); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if env.cfg.dist != nil {
		// Every operator runs one subtask per slot, and the keyed edges
		// go through the shuffle, so that slot i is subtask i of every
		// chain.
		env.cfg.parallelism = env.cfg.dist.Slots
		if err := env.cutShuffles(); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	g, err := buildJobGraph(env)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if env.cfg.dist != nil && !g.pointwise() {
		return fmt.Errorf("job %q: %w", name, invalidGraph("distributed: after the keyed edges are cut, the job is not made of forward pipelines of one parallelism; every operator must run one subtask per slot"))
	}
	// The job holds its metrics registry from here until it returns, so a
	// registry shared with another job that is running is refused before
	// anything of this one runs.
	jobName := name
	if env.cfg.dist != nil {
		jobName = env.cfg.dist.Job
	}
	releaseMetrics, err := env.observer().Attach(name, jobName)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	defer releaseMetrics()
	// A distributed job makes an execution per slot it runs (runtime/internal/slotrun).
	var ex *execution
	if env.cfg.dist == nil {
		if ex, err = newExecution(env, g, name); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
		defer ex.releaseStorage()
		g.warnDefaultUIDs(ex.log)
	}
	// The status server is up before the first task starts, so the whole
	// run can be watched, and down before Execute returns, so nothing
	// outlives the job. Its POST /api/v1/job/stop stops the job as a
	// cancel of ctx would, and so does StopWithSavepoint; both mark the
	// job stopped, which turns Execute's nil into ErrStopped.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopped atomic.Bool
	stopJob := func() {
		stopped.Store(true)
		cancel()
	}
	if srv != nil {
		if err := env.startHTTP(srv, stopJob); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
		defer env.stopHTTP(srv)
	}
	if ex == nil {
		return stoppedResult(env.runDistributed(ctx, g, name), &stopped)
	}
	ex.cancelRun = stopJob
	env.running.Store(ex)
	defer env.running.Store(nil)
	return stoppedResult(ex.named(name).run(ctx), &stopped)
}

// stoppedResult is Execute's result for a job that ended with err: a job
// that ended without an error after a stop ended because of it.
func stoppedResult(err error, stopped *atomic.Bool) error {
	if err == nil && stopped.Load() {
		return ErrStopped
	}
	return err
}
