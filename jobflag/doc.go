// Package jobflag gives a splitflow program the command line every job
// shares, so that the users of every program learn one set of names and
// the programs do not type them again. Register adds the flags to a
// flag.FlagSet; after Parse, Flags.Job checks them all at once and returns
// a Job, whose RuntimeOptions go to runtime.NewEnvironment and whose
// SourceOpts and SinkOpts go to its Kafka sources and sinks.
//
// The flags and their defaults (Opt changes the marked ones; Without
// leaves a group out):
//
//	--brokers host:port[,...]     seed brokers; required unless BrokersOptional
//	--parallelism N               subtasks per operator; default 1 (DefaultParallelism)
//	--checkpoint-interval D       default 1s (DefaultCheckpointInterval); 0: no checkpoints
//	--checkpoint-dir DIR|s3://..  default: in memory
//	--state-backend heap|pebble   default heap
//	--state-dir DIR               pebble's working directory
//	--source-group-id GROUP       group the Kafka sources commit offsets to, for lag; default none
//	--from-savepoint PATH         group Savepoints: start from a savepoint or DIR/chk-N
//	--savepoint-dir DIR|s3://..   group Savepoints: where requested savepoints go
//	--http ADDR                   group StatusServer: a port alone means loopback
//	--http-token-file FILE        group StatusServer, or SPLITFLOW_HTTP_TOKEN (EnvHTTPToken)
//	--http-tls-cert/--http-tls-key FILE, --http-allowed-hosts NAMES
//	--distributed                 group Distributed: one process of the job --job-name
//	--job-name NAME               default: the FlagSet's name (DefaultJobName)
//	--slots N                     default 16
//	--session-timeout D           default 10s
//	--internal-topic-replication N  default -1, the broker's
//	--kafka-tls, --kafka-tls-ca FILE, --kafka-sasl-mechanism M, ...
//	                              how to reach the brokers, each also a
//	                              SPLITFLOW_KAFKA_* variable (package
//	                              connector/kafka/kafkaflag)
//
// Every problem is reported in one error, each line naming its flag or
// variable, before anything is dialled or bound; no line holds a password
// or a token. Secrets are never flags: the SASL password comes from
// SPLITFLOW_KAFKA_SASL_PASSWORD or a file, the status server's token from
// SPLITFLOW_HTTP_TOKEN or a file.
//
// A job of one's own, from a main package:
//
//	fs := flag.NewFlagSet("upper", flag.ExitOnError)
//	in := fs.String("input-topic", "lines", "topic to read")
//	flags := jobflag.Register(fs, jobflag.DefaultParallelism(2))
//	_ = fs.Parse(os.Args[1:])
//	job, err := flags.Job(nil)
//	if err != nil {
//		fmt.Fprintln(os.Stderr, "upper:", err)
//		fs.Usage()
//		os.Exit(2)
//	}
//	src, err := kafka.NewSource(kafka.StringValues(), job.SourceOpts(kafka.WithTopics(*in))...)
//	...
//	opts, err := job.RuntimeOptions(logger)
//	env := runtime.NewEnvironment(opts...)
//
// Example_job shows it whole.
package jobflag
