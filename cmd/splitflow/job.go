package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splitflow/splitflow/jobflag"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/slotinspect"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The job commands look at a distributed job from outside: its consumer
// group (who owns which slot), its slot ownership logs (who claimed each
// slot last and where it restarts), and its internal topics, through
// runtime/slotinspect, which reads them by the rules the job's processes
// keep.

// defaultJobTimeout bounds a job command as a whole, unreachable brokers
// included.
const defaultJobTimeout = 30 * time.Second

// jobFlags are the flags every job command takes.
type jobFlags struct {
	fs      *flag.FlagSet
	cluster *jobflag.Cluster
	job     *string
	timeout *time.Duration
}

func newJobFlags(name string, stderr io.Writer) jobFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return jobFlags{
		fs:      fs,
		cluster: jobflag.RegisterCluster(fs),
		job:     fs.String("job", "", "the job's name, as its processes were started with"),
		timeout: fs.Duration("timeout", defaultJobTimeout, "give up after this long (unreachable brokers included)"),
	}
}

// client parses args and returns a client for the brokers, with ctx bounded
// by --timeout. Every bad setting is one usage error, before anything is
// dialled.
func (f jobFlags) client(ctx context.Context, args []string) (*kgo.Client, context.Context, context.CancelFunc, error) {
	if err := f.fs.Parse(args); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if f.fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("%w: unexpected arguments: %s", errUsage, strings.Join(f.fs.Args(), " "))
	}
	if f.cluster.Brokers() == "" || *f.job == "" {
		return nil, nil, nil, fmt.Errorf("%w: --brokers and --job are required", errUsage)
	}
	var errs []error
	if err := slotinspect.ValidateJob(*f.job); err != nil {
		errs = append(errs, fmt.Errorf("--job: %w", err))
	}
	if *f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: it must be positive (default %v)", *f.timeout, defaultJobTimeout))
	}
	opts, err := f.cluster.ClientOpts(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	// Retries stop with the command: a broker that never answers is an
	// error after --timeout, not a hang.
	dial := min(5*time.Second, *f.timeout)
	cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(dial), kgo.RetryTimeout(*f.timeout))...)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	return cl, ctx, cancel, nil
}

// brokersErr explains a failure to reach the brokers.
func brokersErr(f jobFlags, err error) error {
	if errors.Is(err, slotinspect.ErrBrokers) {
		return fmt.Errorf("brokers %s: %w; check --brokers, that the brokers are up, and the --kafka-tls*/--kafka-sasl-* settings (--timeout %v bounds the wait)", f.cluster.Brokers(), err, *f.timeout)
	}
	return err
}

// jobStatusCmd is `splitflow job status`.
func jobStatusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobFlags("job status", stderr)
	root := f.fs.String("checkpoint-dir", "", "the job's checkpoint root (directory or s3://bucket/prefix): also read each slot's ownership log")
	asJSON := f.fs.Bool("json", false, "print JSON")
	cl, ctx, cancel, err := f.client(ctx, args)
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	if *root != "" && !checkpoint.IsS3URL(*root) {
		// A mistyped directory would read as every slot fresh.
		if _, err := os.Stat(*root); err != nil {
			return fmt.Errorf("--checkpoint-dir: %w", err)
		}
	}
	st, err := slotinspect.ReadStatus(ctx, kadm.NewClient(cl), *f.job, *root)
	if err != nil {
		return brokersErr(f, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(st)
	} else {
		err = st.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if n := st.LogErrors(); n > 0 {
		return fmt.Errorf("job %s: the ownership log of %d slot(s) could not be read (see above)", st.Job, n)
	}
	return nil
}

// jobDeleteTopicsCmd is `splitflow job delete-internal-topics`.
func jobDeleteTopicsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobFlags("job delete-internal-topics", stderr)
	yes := f.fs.Bool("yes", false, "delete; without it the topics are only listed")
	cl, ctx, cancel, err := f.client(ctx, args)
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	job := *f.job
	if !*yes {
		topics, err := slotinspect.InternalTopics(ctx, adm, job)
		if err != nil {
			return brokersErr(f, err)
		}
		if err := slotinspect.CheckGroupEmpty(ctx, adm, job); err != nil {
			return fmt.Errorf("job %s: %w", job, err)
		}
		fmt.Fprintf(stdout, "job %s: group %s has no members; --yes deletes these topics:\n", job, slotinspect.Group(job))
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, t := range topics {
			fmt.Fprintf(tw, "  %s\t%d partition(s)\n", t.Topic, t.Partitions)
		}
		_ = tw.Flush()
		fmt.Fprintln(stdout, "nothing deleted: run again with --yes to delete them")
		return nil
	}
	deleted, err := slotinspect.DeleteInternalTopics(ctx, adm, job)
	for _, name := range deleted {
		fmt.Fprintf(stdout, "deleted %s\n", name)
	}
	var ge *slotinspect.GroupNotEmptyError
	if errors.As(err, &ge) {
		return fmt.Errorf("job %s: %w", job, err)
	}
	return brokersErr(f, err)
}
