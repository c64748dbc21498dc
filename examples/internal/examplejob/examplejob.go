// Package examplejob is what the example programs (examples/wordcount,
// examples/windowcount, examples/ordertotals) share beyond package
// jobflag's flags: their main
// (signals, logger, exit codes), the usage error, the Kafka they run on
// (an in-process one without --brokers), topic set-up, the progress line,
// the failures --fail-every injects and the environment options around
// those of jobflag.
//
// Signals: SIGINT and SIGTERM both cancel the context the program runs
// with, which stops the job as Execute's cancellation does: the records
// in flight drain and the job ends with a final checkpoint, whose output
// is committed. After the first one the signals get their default action
// back, so a second one ends the process at once, even while the program
// is still draining or verifying.
package examplejob

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/jobflag"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Main runs a program and exits: parse reads the command line (an error
// exits 2; parse has printed it), then run gets a context that SIGINT and
// SIGTERM cancel and a logger on stderr (warnings; with verbose(o), info;
// with SPLITFLOW_DEBUG set, debug). After the first signal,
// "<name>: interrupted: <note>" is printed. The exit code is run's, and 1
// for an error with code 0; the error is printed as "<name>: <error>".
func Main[O any](name, note string, parse func([]string, io.Writer) (O, error), verbose func(O) bool,
	run func(context.Context, O, io.Writer, *slog.Logger) (int, error)) {
	os.Exit(mainCode(os.Args[1:], os.Stdout, os.Stderr, name, note, parse, verbose, run))
}

// mainCode is Main up to the exit code, on the given arguments and
// streams.
func mainCode[O any](args []string, stdout, stderr io.Writer, name, note string, parse func([]string, io.Writer) (O, error), verbose func(O) bool,
	run func(context.Context, O, io.Writer, *slog.Logger) (int, error)) int {
	o, err := parse(args, stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// stop cancels ctx too, after run: finished, closed before it, tells
	// that end from an interrupt, which alone is announced.
	finished := make(chan struct{})
	go func() {
		<-ctx.Done()
		select {
		case <-finished:
		default:
			AfterInterrupt(ctx, stop, stderr, name+": interrupted: "+note)
		}
	}()
	level := slog.LevelWarn
	if verbose(o) {
		level = slog.LevelInfo
	}
	if os.Getenv("SPLITFLOW_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	code, err := run(ctx, o, stdout, logger)
	close(finished)
	stop()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// AfterInterrupt waits for the first interrupt (ctx cancelled), then gives
// the signals back their default action with stop and prints msg on w: the
// job drains, which can take a while with a slow broker, and a second
// interrupt must still end the process at once.
func AfterInterrupt(ctx context.Context, stop func(), w io.Writer, msg string) {
	<-ctx.Done()
	stop()
	fmt.Fprintln(w, msg)
}

// UsageError prints err on fs's output, one "<name>: " line per problem
// of a joined error, then fs's usage, and returns err.
func UsageError(fs *flag.FlagSet, name string, err error) error {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(fs.Output(), "%s: %s\n", name, line)
	}
	fs.Usage()
	return err
}

// CheckArgs is the problem of arguments left after the flags, or nil.
func CheckArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

// Connect returns the seed brokers: an in-process cluster when brokers is
// empty, else brokers once they answer within 10s (clientOpts: the
// security settings). The func ends the in-process cluster.
func Connect(ctx context.Context, brokers []string, clientOpts []kgo.Opt) ([]string, func(), error) {
	if len(brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, nil, fmt.Errorf("start the in-process Kafka: %w", err)
		}
		return c.ListenAddrs(), c.Close, nil
	}
	list := strings.Join(brokers, ",")
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), clientOpts...), kgo.SeedBrokers(brokers...), kgo.DialTimeout(3*time.Second))...)
	if err != nil {
		return nil, nil, fmt.Errorf("--brokers %q: %w", list, err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return nil, nil, fmt.Errorf("cannot reach Kafka at %s within 10s: %w", list, err)
	}
	return brokers, func() {}, nil
}

// Client is a client on seeds with clientOpts (the security settings),
// then opts.
func Client(seeds []string, clientOpts []kgo.Opt, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(append(append([]kgo.Opt(nil), clientOpts...), kgo.SeedBrokers(seeds...)), opts...)...)
}

// Topic is a topic to create when missing.
type Topic struct {
	Name       string
	Partitions int
}

// EnsureTopics creates the topics that are missing, with the broker's
// default replication, through a client on seeds with clientOpts.
func EnsureTopics(ctx context.Context, seeds []string, clientOpts []kgo.Opt, topics ...Topic) error {
	cl, err := Client(seeds, clientOpts)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range topics {
		resp, err := adm.CreateTopic(ctx, int32(t.Partitions), -1, nil, t.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) && !strings.Contains(err.Error(), kerr.TopicAlreadyExists.Message) {
			return fmt.Errorf("create topic %q: %w", t.Name, err)
		}
	}
	return nil
}

// Partitions returns how many partitions topic has and whether all of
// them are empty: the examples write their input only into an empty
// topic, so that a restarted run never writes it twice.
func Partitions(ctx context.Context, cl *kgo.Client, topic string) (partitions int, empty bool, err error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, false, fmt.Errorf("list offsets of %q: %w", topic, err)
	}
	empty = true
	ends.Each(func(l kadm.ListedOffset) {
		partitions++
		if l.Offset > 0 {
			empty = false
		}
	})
	return partitions, empty, nil
}

// ShowProgress prints line(seconds since the start) on w every second
// until the returned func is called; once it returns, w is the caller's
// again.
func ShowProgress(w io.Writer, line func(secs int) string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		began := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(w, line(int(time.Since(began).Seconds())))
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// Failures injects the task failures of --fail-every: one every N
// records, each only after a checkpoint completed since the previous
// one, so that every restart resumes further along and the job always
// finishes. Its methods may be called from any goroutine.
type Failures struct {
	every int64
	seen  atomic.Int64
	count atomic.Int64
	armed atomic.Bool
}

// NewFailures injects one failure every n records; n = 0: never. A nil
// *Failures injects none.
func NewFailures(n int64) *Failures {
	f := &Failures{every: n}
	f.armed.Store(true)
	return f
}

// Fail reports whether the record being processed fails.
func (f *Failures) Fail() bool {
	if f == nil || f.every <= 0 || f.seen.Add(1)%f.every != 0 || !f.armed.CompareAndSwap(true, false) {
		return false
	}
	f.count.Add(1)
	return true
}

// Count is how many failures were injected.
func (f *Failures) Count() int64 {
	if f == nil {
		return 0
	}
	return f.count.Load()
}

// EnvOptions are the examples' environment options: job's
// (jobflag.Job.RuntimeOptions, with logger), restarts without limit 100ms
// apart, and a listener that counts checkpoints and restarts and arms
// failures after each checkpoint.
func EnvOptions(job *jobflag.Job, logger *slog.Logger, failures *Failures, checkpoints, restarts *atomic.Int64) ([]runtime.Option, error) {
	opts, err := job.RuntimeOptions(logger)
	if err != nil {
		return nil, err
	}
	return append(opts,
		runtime.WithRestartStrategy(restart.FixedDelay(restart.Unlimited, 100*time.Millisecond)),
		runtime.WithJobListener(runtime.JobListener{
			CheckpointCompleted: func(int64) {
				checkpoints.Add(1)
				if failures != nil {
					failures.armed.Store(true)
				}
			},
			Restarting: func(int, error) { restarts.Add(1) },
		})), nil
}
