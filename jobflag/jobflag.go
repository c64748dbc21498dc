package jobflag

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/connector/kafka/kafkaflag"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvHTTPToken holds the status server's token, which allows the
// endpoints that change the job (POST /api/v1/job/stop, savepoints). Like
// the SASL password it is never a flag, whose value would show in process
// listings and shell history: it comes from this variable or
// --http-token-file.
const EnvHTTPToken = "SPLITFLOW_HTTP_TOKEN"

// Opt changes what Register registers or a flag's default.
type Opt interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

type cfg struct {
	jobName     string
	parallelism int
	interval    time.Duration
	slots       int
	// instead, when not empty, is what the program runs on without
	// --brokers (BrokersOptional).
	instead string
	without map[Group]bool
}

// DefaultJobName sets the default of --job-name. Default: the FlagSet's
// name.
func DefaultJobName(name string) Opt { return optFunc(func(c *cfg) { c.jobName = name }) }

// DefaultParallelism sets the default of --parallelism. Default 1, the
// runtime's (runtime.WithParallelism).
func DefaultParallelism(n int) Opt { return optFunc(func(c *cfg) { c.parallelism = n }) }

// DefaultCheckpointInterval sets the default of --checkpoint-interval.
// Default 1s: a program whose output is exactly-once commits it once per
// checkpoint, and the runtime's default (none) commits only at the end of
// a bounded input.
func DefaultCheckpointInterval(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.interval = d })
}

// BrokersOptional lets --brokers be left out; instead says what the
// program runs on then ("an in-process Kafka"), for --help. Without
// --brokers, --distributed, --from-savepoint and the --kafka-* security
// settings are refused: they are about a cluster the user runs. Default:
// --brokers is required.
func BrokersOptional(instead string) Opt {
	return optFunc(func(c *cfg) { c.instead = instead })
}

// Group is a set of flags a program can leave out (Without).
type Group int

const (
	// Savepoints: --from-savepoint and --savepoint-dir.
	Savepoints Group = iota + 1
	// StatusServer: --http and its --http-* settings.
	StatusServer
	// Distributed: --distributed, --job-name, --slots, --session-timeout
	// and --internal-topic-replication.
	Distributed
)

// Without leaves the groups' flags out, for a program that cannot honour
// them. Default: every group is registered.
func Without(groups ...Group) Opt {
	return optFunc(func(c *cfg) {
		for _, g := range groups {
			c.without[g] = true
		}
	})
}

// Flags are the common flags registered on one FlagSet. After the
// FlagSet's Parse, Job checks them and returns what they say.
type Flags struct {
	fs  *flag.FlagSet
	cfg cfg

	checkpointDir               string
	interval                    time.Duration
	parallelism                 int
	fromSavepoint, savepointDir string
	stateBackend, stateDir      string
	sourceGroupID               string

	http, httpTokenFile, httpCert, httpKey, httpAllowedHosts string

	distributed    bool
	jobName        string
	slots          int
	sessionTimeout time.Duration
	replication    int

	cluster *Cluster
}

