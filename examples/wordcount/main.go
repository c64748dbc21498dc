// Command wordcount is splitflow's main example: a Kafka topic of lines is
// split into words, keyed by word, counted, and the running counts are
// written to a Kafka topic exactly-once. With no flags it starts an
// in-process Kafka (franz-go's kfake), fills topic "lines" with a built-in
// text, runs the job to the end of that input, and then verifies the output.
//
// Output records: key = the word, value = its running count in decimal. A
// word seen n times produces the records 1, 2, ..., n, each exactly once in
// what a read_committed consumer sees.
//
// Verification drains the output topic with read_committed and checks, for
// every word, that the counts are exactly 1..n with n the word's count in
// the input topic. It prints
//
//	exactly-once: OK words=W updates=U duplicates=0 missing=0
//
// and exits 0, or prints what is wrong and exits 1. Bad flags exit 2.
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
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/kafkaflag"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	brokers            string
	inputTopic         string
	outputTopic        string
	inputFile          string
	checkpointDir      string
	fromSavepoint      string
	savepointDir       string
	parallelism        int
	checkpointInterval time.Duration
	txnPrefix          string
	unbounded          bool
	failEvery          int64
	partitions         int
	verbose            bool
	httpAddr           string // resolved: a port alone is on loopback
	httpToken          string // --http-token-file / SPLITFLOW_HTTP_TOKEN
	httpTLS            *tls.Config
	httpAllowedHosts   []string // --http-allowed-hosts, and --http's host when a name
	stateBackend       string
	stateDir           string
	noTimeoutCheck     bool // kafka.WithoutBrokerTimeoutCheck on the sink
	// distributed: one of the processes of the job named jobName
	// (runtime.WithDistributed), cut into slots slots.
	distributed    bool
	jobName        string
	slots          int
	sessionTimeout time.Duration
	replication    int
	// discovery is how often an unbounded input looks for new partitions
	// (kafka.WithPartitionDiscoveryInterval).
	discovery time.Duration
	// security is how every Kafka client connects (TLS, SASL), from the
	// --kafka-* flags and SPLITFLOW_KAFKA_* variables; clientOpts are its
	// franz-go options, for the clients the job does not make itself.
	security   kafka.Security
	clientOpts []kgo.Opt

	// onHTTP, if set, learns the status server's address once it is bound
	// (tests bind port 0).
	onHTTP func(addr string)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("wordcount", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.brokers, "brokers", "", "Kafka seed brokers host:port[,host:port] (default: an in-process Kafka)")
	fs.StringVar(&o.inputTopic, "input-topic", "lines", "topic of input lines")
	fs.StringVar(&o.outputTopic, "output-topic", "counts", "topic of (word, count) records")
	fs.StringVar(&o.inputFile, "input-file", "", "text to write into the input topic (default: a built-in text); written only when the input topic is empty")
	fs.StringVar(&o.checkpointDir, "checkpoint-dir", "", "directory (or s3://bucket/prefix, configured by the AWS environment) for checkpoints; a job restarted on the same one resumes from it")
	fs.StringVar(&o.savepointDir, "savepoint-dir", "", "directory or s3://bucket/prefix that savepoints requested over the status server go under (POST /api/v1/savepoints, splitflow savepoint trigger|stop); their targets must lie in it")
	fs.StringVar(&o.fromSavepoint, "from-savepoint", "", "start from this savepoint (splitflow savepoint trigger|stop) or checkpoint (DIR/chk-N), also with another --parallelism, while --checkpoint-dir holds no checkpoint of its own; needs --brokers (the cluster it was taken on); without --unbounded the run ends at the input's end offsets as of its start; with --distributed, a savepoint of a run in one process, which each slot whose log names no checkpoint yet takes its share of; the first process given it records it for the job, and later ones may leave it out")
	fs.IntVar(&o.parallelism, "parallelism", 2, "subtasks per operator")
	fs.DurationVar(&o.checkpointInterval, "checkpoint-interval", time.Second, "time between checkpoints (and so between output commits); 0: no checkpoints, the output is committed once, at the end of the input (not with --unbounded), and a failure starts over")
	fs.StringVar(&o.txnPrefix, "transactional-id-prefix", "wordcount", "prefix of the sink's Kafka transactional ids; unique per job")
	fs.BoolVar(&o.unbounded, "unbounded", false, "keep running and pick up new input until interrupted")
	fs.DurationVar(&o.discovery, "partition-discovery-interval", 30*time.Second, "how often a job that keeps running (--unbounded, --distributed) looks for partitions added to the input topic; 0: only at its start")
	fs.Int64Var(&o.failEvery, "fail-every", 0, "inject a task failure every N records (0: never); the job restarts and must still be exact")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions of topics the job creates")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint, restart and assignment")
	fs.StringVar(&o.httpAddr, "http", "", "serve /metrics, /healthz, /readyz, /api/v1/job and a live status page on this address while the job runs; a port alone (:8081) means loopback (127.0.0.1:8081), give 0.0.0.0:8081 to listen on every interface (default: no server)")
	httpFlags := registerHTTPFlags(fs)
	fs.StringVar(&o.stateBackend, "state-backend", "heap", "where the word counts live: heap (Go maps; fastest while they fit in memory, as the built-in text's do) or pebble (an on-disk LSM per subtask with incremental checkpoints; for many distinct words)")
	fs.StringVar(&o.stateDir, "state-dir", "", "working directory of the pebble state backend (default: splitflow-state in the OS temp directory)")
	fs.BoolVar(&o.distributed, "distributed", false, "run as one of the processes of the job --job-name: every process started with the same --job-name, --brokers and --checkpoint-dir (a directory all of them reach, or s3://) takes a share of the job's slots, and takes over the slots of a process that stops or dies; runs until interrupted, never writes the input (wordcount write-input does), and leaves the verification to wordcount verify")
	fs.StringVar(&o.jobName, "job-name", "wordcount", "name of the distributed job (--distributed): its consumer group, its internal topics <name>.slots and <name>.*.shuffle, its checkpoints under --checkpoint-dir/<name>/ and, unless --transactional-id-prefix is given, its output's transactional ids")
	fs.IntVar(&o.slots, "slots", 16, "slots of the distributed job (--distributed): the unit a process owns and the parallelism of every operator; the same in every process and for the life of the job's checkpoints")
	fs.IntVar(&o.replication, "internal-topic-replication", -1, "replication factor of the internal topics a distributed job creates (<name>.slots, <name>.*.shuffle); -1: the broker's default")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 10*time.Second, "how long the other processes of a distributed job wait for a silent one before taking over its slots")
	secFlags := kafkaflag.Register(fs)
	fs.BoolVar(&o.noTimeoutCheck, "no-broker-timeout-check", false, "do not read the brokers' transaction.max.timeout.ms at start, for a principal without DescribeConfigs on the cluster; the transaction timeout is then checked against the checkpoint settings only")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wordcount [flags]\n\nCounts words of a Kafka topic exactly-once. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	// Every problem at once, so that a wrong command line is fixed in
	// one go; nothing has dialled a broker or bound a port yet.
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if fs.NArg() > 0 {
		bad("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.parallelism <= 0 {
		bad("--parallelism must be positive, not %d", o.parallelism)
	}
	if o.checkpointInterval < 0 {
		bad("--checkpoint-interval must not be negative, not %s", o.checkpointInterval)
	}
	if o.checkpointInterval == 0 && o.unbounded {
		// The engine refuses it too, naming its option; here the flag.
		bad("--unbounded needs --checkpoint-interval > 0: the output is committed after each checkpoint, and unbounded input has no end to commit it at")
	}
	if o.checkpointInterval == 0 && o.fromSavepoint != "" {
		bad("--from-savepoint needs --checkpoint-interval > 0")
	}
	if o.fromSavepoint != "" && o.brokers == "" {
		// The savepoint holds the input's offsets and the counts up to
		// them: only the cluster it was taken on has that input.
		bad("--from-savepoint needs --brokers: the in-process Kafka is new in every run, so the savepoint's offsets and counts belong to a cluster that is gone; run the job on a broker of yours (--brokers) both times")
	}
	if o.checkpointInterval == 0 && o.checkpointDir != "" {
		bad("--checkpoint-dir needs --checkpoint-interval > 0")
	}
	if o.discovery < 0 {
		bad("--partition-discovery-interval must not be negative, not %s", o.discovery)
	}
	if o.failEvery < 0 {
		bad("--fail-every must not be negative")
	}
	if o.partitions <= 0 {
		bad("--partitions must be positive")
	}
	if o.inputTopic == o.outputTopic {
		bad("--input-topic and --output-topic must differ")
	}
	if o.txnPrefix == "" {
		bad("--transactional-id-prefix must not be empty")
	}
	if o.stateDir != "" && o.stateBackend != string(runtime.PebbleStateBackend) {
		bad("--state-dir applies to --state-backend pebble")
	}
	if _, err := runtime.ParseStateBackend(o.stateBackend); err != nil {
		bad("--state-backend: %v", err)
	}
	if o.brokers != "" {
		if err := kafka.CheckBrokers(strings.Split(o.brokers, ",")...); err != nil {
			bad("--brokers: %w", err)
		}
	}
	errs = append(errs, httpFlags.resolve(&o, os.Getenv)...)
	sec, err := secFlags.Security(os.Getenv)
	if err != nil {
		errs = append(errs, err)
	} else if sec.TLS != nil || sec.SASL != nil {
		if o.brokers == "" {
			bad("the --kafka-tls and --kafka-sasl settings need --brokers (the in-process Kafka is plaintext)")
		}
		if o.clientOpts, err = sec.ClientOpts(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkDistributed(fs, &o)...)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "partition-discovery-interval" && !o.unbounded {
			bad("--partition-discovery-interval applies to a job that keeps running (--unbounded, --distributed); a bounded run reads the partitions there are at its start")
		}
	})
	if err := errors.Join(errs...); err != nil {
		return o, usageError(fs, "%w", err)
	}
	o.security = sec
	return o, nil
}

func usageError(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	for _, line := range strings.Split(err.Error(), "\n") { // one line per problem of a joined error
		fmt.Fprintln(fs.Output(), "wordcount:", line)
	}
	fs.Usage()
	return err
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "verify" || os.Args[1] == "write-input") {
		os.Exit(subcommand(os.Args[1], os.Args[2:], os.Stdout, os.Stderr))
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go afterInterrupt(ctx, stop, os.Stderr)
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	if os.Getenv("SPLITFLOW_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	code, err := run(ctx, o, os.Stdout, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// afterInterrupt waits for the first interrupt (ctx cancelled), then gives
// the signals back their default action with stop and says so on w: the
// job drains and its output is verified, which can take a while with a slow
// broker, and a second interrupt must still end the process at once.
func afterInterrupt(ctx context.Context, stop func(), w io.Writer) {
	<-ctx.Done()
	stop()
	fmt.Fprintln(w, "wordcount: interrupted: draining the job, then verifying what it committed; interrupt again to quit at once")
}

// errNotExact is returned when verification finds the output wrong.
var errNotExact = errors.New("output is not exactly-once")
