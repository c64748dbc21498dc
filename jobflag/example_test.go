package jobflag_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/jobflag"
	"github.com/splitflow/splitflow/runtime"
)

// A job of one's own with the common command line: upper-cases the lines
// of one topic into another, exactly-once. Run as
//
//	upper --brokers localhost:9092 --checkpoint-dir /var/lib/upper --http :8081
//
// it takes every flag of the package doc, and --input-topic and
// --output-topic of its own. SIGINT and SIGTERM cancel Execute's context:
// the job drains and ends with a final checkpoint, whose output is
// committed.
func Example_job() {
	fs := flag.NewFlagSet("upper", flag.ContinueOnError)
	in := fs.String("input-topic", "lines", "topic to read")
	out := fs.String("output-topic", "upper", "topic to write")
	flags := jobflag.Register(fs, jobflag.DefaultParallelism(2))
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	job, err := flags.Job(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "upper:", err)
		fs.Usage()
		os.Exit(2)
	}
	if err := run(job, *in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "upper:", err)
		os.Exit(1)
	}
}

func run(job *jobflag.Job, in, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Bound first: a port in use is reported before any Kafka work.
	if _, err := job.Listen(); err != nil {
		return err
	}
	src, err := kafka.NewSource(kafka.StringValues(), job.SourceOpts(kafka.WithTopics(in))...)
	if err != nil {
		return err
	}
	sink, err := kafka.NewSink(kafka.KeyValueSerializer(out, func(s string) ([]byte, []byte, error) { return nil, []byte(s), nil }),
		job.SinkOpts(kafka.WithExactlyOnce(job.Name))...)
	if err != nil {
		return err
	}
	opts, err := job.RuntimeOptions(logger)
	if err != nil {
		return err
	}
	env := runtime.NewEnvironment(opts...)
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	upper := runtime.Map(lines, func(s string) (string, error) { return strings.ToUpper(s), nil })
	runtime.SinkTo(upper, sink).UID("upper-sink")
	return env.Execute(ctx, job.Name)
}