// Register adds the common flags to fs, with the defaults opts give (see
// the package doc for the list).
func Register(fs *flag.FlagSet, opts ...Opt) *Flags {
	f := &Flags{fs: fs, cfg: cfg{jobName: fs.Name(), parallelism: 1, interval: time.Second, slots: 16, without: map[Group]bool{}}}
	for _, o := range opts {
		o.apply(&f.cfg)
	}
	c := &f.cfg
	brokersUsage := "Kafka seed brokers host:port[,host:port]"
	if c.instead != "" {
		brokersUsage += " (default: " + c.instead + ")"
	} else {
		brokersUsage += " (required)"
	}
	f.cluster = registerCluster(fs, brokersUsage)
	fs.IntVar(&f.parallelism, "parallelism", c.parallelism, "subtasks per operator")
	fs.DurationVar(&f.interval, "checkpoint-interval", c.interval, "time between checkpoints (and so between commits of exactly-once output); 0: no checkpoints, the output is committed once, at the end of a bounded input, and a failure starts over")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "directory (or s3://bucket/prefix, configured by the AWS environment) for checkpoints; a job restarted on the same one resumes from it (default: in memory, lost with the process)")
	fs.StringVar(&f.stateBackend, "state-backend", "heap", "where keyed state lives: heap (Go maps; fastest while it fits in memory) or pebble (an on-disk LSM per subtask with incremental checkpoints; for state larger than memory)")
	fs.StringVar(&f.sourceGroupID, "source-group-id", "", "consumer `group` the job's Kafka sources commit each checkpoint's input offsets to once its output is committed, for watching the job's lag from outside (kafka-consumer-groups, KEDA's Kafka scaler); with --distributed the shuffle's sources commit their <name>.*.shuffle offsets there too; progress never depends on it; needs Read on the group; with --distributed it must differ from --job-name, the processes' own group (default: none, nothing committed)")
	fs.StringVar(&f.stateDir, "state-dir", "", "working directory of the pebble state backend (default: splitflow-state in the OS temp directory)")
	if !c.without[Savepoints] {
		usage := "start from this savepoint (splitflow savepoint trigger|stop) or checkpoint (DIR/chk-N), also with another --parallelism, while --checkpoint-dir holds no checkpoint of its own"
		if c.instead != "" {
			usage += "; needs --brokers (the cluster it was taken on)"
		}
		if !c.without[Distributed] {
			usage += "; with --distributed, a savepoint of a run in one process, which each slot whose log names no checkpoint yet takes its share of; the first process given it records it for the job, and later ones may leave it out"
		}
		fs.StringVar(&f.fromSavepoint, "from-savepoint", "", usage)
		fs.StringVar(&f.savepointDir, "savepoint-dir", "", "directory or s3://bucket/prefix that savepoints requested over the status server go under (POST /api/v1/savepoints, splitflow savepoint trigger|stop); their targets must lie in it")
	}
	if !c.without[StatusServer] {
		fs.StringVar(&f.http, "http", "", "serve /metrics, /healthz, /readyz, /api/v1/job and a live status page on this address while the job runs; a port alone (:8081) means loopback (127.0.0.1:8081), give 0.0.0.0:8081 to listen on every interface (default: no server)")
		fs.StringVar(&f.httpTokenFile, "http-token-file", "", "`file` holding the status server's token (one line, 16 or more characters); requests that change the job (POST /api/v1/job/stop, savepoints) must send it as Authorization: Bearer TOKEN (or set "+EnvHTTPToken+"; default: no token, those requests are refused)")
		fs.StringVar(&f.httpCert, "http-tls-cert", "", "PEM `file` of the status server's certificate, with --http-tls-key: serve HTTPS (default: plain HTTP)")
		fs.StringVar(&f.httpKey, "http-tls-key", "", "PEM `file` of the status server certificate's key")
		fs.StringVar(&f.httpAllowedHosts, "http-allowed-hosts", "", "comma-separated host `names` the status server answers to besides localhost, IP addresses and --http's host; a request for any other Host is refused (421) so that a web page cannot reach it by DNS rebinding (default: none)")
	}
	if !c.without[Distributed] {
		fs.BoolVar(&f.distributed, "distributed", false, "run as one of the processes of the job --job-name: every process started with the same --job-name, --brokers and --checkpoint-dir (a directory all of them reach, or s3://) takes a share of the job's slots, and takes over the slots of a process that stops or dies; runs until interrupted")
		fs.StringVar(&f.jobName, "job-name", c.jobName, "name of the distributed job (--distributed): its consumer group, its internal topics <name>.slots and <name>.*.shuffle and its checkpoints under --checkpoint-dir/<name>/")
		fs.IntVar(&f.slots, "slots", c.slots, "slots of the distributed job (--distributed): the unit a process owns and the parallelism of every operator; the same in every process and for the life of the job's checkpoints")
		fs.DurationVar(&f.sessionTimeout, "session-timeout", 10*time.Second, "how long the other processes of a distributed job wait for a silent one before taking over its slots")
		fs.IntVar(&f.replication, "internal-topic-replication", -1, "replication factor of the internal topics a distributed job creates (<name>.slots, <name>.*.shuffle); -1: the broker's default")
	}
	return f
}

