package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/jobflag"
)

// subcommand runs wordcount write-input or wordcount verify, for a
// distributed job, and returns the exit code.
func subcommand(name string, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := runSubcommand(ctx, name, args, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "wordcount %s: %v\n", name, err)
	}
	return code
}

type subOptions struct {
	inputTopic, outputTopic, inputFile string
	partitions                         int
	timeout                            time.Duration
	latest                             bool
}

func runSubcommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("wordcount "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var so subOptions
	cluster := jobflag.RegisterCluster(fs)
	fs.StringVar(&so.inputTopic, "input-topic", "lines", "topic of input lines")
	fs.StringVar(&so.outputTopic, "output-topic", "counts", "topic of (word, count) records")
	if name == "write-input" {
		fs.StringVar(&so.inputFile, "input-file", "", "text to write (default: the built-in text)")
		fs.IntVar(&so.partitions, "partitions", 4, "partitions of the topics, when they are created")
	} else {
		fs.DurationVar(&so.timeout, "timeout", 2*time.Minute, "how long to wait for the output to be complete")
		fs.Func("emit", "what the job's count writes (its --emit): every (default) or latest", func(v string) error {
			switch v {
			case "every", "latest":
				so.latest = v == "latest"
				return nil
			}
			return fmt.Errorf("must be every or latest, not %q", v)
		})
	}
	fs.Usage = func() {
		switch name {
		case "write-input":
			fmt.Fprintf(fs.Output(), "usage: wordcount write-input --brokers B [flags]\n\nCreates the input and output topics if missing and writes the input text into the input topic if it is empty, for the processes of a distributed job (wordcount --distributed). Flags:\n")
		default:
			fmt.Fprintf(fs.Output(), "usage: wordcount verify --brokers B [flags]\n\nWaits until the output topic, as a read_committed consumer sees it, holds every word's counts 1..n for the words of the input topic, each once, and exits 0; exits 1 at once on a duplicate or a count that should not exist, and after --timeout on counts still missing. Flags:\n")
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	clientOpts, err := cluster.ClientOpts(os.Getenv)
	errs := []error{examplejob.CheckArgs(fs), err}
	if name == "verify" && so.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, not %s", so.timeout))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(fs.Output(), "wordcount %s: %v\n", name, err)
		fs.Usage()
		return 2, nil
	}
	o := options{inputTopic: so.inputTopic, outputTopic: so.outputTopic, inputFile: so.inputFile,
		partitions: so.partitions, clientOpts: clientOpts, latest: so.latest}
	seeds, _, err := examplejob.Connect(ctx, strings.Split(cluster.Brokers(), ","), clientOpts)
	if err != nil {
		return 1, err
	}
	if name == "write-input" {
		if err := ensureTopics(ctx, seeds, o); err != nil {
			return 1, err
		}
		n, err := fillInput(ctx, seeds, o)
		if err != nil {
			return 1, err
		}
		if n == 0 {
			fmt.Fprintf(stdout, "input topic %q is not empty; nothing written\n", o.inputTopic)
		} else {
			fmt.Fprintf(stdout, "wrote %d lines into %q\n", n, o.inputTopic)
		}
		return 0, nil
	}
	r, err := awaitExact(ctx, seeds, o, so.timeout)
	if err != nil {
		return 1, err
	}
	if !r.ok() {
		printFailure(stdout, r)
		return 1, errNotExact
	}
	fmt.Fprintf(stdout, "exactly-once: OK words=%d updates=%d duplicates=0 missing=0\n", r.words, r.updates)
	return 0, nil
}

// awaitExact reads the input topic, then the output topic as a
// read_committed consumer sees it now, until every word's counts are
// there (the report is ok), a duplicate or a count that should not exist
// shows (those never go away), or timeout passes (the last report).
func awaitExact(ctx context.Context, seeds []string, o options, timeout time.Duration) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want, err := inputCounts(ctx, seeds, o.inputTopic, o.clientOpts)
	if err != nil {
		return report{}, err
	}
	var last report
	for {
		recs, err := committed.Visible(ctx, seeds, o.outputTopic, 2*time.Second, o.clientOpts...)
		if err != nil {
			if ctx.Err() != nil && last.words+last.missing > 0 {
				return last, nil
			}
			return report{}, fmt.Errorf("read %q: %w", o.outputTopic, err)
		}
		if o.latest {
			last = checkLatest(recs, want, false)
		} else {
			last = check(recs, want, false)
		}
		if last.ok() || last.duplicates > 0 || len(last.unexpected) > 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func printFailure(w io.Writer, r report) {
	fmt.Fprintf(w, "exactly-once: FAILED words=%d updates=%d duplicates=%d missing=%d\n", r.words, r.updates, r.duplicates, r.missing)
	for i, u := range r.unexpected {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.unexpected)-10)
			break
		}
		fmt.Fprintf(w, "  unexpected: %s\n", u)
	}
}
