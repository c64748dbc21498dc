// Command wordcount is splitflow's main example: a Kafka topic of lines is
// split into words, keyed by word, counted, and the running counts are
// written to a Kafka topic (or, with --postgres, a PostgreSQL table)
// exactly-once. With no flags it starts an
// in-process Kafka (franz-go's kfake), fills topic "lines" with a built-in
// text, runs the job to the end of that input, and then verifies the output.
//
// Output records: key = the word, value = its running count in decimal. A
// word seen n times produces the records 1, 2, ..., n, each exactly once in
// what a read_committed consumer sees. With --emit latest (runtime.EmitLatest)
// the count emits each changed word's latest count once per checkpoint
// instead: a word's records are strictly increasing counts ending at n,
// most steps left out.
//
// Verification drains the output topic with read_committed and checks, for
// every word, that the counts are exactly 1..n (with --emit latest:
// strictly increasing, ending at n) with n the word's count in the input
// topic. It prints
//
//	exactly-once: OK words=W updates=U duplicates=0 missing=0
//
// and exits 0, or prints what is wrong and exits 1. Bad flags exit 2.
//
// With --postgres URL the count updates go to the PostgreSQL table
// --table (default word_counts) instead of the output topic, each as a
// row (word text, n bigint) appended exactly-once by the PostgreSQL sink
// in insert mode: the rows of a checkpoint are written at its commit in
// one transaction with the sink's progress row (table
// splitflow_sink_progress). The table is created when missing, as
//
//	CREATE TABLE IF NOT EXISTS word_counts (word text NOT NULL, n bigint NOT NULL)
//
// and verification reads it: every (word, n) once, each word's n running
// 1..count. The table is appended to, never cleared: a run started
// afresh (no --checkpoint-dir, or a new one) on a table that holds an
// earlier run's rows writes them again, and verification says so; use a
// new table, or restart from the checkpoints. --postgres does not run
// with --distributed.
//
// With --http ADDR the job's status is served while it runs: Prometheus
// metrics at /metrics, liveness and readiness at /healthz and /readyz, the
// job as JSON at /api/v1/job and a live page of the job graph at /. The
// bounded default run lasts about a second; --unbounded keeps it (and the
// server) up until interrupted, and an interrupt is followed by the
// verification of what was committed so far; a second interrupt ends the
// process at once.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/jobflag"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvHTTPToken holds the status server's token (jobflag.EnvHTTPToken).
const EnvHTTPToken = jobflag.EnvHTTPToken