// Job checks the parsed flags and returns what they say, or an error
// joining every problem, each naming its flag or variable and none
// holding a secret. getenv (os.Getenv when nil) reads the
// SPLITFLOW_KAFKA_* settings and EnvHTTPToken. It reads the token and
// password files and the status server's certificate; it dials nothing
// and binds nothing.
func (f *Flags) Job(getenv func(string) string) (*Job, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	j := &Job{
		Name:               f.jobName,
		Parallelism:        f.parallelism,
		CheckpointInterval: f.interval,
		CheckpointDir:      f.checkpointDir,
		FromSavepoint:      f.fromSavepoint,
		SavepointDir:       f.savepointDir,
		SourceGroupID:      f.sourceGroupID,
	}
	if j.Name == "" {
		j.Name = f.cfg.jobName
	}
	// Without --brokers, only a program that runs on something else
	// (BrokersOptional) goes on; what needs a cluster of the user's is
	// refused below, naming what it needs.
	brokers := f.cluster.brokers
	noCluster := brokers == "" && f.cfg.instead != ""
	if brokers != "" {
		j.Brokers = strings.Split(brokers, ",")
		if err := kafka.CheckBrokers(j.Brokers...); err != nil {
			bad("--brokers: %w", err)
		}
	} else if f.cfg.instead == "" {
		bad("--brokers is required")
	}
	if f.parallelism <= 0 {
		bad("--parallelism must be positive, not %d", f.parallelism)
	}
	if f.interval < 0 {
		bad("--checkpoint-interval must not be negative, not %s", f.interval)
	}
	if f.interval == 0 && f.checkpointDir != "" {
		bad("--checkpoint-dir needs --checkpoint-interval > 0")
	}
	if f.interval == 0 && f.fromSavepoint != "" {
		bad("--from-savepoint needs --checkpoint-interval > 0")
	}
	if f.fromSavepoint != "" && noCluster {
		// The savepoint holds the input's offsets and the state up to
		// them: only the cluster it was taken on has that input.
		bad("--from-savepoint needs --brokers: a savepoint's offsets and state belong to the cluster it was taken on, and %s is not that cluster; run the job on a broker of yours (--brokers) both times", f.cfg.instead)
	}
	stateDir := f.stateDir
	if stateDir != "" && f.stateBackend != "pebble" {
		bad("--state-dir applies to --state-backend pebble")
		stateDir = ""
	}
	if b, err := state.ParseBackend(f.stateBackend, stateDir); err != nil {
		bad("--state-backend: %v", err)
	} else {
		j.StateBackend = b
	}
	errs = append(errs, f.resolveHTTP(j, getenv)...)
	sec, err := f.cluster.sec.Security(getenv)
	if err != nil {
		errs = append(errs, err)
	} else if sec.TLS != nil || sec.SASL != nil {
		if noCluster {
			bad("the --kafka-tls and --kafka-sasl settings need --brokers: they say how to reach the brokers it names")
		}
		j.Security = sec
		if j.secOpts, err = sec.ClientOpts(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, f.resolveDistributed(j, set, noCluster)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return j, nil
}

// resolveDistributed checks the flags of --distributed and fills
// j.Distributed.
func (f *Flags) resolveDistributed(j *Job, set map[string]bool, noCluster bool) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !f.distributed {
		for _, name := range []string{"job-name", "slots", "session-timeout", "internal-topic-replication"} {
			if set[name] {
				bad("--%s applies to --distributed", name)
			}
		}
		return errs
	}
	if noCluster {
		bad("--distributed needs --brokers: the processes of a job meet in a Kafka cluster they all reach, not in %s", f.cfg.instead)
	}
	if f.checkpointDir == "" {
		bad("--distributed needs --checkpoint-dir: a directory every process reaches, or s3://bucket/prefix, where each slot's checkpoints are kept for whichever process takes it next")
	}
	if f.interval == 0 {
		bad("--distributed needs --checkpoint-interval > 0")
	}
	if set["parallelism"] {
		bad("--parallelism does not apply to --distributed: every operator runs one subtask per slot (--slots)")
	}
	if f.slots <= 0 {
		bad("--slots must be positive, not %d", f.slots)
	}
	if f.sourceGroupID != "" && f.sourceGroupID == j.Name {
		// The processes' group has members of its own protocol: the
		// coordinator refuses offset commits from outside it, and a
		// monitor would read the slots topic's offsets there anyway.
		bad("--source-group-id %q is the job's own consumer group (--job-name); give the sources a group of their own, such as %s.source", f.sourceGroupID, j.Name)
	}
	if f.replication == 0 || f.replication < -1 || f.replication > 32767 {
		bad("--internal-topic-replication must be 1 or more, or -1 for the broker's default, not %d", f.replication)
	}
	if f.sessionTimeout <= 0 {
		bad("--session-timeout must be positive, not %s", f.sessionTimeout)
	}
	j.Distributed = &DistributedJob{Slots: f.slots, SessionTimeout: f.sessionTimeout, ReplicationFactor: int16(f.replication)}
	return errs
}

// resolveHTTP checks the status server's flags and fills j.HTTP: the
// address with loopback for a port alone, the token, the TLS config.
func (f *Flags) resolveHTTP(j *Job, getenv func(string) string) []error {
	var errs []error
	h := &j.HTTP
	if f.http != "" {
		h.Addr = f.http
		host, port, err := net.SplitHostPort(f.http)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--http %q is not host:port (such as :8081 for loopback, 0.0.0.0:8081 for every interface): %w", f.http, err))
		case host == "":
			// A port alone means this machine only: the status and metrics
			// name topics and show errors, and reaching them from other
			// hosts should be asked for by name (0.0.0.0, [::], a host).
			h.Addr = net.JoinHostPort("127.0.0.1", port)
		case net.ParseIP(host) == nil:
			h.AllowedHosts = append(h.AllowedHosts, host)
		}
	}
	for _, n := range strings.Split(f.httpAllowedHosts, ",") {
		if n = strings.TrimSpace(n); n != "" {
			h.AllowedHosts = append(h.AllowedHosts, n)
		}
	}
	token := ""
	if !f.cfg.without[StatusServer] {
		token = getenv(EnvHTTPToken)
	}
	if f.httpTokenFile != "" {
		if token != "" {
			errs = append(errs, fmt.Errorf("both %s and --http-token-file are set; give the token once", EnvHTTPToken))
		}
		b, err := os.ReadFile(f.httpTokenFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--http-token-file: %w", err)) // the path, never the contents
		}
		token = strings.TrimRight(string(b), "\r\n")
	}
	if token != "" {
		if err := status.CheckToken(token); err != nil {
			errs = append(errs, err)
		}
		h.Token = token
	}
	switch {
	case f.httpCert != "" && f.httpKey != "":
		cert, err := tls.LoadX509KeyPair(f.httpCert, f.httpKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("--http-tls-cert %s, --http-tls-key %s: %w", f.httpCert, f.httpKey, err))
		} else {
			h.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	case f.httpCert != "" || f.httpKey != "":
		errs = append(errs, fmt.Errorf("--http-tls-cert and --http-tls-key go together"))
	}
	if f.http == "" && (token != "" || f.httpCert != "" || f.httpKey != "" || f.httpAllowedHosts != "") {
		errs = append(errs, fmt.Errorf("the status server's token (--http-token-file, %s), TLS and allowed hosts settings need --http", EnvHTTPToken))
	}
	return errs
}

