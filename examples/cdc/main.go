// Command cdc captures the changes of PostgreSQL tables into a Kafka
// topic, exactly-once: splitflow's example of the change data capture
// source (connector/postgres/cdc) feeding the exactly-once Kafka sink.
//
//	go run ./examples/cdc --postgres postgres://user@host/db \
//		--tables public.orders,public.customers \
//		--brokers localhost:9092 --topic orders-cdc --checkpoint-dir /var/lib/cdc
//
// It reads the publication --publication (created FOR TABLE --tables if
// missing) through the replication slot --slot: first a snapshot of the
// tables (op "r"), then every insert, update and delete as it commits.
// Each change is one record of --topic: key the row's primary key as JSON
// ({"id":42}), value the change as a Debezium-style JSON event
// (cdc.MarshalDebezium). Records are written in the Kafka transaction of
// the checkpoint that holds them, and the slot is confirmed only once that
// checkpoint is complete, so a consumer reading with read_committed sees
// each change once, in commit order per key, whatever failures and
// restarts there were in between.
//
// The job runs until interrupted (SIGINT or SIGTERM: it drains with a
// final checkpoint). Started again on the same --checkpoint-dir, it
// resumes where its latest checkpoint left off, even after a SIGKILL.
// Started without a checkpoint it drops a slot of the same name and takes
// a new snapshot. Bad flags exit 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/splitflow/splitflow/examples/internal/examplejob"
	"github.com/splitflow/splitflow/jobflag"
)

type options struct {
	// job is what the common flags say (package jobflag).
	job         *jobflag.Job
	postgres    string
	tables      []string
	publication string
	slot        string
	topic       string
	partitions  int
	txnPrefix   string
	verbose     bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("cdc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	common := jobflag.Register(fs, jobflag.Without(jobflag.StatusServer, jobflag.Savepoints, jobflag.Distributed))
	var tables string
	fs.StringVar(&o.postgres, "postgres", "", "connection string (URL or key=value) of the database to capture; the role needs REPLICATION and SELECT on the tables (required)")
	fs.StringVar(&tables, "tables", "", "comma-separated tables (schema.name) to create the publication for when it is missing")
	fs.StringVar(&o.publication, "publication", "splitflow_cdc", "publication whose tables are captured")
	fs.StringVar(&o.slot, "slot", "splitflow_cdc", "logical replication slot the job creates and reads; one per job")
	fs.StringVar(&o.topic, "topic", "", "topic of the changes (required)")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the topic when the job creates it")
	fs.StringVar(&o.txnPrefix, "transactional-id-prefix", "cdc", "prefix of the sink's Kafka transactional ids; unique per job")
	fs.BoolVar(&o.verbose, "v", false, "log every checkpoint and restart")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cdc --postgres URL --tables schema.table,... --brokers B --topic T --checkpoint-dir D [flags]\n\nCaptures PostgreSQL tables into a Kafka topic, exactly-once. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	job, err := common.Job(os.Getenv)
	errs := []error{examplejob.CheckArgs(fs), err}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.postgres == "" {
		bad("--postgres is required")
	}
	if o.topic == "" {
		bad("--topic is required")
	}
	for _, t := range strings.Split(tables, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.tables = append(o.tables, t)
		}
	}
	if job != nil && job.CheckpointInterval <= 0 {
		bad("--checkpoint-interval must be positive: the changes are committed to Kafka, and the slot confirmed, at each checkpoint")
	}
	if o.partitions <= 0 {
		bad("--partitions must be positive")
	}
	if strings.TrimSpace(o.txnPrefix) == "" {
		bad("--transactional-id-prefix must not be empty")
	}
	if err := errors.Join(errs...); err != nil {
		return o, examplejob.UsageError(fs, "cdc", err)
	}
	o.job = job
	return o, nil
}

func main() {
	examplejob.Main("cdc", "draining the job with a final checkpoint; interrupt again to quit at once", parseFlags, func(o options) bool { return o.verbose }, run)
}
