package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// securePassword is distinctive so that a search for it finds nothing else.
const securePassword = "pw-Zq8vX3kT-never-shown"

// secureCluster is a kfake cluster that speaks only TLS with SCRAM-SHA-512,
// its CA file, and the Security that reaches it.
type secureCluster struct {
	fake   *kfake.Cluster
	seeds  []string
	caFile string
	sec    Security
}

func newSecureCluster(t *testing.T) secureCluster {
	t.Helper()
	f := kafkatest.NewSecureFake(t, SASLScramSHA512, "job", securePassword)
	return secureCluster{fake: f.Cluster, seeds: f.Seeds, caFile: f.CAFile, sec: Security{
		TLS:  &TLS{CAFile: f.CAFile},
		SASL: &SASL{Mechanism: SASLScramSHA512, User: "job", Password: securePassword},
	}}
}

func (c secureCluster) clientOpts(t *testing.T) []kgo.Opt {
	t.Helper()
	opts, err := c.sec.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// topics creates in and out and writes n decimal ids into in.
func (c secureCluster) topics(t *testing.T, in, out string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(append(c.clientOpts(t), kgo.SeedBrokers(c.seeds...), kgo.DefaultProduceTopic(in))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tp := range []string{in, out} {
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", tp, err, resp.Err)
		}
	}
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: strconv.AppendInt(nil, int64(i), 10)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// secureJob is a bounded exactly-once copy job from in to out with sec.
func secureJob(t *testing.T, seeds []string, sec Security, in, out, dir string, logger *slog.Logger) *runtime.Environment {
	t.Helper()
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithSecurity(sec), WithTopics(in),
		WithBounded(LatestOffsets()), WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewSink(KeyValueSerializer(out, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
		WithBrokers(seeds...), WithSecurity(sec), WithLogger(logger),
		WithExactlyOnce(out), WithTransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(50*time.Millisecond),
		runtime.WithCheckpointTimeout(10*time.Second), runtime.WithCheckpointDir(dir), runtime.WithLogger(logger),
		runtime.WithRestartStrategy(restart.None()))
	runtime.SinkTo(runtime.FromSource(env, src, "in"), sink)
	return env
}

// An exactly-once job whose source and sink connect over TLS with
// SCRAM-SHA-512 copies every record once.
func TestSecurityExactlyOnceOverTLSAndSCRAM(t *testing.T) {
	c := newSecureCluster(t)
	const n = 500
	c.topics(t, "in", "out", n)
	env := secureJob(t, c.seeds, c.sec, "in", "out", t.TempDir(), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := env.Execute(ctx, "secure copy"); err != nil {
		t.Fatalf("execute: %v", err)
	}
	seen := map[string]int{}
	for _, r := range kafkatest.ReadCommitted(t, c.seeds, "out", 30*time.Second, c.clientOpts(t)...) {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := strconv.Itoa(i); seen[v] != 1 {
			t.Fatalf("id %s written %d times, want once", v, seen[v])
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct ids in the output, want %d", len(seen), n)
	}
}

// The password of a job's SASL settings is in none of what the job leaves
// behind or shows: its log at debug level, its status JSON, its checkpoint
// files, and the error and log of a run whose password is wrong.
func TestSecurityPasswordNeverShown(t *testing.T) {
	c := newSecureCluster(t)
	c.topics(t, "in", "out", 200)
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := t.TempDir()
	env := secureJob(t, c.seeds, c.sec, "in", "out", dir, logger)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := env.Execute(ctx, "secure copy"); err != nil {
		t.Fatalf("execute: %v", err)
	}
	status, err := json.Marshal(env.Status())
	if err != nil {
		t.Fatal(err)
	}
	places := map[string][]byte{"the job's log": logs.Bytes(), "the status JSON": status}
	files := 0
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files++
		places["checkpoint file "+path] = b
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("the job wrote no checkpoint files to search")
	}

	// A wrong password: the run fails, and neither its error nor its log
	// holds the wrong password or the right one.
	const wrong = "wrong-Jh2Lp0-password"
	bad := c.sec
	bad.SASL = &SASL{Mechanism: SASLScramSHA512, User: "job", Password: wrong}
	var badLogs bytes.Buffer
	env = secureJob(t, c.seeds, bad, "in", "out-bad", t.TempDir(), slog.New(slog.NewJSONHandler(&badLogs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	err = env.Execute(ctx, "wrong password")
	if err == nil {
		t.Fatal("a job with a wrong password ran to its end")
	}
	places["the failed run's error"] = []byte(err.Error() + fmt.Sprintf(" %+v %#v", err, err))
	places["the failed run's log"] = badLogs.Bytes()
	for where, b := range places {
		for _, pw := range []string{securePassword, wrong} {
			if bytes.Contains(b, []byte(pw)) {
				t.Errorf("a password is in %s", where)
			}
		}
	}
}

// Printing, logging or marshalling Security shows no password.
func TestSecuritySecretRedacted(t *testing.T) {
	sec := Security{SASL: &SASL{Mechanism: SASLPlain, User: "u", Password: securePassword}}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("settings", "sasl", sec.SASL, "password", sec.SASL.Password)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("settings", "sasl", sec.SASL, "password", sec.SASL.Password)
	js, err := json.Marshal(sec)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", *sec.SASL, *sec.SASL, *sec.SASL, sec.SASL.Password), logs.String(), string(js)} {
		if strings.Contains(s, securePassword) {
			t.Errorf("password shown: %s", s)
		}
		if !strings.Contains(s, "[redacted]") {
			t.Errorf("no [redacted] where the password was: %s", s)
		}
	}
}

// Every problem of a Security is a configuration error of NewSource and
// NewSink, found at once, naming what is wrong and never the password.
func TestSecurityConfigurationErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := func(context.Context) (oauth.Auth, error) { return oauth.Auth{Token: "t"}, nil }
	for _, tc := range []struct {
		name string
		sec  Security
		want string
	}{
		{"unknown mechanism", Security{SASL: &SASL{Mechanism: "GSSAPI", User: "u", Password: securePassword}}, `unknown SASL mechanism "GSSAPI"`},
		{"no mechanism", Security{SASL: &SASL{User: "u", Password: securePassword}}, "no SASL mechanism"},
		{"no user", Security{SASL: &SASL{Mechanism: SASLScramSHA256, Password: securePassword}}, "SCRAM-SHA-256 needs a user"},
		{"no password", Security{SASL: &SASL{Mechanism: SASLPlain, User: "u"}}, "PLAIN needs a password"},
		{"no token function", Security{SASL: &SASL{Mechanism: SASLOAuthBearer}}, "OAUTHBEARER needs a token function"},
		{"token and password", Security{SASL: &SASL{Mechanism: SASLOAuthBearer, Token: token, Password: securePassword}}, "not a user and password"},
		{"missing CA file", Security{TLS: &TLS{CAFile: filepath.Join(dir, "absent.pem")}}, "read the TLS CA file"},
		{"CA file without a certificate", Security{TLS: &TLS{CAFile: notPEM}}, "holds no PEM certificate"},
		{"certificate without key", Security{TLS: &TLS{CertFile: notPEM}}, "needs both a certificate file and a key file"},
		{"unreadable key pair", Security{TLS: &TLS{CertFile: notPEM, KeyFile: notPEM}}, "load the TLS client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srcErr := NewSource(StringValues(), WithBrokers("127.0.0.1:9092"), WithTopics("t"), WithSecurity(tc.sec))
			_, snkErr := NewSink(KeyValueSerializer("t", func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
				WithBrokers("127.0.0.1:9092"), WithSecurity(tc.sec))
			_, optsErr := tc.sec.ClientOpts()
			for what, err := range map[string]error{"NewSource": srcErr, "NewSink": snkErr, "ClientOpts": optsErr} {
				if !errors.Is(err, connector.ErrInvalidConfiguration) || !errors.Is(err, ErrInvalidSecurity) {
					t.Fatalf("%s: %v, want an error wrapping ErrInvalidConfiguration and ErrInvalidSecurity", what, err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %q does not say %q", what, err, tc.want)
				}
				if strings.Contains(err.Error(), securePassword) {
					t.Errorf("%s: the error shows the password: %v", what, err)
				}
			}
		})
	}
}

// A broker certificate that is expired, or signed by a CA the client does
// not trust, fails the job at start with an *AuthenticationError, a
// configuration error: no restarts.
func TestSecurityBadBrokerCertificateFailsAtStart(t *testing.T) {
	ca, err := kafkatest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := kafkatest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	expired, err := ca.Issue("kfake", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := other.Issue("kfake", time.Time{}, time.Time{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for name, leaf := range map[string]kafkatest.Leaf{"expired": expired, "untrusted": untrusted} {
		t.Run(name, func(t *testing.T) {
			cert, err := leaf.TLSCertificate()
			if err != nil {
				t.Fatal(err)
			}
			f, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"),
				kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var restarts atomic.Int64
			src, err := NewSource(StringValues(), WithBrokers(f.ListenAddrs()...), WithSecurity(Security{TLS: &TLS{CAFile: caFile}}), WithTopics("in"))
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.NewEnvironment(runtime.WithRestartStrategy(restart.FixedDelay(1000, 10*time.Millisecond)),
				runtime.WithJobListener(runtime.JobListener{Restarting: func(int, error) { restarts.Add(1) }}))
			runtime.SinkTo(runtime.FromSource(env, src, "in"), &collectSink{got: map[string]int{}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = env.Execute(ctx, "bad certificate")
			var ae *AuthenticationError
			if !errors.As(err, &ae) || ae.Mechanism != "TLS" || !errors.Is(err, ErrAuthenticationFailed) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("got %v; want an *AuthenticationError for TLS", err)
			}
			if n := restarts.Load(); n != 0 {
				t.Errorf("%d restarts", n)
			}
		})
	}
}