// Job is what the common flags say, checked.
type Job struct {
	// Name is --job-name: a distributed job's name among its processes.
	Name string
	// Brokers are the seed brokers of --brokers; nil without it
	// (BrokersOptional). A program that starts a Kafka of its own
	// instead sets them to its addresses, for KafkaOpts and ClientOpts.
	Brokers []string
	// Security is how every Kafka client connects (--kafka-*,
	// SPLITFLOW_KAFKA_*); the zero value is plaintext.
	Security kafka.Security
	// Parallelism is --parallelism; a distributed job's is its slots.
	Parallelism int
	// CheckpointInterval is --checkpoint-interval; 0: no checkpoints.
	CheckpointInterval time.Duration
	// CheckpointDir is --checkpoint-dir; "": in memory.
	CheckpointDir string
	// FromSavepoint is --from-savepoint; "": none.
	FromSavepoint string
	// SavepointDir is --savepoint-dir; "": none.
	SavepointDir string
	// SourceGroupID is --source-group-id, the group SourceOpts has the
	// Kafka sources commit their offsets to (and so, with --distributed,
	// the shuffle's sources, which RuntimeOptions gives SourceOpts); "":
	// none.
	SourceGroupID string
	// StateBackend is --state-backend, with --state-dir for pebble.
	StateBackend state.Backend
	// HTTP is the status server's settings; its Addr is "" without
	// --http.
	HTTP HTTP
	// Distributed is nil unless --distributed.
	Distributed *DistributedJob

	secOpts  []kgo.Opt
	listener net.Listener
}

