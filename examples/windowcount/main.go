// Command windowcount counts events per user in event-time tumbling
// windows, exactly-once, from a Kafka topic to Kafka topics: splitflow's
// windowed example, built as wordcount is. With no flags it starts an
// in-process Kafka (franz-go's kfake), writes a generated input into topic
// "events" (deterministic by --seed, with events out of order within the
// bound, late within the allowed lateness when there is one, and late
// beyond it), runs the job to the end of that input, and then verifies the
// output against counts it computes from the input with the engine's rules.
//
// Input records: value "user page event_time_ms" (space separated; event
// time in milliseconds since the epoch). Unparsable records are skipped.
//
// Output records, topic "window-counts": key = the user, value
// "window_start_ms window_end_ms count". A window is emitted when the
// watermark passes its end; with --allowed-lateness d, each late event
// within d emits it again with the updated count, so a window's emissions
// are its on-time count and then one more per late event, the last being
// its final count. Events later than the allowed lateness are not counted:
// they go, as they came, to topic "late-events" (key = the user).
//
// The watermark is the largest event time seen minus --out-of-orderness
// minus 1 ms, as watermark.ForBoundedOutOfOrderness computes it, but emitted
// after every event that advances it rather than every auto-watermark
// interval (see boundedPerEvent), and the input topic the example creates
// has one partition: which events are late is then a function of the input
// alone, not of timing, and the verifier can say exactly what the output
// must be. A bounded run ends with the engine's final watermark, which
// fires every window still open.
//
// Verification drains the output topics with read_committed and compares
// every window's emissions and the late events with the model's, printing
//
//	windows: OK windows=W emissions=E re-fired=R late-events=L events=N
//
// and exits 0, or prints what differs and exits 1. Bad flags exit 2.
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

type options struct {
	// job is what the common flags say (package jobflag): brokers,
	// checkpoints, state backend, the --kafka-* security settings.
	job             *jobflag.Job
	inputTopic      string
	outputTopic     string
	lateTopic       string
	txnPrefix       string
	failEvery       int64
	partitions      int
	window          time.Duration
	outOfOrderness  time.Duration
	allowedLateness time.Duration
	events          int
	seed            uint64
	verbose         bool
	// clientOpts are the franz-go options of the job's security settings,
	// for the clients the job does not make itself.
	clientOpts []kgo.Opt
}

// rules are the window rules in milliseconds, shared by the job, the input
// generator and the verifier.
type rules struct {
	size, outOfOrderness, lateness int64
}

func (o options) rules() rules {
	return rules{size: o.window.Milliseconds(), outOfOrderness: o.outOfOrderness.Milliseconds(), lateness: o.allowedLateness.Milliseconds()}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("windowcount", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// No status server, savepoints or distributed runs: the verifier
	// models one whole bounded run.
	common := jobflag.Register(fs, jobflag.BrokersOptional("an in-process Kafka"), jobflag.DefaultParallelism(2),
		jobflag.Without(jobflag.StatusServer, jobflag.Savepoints, jobflag.Distributed))
	fs.Lookup("parallelism").Usage += " (the source's: at most the input topic's partitions)"
	fs.StringVar(&o.inputTopic, "input-topic", "events", `topic of input events, values "user page event_time_ms"`)
	fs.StringVar(&o.outputTopic, "output-topic", "window-counts", `topic of window counts: key user, value "window_start_ms window_end_ms count"`)
	fs.StringVar(&o.lateTopic, "late-topic", "late-events", "topic of the events later than the allowed lateness, as they came")
	fs.StringVar(&o.txnPrefix, "transactional-id-prefix", "windowcount", "prefix of the sinks' Kafka transactional ids; unique per job")
	fs.Int64Var(&o.failEvery, "fail-every", 0, "inject a task failure every N events (0: never); the job restarts and must still be exact")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions of the output topics the job creates (the input topic it creates has one; see the package doc)")
	fs.DurationVar(&o.window, "window", time.Minute, "size of the tumbling event-time windows")
	fs.DurationVar(&o.outOfOrderness, "out-of-orderness", 5*time.Second, "how far behind the latest event time an event may be and still be on time (the watermark's bound)")
	fs.DurationVar(&o.allowedLateness, "allowed-lateness", 0, "how long a window stays open after the watermark passed its end: a late event within it updates the window, which is emitted again")
	fs.IntVar(&o.events, "events", 20000, "events to generate into an empty input topic")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated input")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint, restart and assignment")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: windowcount [flags]\n\nCounts events per user in event-time windows of a Kafka topic, exactly-once. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	job, err := common.Job(os.Getenv)
	errs := []error{examplejob.CheckArgs(fs), err}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.failEvery < 0 {
		bad("--fail-every must not be negative")
	}
	if o.partitions <= 0 {
		bad("--partitions must be positive")
	}
	wholeMs := func(name string, d time.Duration, positive bool) {
		if d < 0 || positive && d == 0 || d%time.Millisecond != 0 {
			kind := "zero or a positive"
			if positive {
				kind = "a positive"
			}
			bad("--%s must be %s whole number of milliseconds, not %s", name, kind, d)
		}
	}
	wholeMs("window", o.window, true)
	wholeMs("out-of-orderness", o.outOfOrderness, false)
	wholeMs("allowed-lateness", o.allowedLateness, false)
	if o.events < 0 {
		bad("--events must not be negative")
	}
	if o.inputTopic == o.outputTopic || o.inputTopic == o.lateTopic || o.outputTopic == o.lateTopic {
		bad("--input-topic, --output-topic and --late-topic must differ")
	}
	if o.txnPrefix == "" {
		bad("--transactional-id-prefix must not be empty")
	}
	if err := errors.Join(errs...); err != nil {
		return o, examplejob.UsageError(fs, "windowcount", err)
	}
	o.job = job
	o.clientOpts = job.ClientOpts()
	return o, nil
}

func main() {
	examplejob.Main("windowcount", "draining the job; its output is not verified; interrupt again to quit at once", parseFlags, func(o options) bool { return o.verbose }, run)
}

// errNotExact is returned when verification finds the output wrong.
var errNotExact = errors.New("output differs from the input's window counts")
