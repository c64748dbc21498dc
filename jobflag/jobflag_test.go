package jobflag

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime/state"
)

func parse(t *testing.T, args []string, env map[string]string, opts ...Opt) (*Job, error) {
	t.Helper()
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Register(fs, opts...)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return f.Job(func(k string) string { return env[k] })
}

// The defaults are the documented ones, and Opt changes them.
func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	j, err := parse(t, []string{"--brokers", "127.0.0.1:9092"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "orders" || j.Parallelism != 1 || j.CheckpointInterval != time.Second || j.StateBackend != state.Heap() ||
		j.CheckpointDir != "" || j.Distributed != nil || j.HTTP.Addr != "" || j.Security.TLS != nil || j.Security.SASL != nil {
		t.Fatalf("defaults: %+v", j)
	}
	if len(j.Brokers) != 1 || j.Brokers[0] != "127.0.0.1:9092" {
		t.Fatalf("brokers %q", j.Brokers)
	}
	j, err = parse(t, []string{"--brokers", "127.0.0.1:9092", "--distributed", "--checkpoint-dir", t.TempDir()}, nil,
		DefaultJobName("shop"), DefaultParallelism(3), DefaultCheckpointInterval(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "shop" || j.Parallelism != 3 || j.CheckpointInterval != 5*time.Second ||
		j.Distributed == nil || j.Distributed.Slots != 16 || j.Distributed.SessionTimeout != 10*time.Second || j.Distributed.ReplicationFactor != -1 {
		t.Fatalf("with options: %+v, distributed %+v", j, j.Distributed)
	}
}

// Rule (one validation point): every problem of a command line comes in
// one error, each naming the flag or variable that has it.
func TestEveryProblemNamesItsFlag(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		opts []Opt
		want []string
	}{
		{nil, nil, nil, []string{"--brokers is required"}},
		{[]string{"--from-savepoint", dir, "--distributed", "--checkpoint-dir", dir, "--kafka-tls"}, nil, nil, []string{"--brokers is required"}},
		{[]string{"--brokers", "kafka1", "--parallelism", "0", "--checkpoint-interval", "-1s"}, nil, nil,
			[]string{"--brokers:", `"kafka1" has no port`, "--parallelism must be positive", "--checkpoint-interval must not be negative"}},
		{[]string{"--brokers", "a:1", "--checkpoint-interval", "0", "--checkpoint-dir", dir, "--from-savepoint", dir}, nil, nil,
			[]string{"--checkpoint-dir needs --checkpoint-interval > 0", "--from-savepoint needs --checkpoint-interval > 0"}},
		{[]string{"--brokers", "a:1", "--state-backend", "rocks", "--state-dir", dir}, nil, nil,
			[]string{"--state-backend:", "--state-dir applies to --state-backend pebble"}},
		{[]string{"--from-savepoint", dir, "--kafka-tls"}, nil, []Opt{BrokersOptional("an in-process Kafka")},
			[]string{"--from-savepoint needs --brokers", "--kafka-tls and --kafka-sasl settings need --brokers"}},
		{[]string{"--distributed", "--parallelism", "3", "--slots", "0", "--session-timeout", "0s", "--internal-topic-replication", "0"}, nil,
			[]Opt{BrokersOptional("an in-process Kafka")},
			[]string{"--distributed needs --brokers", "--distributed needs --checkpoint-dir", "--parallelism does not apply to --distributed",
				"--slots must be positive", "--session-timeout must be positive", "--internal-topic-replication must be 1 or more"}},
		{[]string{"--brokers", "a:1", "--job-name", "x", "--slots", "4"}, nil, nil,
			[]string{"--job-name applies to --distributed", "--slots applies to --distributed"}},
		{[]string{"--brokers", "a:1", "--http", "8081", "--http-tls-cert", "c.pem"}, map[string]string{EnvHTTPToken: "short"}, nil,
			[]string{"--http \"8081\" is not host:port", "--http-tls-cert and --http-tls-key go together", "fewer than 16"}},
		{[]string{"--brokers", "a:1"}, map[string]string{EnvHTTPToken: "a-token-long-enough-1234"}, nil,
			[]string{"need --http"}},
		{[]string{"--brokers", "a:1", "--kafka-sasl-mechanism", "GSSAPI"}, map[string]string{"SPLITFLOW_KAFKA_SASL_PASSWORD": "pw-jobflag-secret"}, nil,
			[]string{`unknown SASL mechanism "GSSAPI"`}},
	} {
		_, err := parse(t, tc.args, tc.env, tc.opts...)
		if err == nil {
			t.Errorf("%q: accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: the error does not say %q:\n%v", tc.args, w, err)
			}
		}
		if len(tc.opts) == 0 && strings.Count(err.Error(), "--brokers") > 1 {
			t.Errorf("%q: --brokers named more than once:\n%v", tc.args, err)
		}
		for _, secret := range []string{"pw-jobflag-secret", "a-token-long-enough-1234"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: the error shows a secret", tc.args)
			}
		}
	}
}