// HTTP is the status server's settings (runtime.WithHTTP and the options
// beside it).
type HTTP struct {
	// Addr is --http's address, a port alone resolved to loopback.
	Addr string
	// Token is from --http-token-file or EnvHTTPToken; "": none.
	Token string
	// TLS is from --http-tls-cert and --http-tls-key; nil: plain HTTP.
	TLS *tls.Config
	// AllowedHosts are --http-allowed-hosts and --http's host when it is
	// a name.
	AllowedHosts []string
}

// DistributedJob is the settings of --distributed (runtime.Distributed).
type DistributedJob struct {
	Slots             int
	SessionTimeout    time.Duration
	ReplicationFactor int16 // -1: the broker's default
}

// Conn is the connection the flags say: the seed brokers and the
// security settings, which every Kafka source, sink and shuffle of the job
// and its membership share (kafka.WithConnection, kafka.Distributed). It
// is made from Brokers and Security as they are when it is called.
func (j *Job) Conn() *kafka.Conn {
	return kafka.Connect(kafka.WithBrokers(j.Brokers...), kafka.WithSecurity(j.Security))
}

// SourceOpts are the connection (Conn) and, with --source-group-id,
// kafka.WithGroupID, then opts: the options of a Kafka source of the job.
func (j *Job) SourceOpts(opts ...kafka.SourceOption) []kafka.SourceOption {
	base := []kafka.SourceOption{kafka.WithConnection(j.Conn())}
	if j.SourceGroupID != "" {
		base = append(base, kafka.WithGroupID(j.SourceGroupID))
	}
	return append(base, opts...)
}

// SinkOpts are the connection (Conn), then opts: the options of a Kafka
// sink of the job.
func (j *Job) SinkOpts(opts ...kafka.SinkOption) []kafka.SinkOption {
	return append([]kafka.SinkOption{kafka.WithConnection(j.Conn())}, opts...)
}

// ClientOpts are the franz-go options of the security settings, then
// opts: for a client of the program's own (an admin client, a verifier),
// given kgo.SeedBrokers(j.Brokers...) among opts.
func (j *Job) ClientOpts(opts ...kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt(nil), j.secOpts...), opts...)
}

// Listen binds the status server's address now, so that a port in use
// is reported before the program does any other work; RuntimeOptions
// then serves on it, and Execute closes it. It returns nil without
// --http. The error names --http.
func (j *Job) Listen() (net.Listener, error) {
	if j.HTTP.Addr == "" {
		return nil, nil
	}
	if j.listener != nil {
		return j.listener, nil
	}
	ln, err := net.Listen("tcp", j.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", j.HTTP.Addr, err)
	}
	j.listener = ln
	return ln, nil
}