type options struct {
	// job is what the common flags say (package jobflag): brokers,
	// checkpoints, savepoints, state backend, status server, --distributed,
	// the --kafka-* security settings.
	job         *jobflag.Job
	inputTopic  string
	outputTopic string
	inputFile   string
	txnPrefix   string
	unbounded   bool
	failEvery   int64
	partitions  int
	verbose     bool
	// postgres, when set, is the connection string of the PostgreSQL
	// database whose table (table) receives the count updates instead
	// of outputTopic.
	postgres string
	table    string
	// noTimeoutCheck: kafka.WithoutBrokerTimeoutCheck on the sink.
	noTimeoutCheck bool
	// leaseSession is the sink's prefix lease session timeout
	// (kafka.WithPrefixLeaseSessionTimeout; 0: the sink's default).
	leaseSession time.Duration
	// discovery is how often an unbounded input looks for new partitions
	// (kafka.WithPartitionDiscoveryInterval).
	discovery time.Duration
	// latest: --emit latest (runtime.EmitLatest on the count).
	latest bool
	// clientOpts are the franz-go options of the job's security settings,
	// for the clients the job does not make itself.
	clientOpts []kgo.Opt

	// onHTTP, if set, learns the status server's address once it is bound
	// (tests bind port 0).
	onHTTP func(addr string)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("wordcount", flag.ContinueOnError)
	fs.SetOutput(stderr)
	common := jobflag.Register(fs, jobflag.BrokersOptional("an in-process Kafka"), jobflag.DefaultParallelism(2))
	fs.Lookup("from-savepoint").Usage += "; without --unbounded the run ends at the input's end offsets as of its start"
	fs.Lookup("distributed").Usage += "; never writes the input (wordcount write-input does), and leaves the verification to wordcount verify"
	fs.StringVar(&o.inputTopic, "input-topic", "lines", "topic of input lines")
	fs.StringVar(&o.outputTopic, "output-topic", "counts", "topic of (word, count) records")
	fs.StringVar(&o.inputFile, "input-file", "", "text to write into the input topic (default: a built-in text); written only when the input topic is empty")
	fs.StringVar(&o.txnPrefix, "transactional-id-prefix", "wordcount", "prefix of the sink's Kafka transactional ids; unique per job (with --distributed: <job-name>.counts)")
	fs.StringVar(&o.postgres, "postgres", "", "write the count updates as rows (word text, n bigint) of --table in this PostgreSQL database (a pgx connection string: URL or key=value), exactly-once, instead of into --output-topic")
	fs.StringVar(&o.table, "table", "word_counts", "with --postgres: the table (name or schema.name) of the count updates, created when missing")
	fs.BoolVar(&o.unbounded, "unbounded", false, "keep running and pick up new input until interrupted")
	fs.DurationVar(&o.discovery, "partition-discovery-interval", 30*time.Second, "how often a job that keeps running (--unbounded, --distributed) looks for partitions added to the input topic; 0: only at its start")
	emit := fs.String("emit", "every", "what the count writes: every (each word's every running count) or latest (each changed word's latest count once per checkpoint)")
	fs.Int64Var(&o.failEvery, "fail-every", 0, "inject a task failure every N records (0: never); the job restarts and must still be exact")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions of topics the job creates")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint, restart and assignment")
	fs.DurationVar(&o.leaseSession, "prefix-lease-session-timeout", 0, "session timeout of the sink's prefix lease, which a run after a killed one waits out (0: the sink's default, 10s)")
	fs.BoolVar(&o.noTimeoutCheck, "no-broker-timeout-check", false, "do not read the brokers' transaction.max.timeout.ms at start, for a principal without DescribeConfigs on the cluster; the transaction timeout is then checked against the checkpoint settings only")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wordcount [flags]\n       wordcount write-input|verify --brokers B [flags]\n\nCounts words of a Kafka topic exactly-once; with --distributed, as one of the processes of a job, whose input write-input writes and whose output verify checks. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	// Every problem at once, so that a wrong command line is fixed in
	// one go; nothing has dialled a broker or bound a port yet.
	job, err := common.Job(os.Getenv)
	errs := []error{examplejob.CheckArgs(fs), err}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.unbounded && fs.Lookup("checkpoint-interval").Value.(flag.Getter).Get() == time.Duration(0) {
		// The engine refuses it too, naming its option; here the flag.
		bad("--unbounded needs --checkpoint-interval > 0: the output is committed after each checkpoint, and unbounded input has no end to commit it at")
	}
	if job != nil && job.Distributed != nil {
		if set["unbounded"] && !o.unbounded {
			bad("--distributed runs until interrupted; --unbounded=false does not apply")
		}
		o.unbounded = true
		if !set["transactional-id-prefix"] {
			o.txnPrefix = job.Name + ".counts"
		}
	}
	if set["table"] && o.postgres == "" {
		bad("--table applies with --postgres")
	}
	if o.postgres != "" && job != nil && job.Distributed != nil {
		// The sink fences a process paused past its slot's takeover
		// (postgres.ErrStaleClaim, within one incarnation of the job),
		// but a distributed wordcount is checked by wordcount verify,
		// which reads the output topic, not the table, and no run of
		// processes over one table is shown exact yet.
		bad("--postgres does not run with --distributed yet: wordcount verify checks a distributed job's output topic, not a table; run --postgres in one process")
	}
	if o.discovery < 0 {
		bad("--partition-discovery-interval must not be negative, not %s", o.discovery)
	}
	if set["partition-discovery-interval"] && !o.unbounded {
		bad("--partition-discovery-interval applies to a job that keeps running (--unbounded, --distributed); a bounded run reads the partitions there are at its start")
	}
	if o.failEvery < 0 {
		bad("--fail-every must not be negative")
	}
	switch *emit {
	case "every":
	case "latest":
		o.latest = true
	default:
		bad("--emit must be every or latest, not %q", *emit)
	}
	if o.latest && o.postgres != "" {
		// The table's check holds every count 1..n as a row of its own.
		bad("--emit latest does not run with --postgres yet: the table's rows are checked to be every count of each word")
	}
	if o.partitions <= 0 {
		bad("--partitions must be positive")
	}
	if o.postgres == "" && o.inputTopic == o.outputTopic {
		bad("--input-topic and --output-topic must differ")
	}
	if o.txnPrefix == "" {
		bad("--transactional-id-prefix must not be empty")
	}
	if err := errors.Join(errs...); err != nil {
		return o, examplejob.UsageError(fs, "wordcount", err)
	}
	o.job = job
	o.clientOpts = job.ClientOpts()
	return o, nil
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "verify" || os.Args[1] == "write-input") {
		os.Exit(subcommand(os.Args[1], os.Args[2:], os.Stdout, os.Stderr))
	}
	examplejob.Main("wordcount", "draining the job, then verifying what it committed; interrupt again to quit at once", parseFlags, func(o options) bool { return o.verbose }, run)
}

// errNotExact is returned when verification finds the output wrong.
var errNotExact = errors.New("output is not exactly-once")
