// Command ordertotals sums orders per customer in event-time tumbling
// windows, exactly-once, from an Avro topic to an Avro topic through a
// schema registry: splitflow's example of schema-registry serdes, schema
// evolution and dead letters, built as wordcount is. With no --brokers and
// no --registry it starts an in-process Kafka (franz-go's kfake) and an
// in-process schema registry that speaks the Confluent API (franz-go's
// srfake), writes generated orders into topic "orders" (deterministic by
// --seed; the first half with schema v1, the rest with v2, 1 in 100
// undecodable), runs the job to the end of that input, and then verifies
// its output.
//
// Input records, topic "orders": Avro values in the Confluent wire format,
// subject "orders-value", key the customer. Schema v1 is record shop.Order
// {order_id string, customer string, amount_cents long, ts long
// (timestamp-millis)}; v2 adds currency string with default "EUR". The job
// reads every record into its reader schema, v2, by Avro's resolution
// rules, so v1 and v2 records read alike. The event time is ts.
//
// Output records, topic "totals": key the customer (UTF-8), value the Avro
// record shop.Total {customer string, window_start long
// (timestamp-millis), orders long, amount_cents long}, subject
// "totals-value", which the job registers (--register-schema, on by
// default). One per customer and 1-minute window that holds orders,
// emitted when the watermark (the latest event time minus 5s) passes the
// window's end; a bounded run ends with the engine's final watermark,
// which closes every window. Records the job cannot read go, as they
// came, to topic "orders-dlq", with headers naming their topic, partition,
// offset and the error (kafka.DeadLetterSerializer). Both outputs are
// written exactly-once, in the transactions of the job's checkpoints.
//
// Verification reads the input and both outputs with read_committed,
// computes every window's total from the input, and prints
//
//	ordertotals: OK totals=T orders=N v1=A v2=B dead-letters=D
//
// and exits 0, or prints what differs and exits 1. Bad flags exit 2.
// With --unbounded the job runs until interrupted; what it committed by
// then is verified as a prefix: every total written is exact and written
// once, windows not yet closed may be missing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/jobflag"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	// job is what the common flags say (package jobflag): brokers,
	// checkpoints, state backend, the --kafka-* security settings.
	job            *jobflag.Job
	registry       string
	inputTopic     string
	outputTopic    string
	dlqTopic       string
	txnPrefix      string
	register       bool
	unbounded      bool
	failEvery      int64
	partitions     int
	window         time.Duration
	outOfOrderness time.Duration
	orders         int
	seed           uint64
	verbose        bool
	// clientOpts are the franz-go options of the job's security settings,
	// for the clients the job does not make itself.
	clientOpts []kgo.Opt
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ordertotals", flag.ContinueOnError)
	fs.SetOutput(stderr)
	common := jobflag.Register(fs, jobflag.BrokersOptional("an in-process Kafka; give --registry with it"), jobflag.DefaultParallelism(2),
		jobflag.Without(jobflag.StatusServer, jobflag.Savepoints, jobflag.Distributed))
	fs.StringVar(&o.registry, "registry", "", "base URL of a schema registry's Confluent-compatible API (Apicurio: http://host:8080/apis/ccompat/v7); required with --brokers (default: an in-process registry)")
	fs.StringVar(&o.inputTopic, "input-topic", "orders", "topic of Avro orders, subject <topic>-value")
	fs.StringVar(&o.outputTopic, "output-topic", "totals", "topic of Avro totals per customer and window, subject <topic>-value")
	fs.StringVar(&o.dlqTopic, "dlq-topic", "orders-dlq", "topic of the input records the job cannot read, as they came")
	fs.StringVar(&o.txnPrefix, "transactional-id-prefix", "ordertotals", "prefix of the sinks' Kafka transactional ids; unique per job")
	fs.BoolVar(&o.register, "register-schema", true, "register the output's schema under <output-topic>-value (false: it must be registered already)")
	fs.BoolVar(&o.unbounded, "unbounded", false, "keep running and pick up new input until interrupted")
	fs.Int64Var(&o.failEvery, "fail-every", 0, "inject a task failure every N orders (0: never); the job restarts and must still be exact")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the topics the job creates")
	fs.DurationVar(&o.window, "window", time.Minute, "size of the tumbling event-time windows")
	fs.DurationVar(&o.outOfOrderness, "out-of-orderness", 5*time.Second, "how far behind the latest event time an order may be and still be on time (the watermark's bound)")
	fs.IntVar(&o.orders, "orders", 5000, "records to generate into an empty input topic")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated input")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint, restart and assignment")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ordertotals [flags]\n\nSums Avro orders per customer in event-time windows, exactly-once, through a schema registry. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	job, err := common.Job(os.Getenv)
	errs := []error{examplejob.CheckArgs(fs), err}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if job != nil && (len(job.Brokers) == 0) != (o.registry == "") {
		bad("--brokers and --registry go together: the input's schema ids are those of the registry its records were written with (neither: an in-process Kafka and registry)")
	}
	if o.registry != "" {
		if u, err := url.Parse(o.registry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--registry %q is not an http or https URL", o.registry)
		}
	}
	if o.unbounded && fs.Lookup("checkpoint-interval").Value.(flag.Getter).Get() == time.Duration(0) {
		bad("--unbounded needs --checkpoint-interval > 0: the output is committed after each checkpoint, and unbounded input has no end to commit it at")
	}
	if o.failEvery < 0 {
		bad("--fail-every must not be negative")
	}
	if o.partitions <= 0 {
		bad("--partitions must be positive")
	}
	for _, d := range []struct {
		name     string
		v        time.Duration
		positive bool
	}{{"window", o.window, true}, {"out-of-orderness", o.outOfOrderness, false}} {
		if d.v < 0 || d.positive && d.v == 0 || d.v%time.Millisecond != 0 {
			bad("--%s must be a %s whole number of milliseconds, not %s", d.name, map[bool]string{true: "positive", false: "non-negative"}[d.positive], d.v)
		}
	}
	if o.orders < 0 {
		bad("--orders must not be negative")
	}
	if o.inputTopic == o.outputTopic || o.inputTopic == o.dlqTopic || o.outputTopic == o.dlqTopic {
		bad("--input-topic, --output-topic and --dlq-topic must differ")
	}
	if strings.TrimSpace(o.txnPrefix) == "" {
		bad("--transactional-id-prefix must not be empty")
	}
	if err := errors.Join(errs...); err != nil {
		return o, examplejob.UsageError(fs, "ordertotals", err)
	}
	o.job = job
	o.clientOpts = job.ClientOpts()
	return o, nil
}

func main() {
	examplejob.Main("ordertotals", "draining the job, then verifying what it committed; interrupt again to quit at once", parseFlags, func(o options) bool { return o.verbose }, run)
}

// errNotExact is returned when verification finds the output wrong.
var errNotExact = errors.New("output differs from the input's totals")