// RuntimeOptions are the environment's options the flags say: the
// parallelism or, with --distributed, runtime.WithDistributed over a
// Kafka shuffle; the checkpoint interval and directory; the savepoint to
// start from and the savepoints' directory; the state backend; the status
// server (on Listen's listener when it was called); and
// runtime.WithLogger(logger) when logger is not nil, which the shuffle's
// clients log to as well. The error is the shuffle's configuration error.
func (j *Job) RuntimeOptions(logger *slog.Logger) ([]runtime.Option, error) {
	opts := []runtime.Option{
		runtime.WithCheckpointInterval(j.CheckpointInterval),
		runtime.WithStateBackend(j.StateBackend),
	}
	if logger != nil {
		opts = append(opts, runtime.WithLogger(logger))
	}
	if d := j.Distributed; d != nil {
		var shuffle []kafka.ShuffleOption
		if logger != nil {
			shuffle = append(shuffle, kafka.WithLogger(logger))
		}
		if j.SourceGroupID != "" {
			shuffle = append(shuffle, kafka.WithShuffleSourceOptions(kafka.WithGroupID(j.SourceGroupID)))
		}
		dist, err := kafka.Distributed(j.Name, j.Conn(), kafka.WithSlots(d.Slots), kafka.WithSessionTimeout(d.SessionTimeout),
			kafka.WithReplicationFactor(d.ReplicationFactor), kafka.WithShuffle(shuffle...))
		if err != nil {
			return nil, err
		}
		opts = append(opts, dist)
	} else {
		opts = append(opts, runtime.WithParallelism(j.Parallelism))
	}
	if j.CheckpointDir != "" {
		opts = append(opts, runtime.WithCheckpointDir(j.CheckpointDir))
	}
	if j.FromSavepoint != "" {
		opts = append(opts, runtime.WithRestoreFrom(j.FromSavepoint))
	}
	if j.SavepointDir != "" {
		opts = append(opts, runtime.WithSavepointDir(j.SavepointDir))
	}
	if h := j.HTTP; h.Addr != "" {
		var sopts []status.Option
		addr := h.Addr
		if j.listener != nil {
			addr = ""
			sopts = append(sopts, status.WithListener(j.listener))
		}
		if h.Token != "" {
			sopts = append(sopts, status.WithToken(h.Token))
		}
		if h.TLS != nil {
			sopts = append(sopts, status.WithTLS(h.TLS))
		}
		if len(h.AllowedHosts) > 0 {
			sopts = append(sopts, status.WithAllowedHosts(h.AllowedHosts...))
		}
		opts = append(opts, runtime.WithHTTP(addr, sopts...))
	}
	return opts, nil
}

// Cluster are --brokers and the --kafka-* security flags alone: how a
// tool that runs no job reaches a job's cluster (cmd/splitflow's txn and
// job commands). Register registers them as part of the common flags.
type Cluster struct {
	brokers string
	sec     *kafkaflag.Flags
}

// RegisterCluster adds --brokers and the --kafka-* flags to fs.
func RegisterCluster(fs *flag.FlagSet) *Cluster {
	return registerCluster(fs, "Kafka seed brokers host:port[,host:port] (required)")
}

func registerCluster(fs *flag.FlagSet, brokersUsage string) *Cluster {
	c := &Cluster{}
	fs.StringVar(&c.brokers, "brokers", "", brokersUsage)
	c.sec = kafkaflag.Register(fs)
	return c
}

// Brokers is --brokers as given; "" when left out.
func (c *Cluster) Brokers() string { return c.brokers }

// ClientOpts checks the parsed flags and returns the franz-go options they
// say: the security settings (getenv, os.Getenv when nil, reads the
// SPLITFLOW_KAFKA_* variables) and the seed brokers. The error joins every
// problem, each naming its flag or variable.
func (c *Cluster) ClientOpts(getenv func(string) string) ([]kgo.Opt, error) {
	var errs []error
	if c.brokers == "" {
		errs = append(errs, errors.New("--brokers is required"))
	} else if err := kafka.CheckBrokers(strings.Split(c.brokers, ",")...); err != nil {
		errs = append(errs, fmt.Errorf("--brokers: %w", err))
	}
	var opts []kgo.Opt
	sec, err := c.sec.Security(getenv)
	if err == nil {
		opts, err = sec.ClientOpts()
	}
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return append(opts, kgo.SeedBrokers(strings.Split(c.brokers, ",")...)), nil
}