// A port alone listens on loopback; a host name is allowed as a Host.
func TestHTTPPortAloneMeansLoopback(t *testing.T) {
	for arg, want := range map[string]string{":8081": "127.0.0.1:8081", "0.0.0.0:8081": "0.0.0.0:8081", "localhost:8081": "localhost:8081"} {
		j, err := parse(t, []string{"--brokers", "a:1", "--http", arg}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if j.HTTP.Addr != want {
			t.Errorf("--http %s: %q, want %q", arg, j.HTTP.Addr, want)
		}
	}
	j, _ := parse(t, []string{"--brokers", "a:1", "--http", "status.example:8081", "--http-allowed-hosts", "a.example, b.example"}, nil)
	if strings.Join(j.HTTP.AllowedHosts, ",") != "status.example,a.example,b.example" {
		t.Errorf("allowed hosts %q", j.HTTP.AllowedHosts)
	}
}

// Without leaves a group's flags out, and their variables unread.
func TestWithoutLeavesGroupsOut(t *testing.T) {
	fs := flag.NewFlagSet("w", flag.ContinueOnError)
	f := Register(fs, Without(Savepoints, StatusServer, Distributed), BrokersOptional("nothing"))
	for _, name := range []string{"from-savepoint", "savepoint-dir", "http", "http-token-file", "distributed", "job-name", "slots", "session-timeout"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s registered", name)
		}
	}
	for _, name := range []string{"brokers", "parallelism", "checkpoint-interval", "checkpoint-dir", "state-backend", "state-dir", "kafka-tls"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s not registered", name)
		}
	}
	_ = fs.Parse(nil)
	j, err := f.Job(func(k string) string {
		if k == EnvHTTPToken {
			return "a-token-long-enough-1234"
		}
		return ""
	})
	if err != nil || j.HTTP.Token != "" || j.Name != "w" {
		t.Fatalf("%v, %+v: want the token variable ignored without a status server", err, j)
	}
}

// The options build: a distributed job's shuffle is made from the
// brokers, and the listener of Listen is the one served.
func TestRuntimeOptions(t *testing.T) {
	j, err := parse(t, []string{"--brokers", "127.0.0.1:9092", "--distributed", "--checkpoint-dir", t.TempDir(), "--http", "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := j.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if again, _ := j.Listen(); again != ln {
		t.Error("a second Listen bound another listener")
	}
	if _, err := j.RuntimeOptions(nil); err != nil {
		t.Fatal(err)
	}
	if len(j.ClientOpts()) != 0 {
		t.Errorf("plaintext: %d client options", len(j.ClientOpts()))
	}
	// The brokers and the security settings travel as one connection.
	if n := len(j.SourceOpts()); n != 1 {
		t.Errorf("%d source options, want the connection", n)
	}
	if b := j.Conn().Brokers(); !slices.Equal(b, j.Brokers) {
		t.Errorf("the connection's brokers are %v, want --brokers' %v", b, j.Brokers)
	}
	if err := j.Conn().Err(); err != nil {
		t.Errorf("the connection: %v", err)
	}
}

// --source-group-id reaches the sources SourceOpts configures: a source
// that starts from its committed offsets, which needs a group id, builds
// with it and is refused without it. A distributed job's own group is
// refused as the sources' group, naming the flag.
func TestSourceGroupIDReachesTheSources(t *testing.T) {
	committed := kafka.WithStartingOffsets(kafka.CommittedOffsets(kafka.ResetEarliest))
	j, err := parse(t, []string{"--brokers", "127.0.0.1:9092"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kafka.NewSource(kafka.StringValues(), j.SourceOpts(kafka.WithTopics("lines"), committed)...); err == nil {
		t.Fatal("without --source-group-id, a source starting from committed offsets was accepted")
	}
	dir := t.TempDir()
	j, err = parse(t, []string{"--brokers", "127.0.0.1:9092", "--distributed", "--job-name", "shop", "--checkpoint-dir", dir, "--source-group-id", "shop.source"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j.SourceGroupID != "shop.source" {
		t.Fatalf("SourceGroupID %q", j.SourceGroupID)
	}
	if _, err := kafka.NewSource(kafka.StringValues(), j.SourceOpts(kafka.WithTopics("lines"), committed)...); err != nil {
		t.Fatalf("with --source-group-id: %v", err)
	}
	_, err = parse(t, []string{"--brokers", "127.0.0.1:9092", "--distributed", "--job-name", "shop", "--checkpoint-dir", dir, "--source-group-id", "shop"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--source-group-id \"shop\" is the job's own consumer group") {
		t.Fatalf("the job's own group as the sources' group: %v", err)
	}
}
