package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/idjob"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/txn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// documentedACL is one `kafka-acls.sh --add` line of docs/security.md.
type documentedACL = kafkatest.DocumentedACL

// docACLs reads the kafka-acls.sh lines of docs/security.md: the test
// grants exactly what the documentation lists.
func docACLs(t testing.TB) []documentedACL {
	t.Helper()
	return kafkatest.DocumentedACLs(t, "../docs/security.md", kafkatest.JobACLs)
}

// secureJob is one principal's job on the secure broker: its topics,
// group, prefix and the values of the documentation's variables.
type secureJob struct {
	b                    *kafkatest.SecureBroker
	user, password       string
	input, output, group string
	prefix               string
	ids                  []int64
	vars                 map[string]string
	adminOpts            []kgo.Opt
}

func newSecureJob(t *testing.T, b *kafkatest.SecureBroker, name string, n int64) *secureJob {
	t.Helper()
	j := &secureJob{b: b, user: fmt.Sprintf("%s-%d", name, time.Now().UnixNano())}
	j.input, j.output, j.group, j.prefix = j.user+"-in", j.user+"-out", j.user+"-group", j.user+"-txn"
	j.vars = map[string]string{"$INPUT": j.input, "$OUTPUT": j.output, "$GROUP": j.group, "$PREFIX": j.prefix}
	adm := kadm.NewClient(b.AdminClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tp := range []string{j.input, j.output} {
		if resp, err := adm.CreateTopic(ctx, 2, 1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", tp, err, resp.Err)
		}
	}
	j.ids = idRange(0, n)
	cl := b.AdminClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(j.input))
	for _, id := range j.ids {
		cl.Produce(ctx, &kgo.Record{Partition: int32(id % 2), Value: strconv.AppendInt(nil, id, 10)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.password = b.CreateUser(t, j.user)
	j.adminOpts = b.ClientOpts(kafkatest.SecureAdminUser, b.AdminPassword)
	return j
}

func (j *secureJob) principal() string { return "User:" + j.user }

// security is how the job's source and sink connect.
func (j *secureJob) security(password string) kafka.Security {
	return kafka.Security{
		TLS:  &kafka.TLS{CAFile: j.b.CAFile},
		SASL: &kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: j.user, Password: kafka.Secret(password)},
	}
}

// grant adds the ACLs of the documented lines.
func (j *secureJob) grant(t *testing.T, acls []documentedACL) {
	t.Helper()
	j.b.Grant(t, j.principal(), j.vars, acls...)
}

// revoke deletes the ACL of one documented line.
func (j *secureJob) revoke(t *testing.T, a documentedACL) {
	t.Helper()
	j.b.Revoke(t, j.principal(), j.vars, a)
}

func (j *secureJob) config(t *testing.T, password string) idjob.Config {
	return idjob.Config{
		Brokers: j.b.Addrs(), Input: j.input, Output: j.output, TxnPrefix: j.prefix, GroupID: j.group,
		Parallelism: 2, CheckpointInterval: 100 * time.Millisecond,
		Restart:  restart.FixedDelay(3, 100*time.Millisecond),
		Security: j.security(password), Logger: testLogger(t),
	}
}

// An exactly-once id job over SASL_SSL (SCRAM-SHA-512, TLS with a CA made
// at test time) on a broker with the standard authorizer, whose principal
// has exactly the ACLs docs/security.md lists, writes every id once.
func TestSecurityExactlyOnceOverSASLSSLWithDocumentedACLs(t *testing.T) {
	b := kafkatest.GetSecure(t)
	began := time.Now()
	j := newSecureJob(t, b, "eos", 3000)
	j.grant(t, docACLs(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := idjob.Run(ctx, j.config(t, j.password)); err != nil {
		t.Fatalf("job over SASL_SSL with the documented ACLs: %v", err)
	}
	recs := kafkatest.ReadCommitted(t, b.Addrs(), j.output, 60*time.Second, j.adminOpts...)
	r := countRecords(t, recs, j.ids)
	// The group's Read ACL was used: the last checkpoint's offsets are
	// committed, at the input's end.
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	offs, err := kadm.NewClient(b.AdminClient(t)).FetchOffsets(fctx, j.group)
	if err != nil {
		t.Fatalf("fetch the group's offsets: %v", err)
	}
	var committed int64
	offs.Each(func(o kadm.OffsetResponse) {
		committed += o.At
		if o.Partition >= 2 {
			t.Errorf("the group holds an offset for %s-%d, which does not exist (the start's probe commits nothing)", o.Topic, o.Partition)
		}
	})
	if committed != int64(len(j.ids)) {
		t.Errorf("the group's committed offsets add up to %d, want %d (the input's end)", committed, len(j.ids))
	}
	t.Logf("set-up and job over SASL_SSL took %s", time.Since(began).Round(time.Millisecond))
	report(t, "exactly-once over SASL_SSL with the documented ACLs", 1, len(j.ids), r, 0)
}

// securityFailure runs the job as cfg says with a restart strategy that
// would restart it for minutes, and returns its error, how many restarts
// and processed ids it saw, and how long it ran.
func securityFailure(t *testing.T, cfg idjob.Config) (err error, restarts, processed int64, took time.Duration) {
	t.Helper()
	var r, p atomic.Int64
	cfg.Restart = restart.FixedDelay(1000, 100*time.Millisecond)
	cfg.Listener = runtime.JobListener{Restarting: func(n int, err error) {
		if r.Add(1) <= 3 {
			t.Logf("restart %d after: %v", n, err)
		}
	}}
	cfg.Map = func(int64) error { p.Add(1); return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	err = idjob.Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("the job was still running after 60s (%d restarts): %v", r.Load(), err)
	}
	return err, r.Load(), p.Load(), time.Since(began)
}

// A job whose principal lacks one of the documented ACLs fails at start
// with an *AuthorizationError naming the principal, the resource and the
// operation, which wraps kafka.ErrNotAuthorized and is a configuration
// error, so the job does not restart; nothing is committed to the output,
// and a missing right of the source stops the job before it reads a
// record.
func TestSecurityMissingACLFailsAtStart(t *testing.T) {
	b := kafkatest.GetSecure(t)
	acls := docACLs(t)
	for i, missing := range acls {
		t.Run(missing.Resource+"-"+missing.Operation.String(), func(t *testing.T) {
			j := newSecureJob(t, b, "noacl", 200)
			var rest []documentedACL
			for k, a := range acls {
				if k != i {
					rest = append(rest, a)
				}
			}
			j.grant(t, rest)
			err, restarts, processed, took := securityFailure(t, j.config(t, j.password))
			t.Logf("without %q: failed after %s, %d restarts, %d ids processed: %v", missing.Line, took.Round(time.Millisecond), restarts, processed, err)
			var ae *kafka.AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, kafka.ErrNotAuthorized) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("error %v; want a *kafka.AuthorizationError wrapping ErrNotAuthorized and ErrInvalidConfiguration", err)
			}
			wantName := missing.Name
			for k, v := range j.vars {
				wantName = strings.ReplaceAll(wantName, k, v)
			}
			if ae.Principal != j.principal() || ae.Resource != missing.Resource || ae.Name != wantName ||
				!strings.EqualFold(ae.Operation, strings.ReplaceAll(missing.Operation.String(), "_", "")) || ae.Prefixed != missing.Prefixed {
				t.Errorf("the error names %s %s %q (prefixed %v) %s; want %s %s %q (prefixed %v) %s", ae.Principal, ae.Resource, ae.Name, ae.Prefixed, ae.Operation,
					j.principal(), missing.Resource, wantName, missing.Prefixed, missing.Operation)
			}
			for _, s := range []string{j.principal(), ae.Operation, wantName} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the message does not say %q: %v", s, err)
				}
			}
			if restarts != 0 {
				t.Errorf("the job restarted %d times; a missing right is a configuration error", restarts)
			}
			if (missing.Resource == kafka.ResourceTopic && missing.Name == "$INPUT" || missing.Resource == kafka.ResourceGroup) && processed != 0 {
				t.Errorf("%d ids processed before the source's missing right failed the job", processed)
			}
			if out := kafkatest.ReadCommitted(t, b.Addrs(), j.output, 30*time.Second, j.adminOpts...); len(out) != 0 {
				t.Errorf("%d records committed to the output", len(out))
			}
		})
	}
}

// A wrong password, a broker certificate the client does not trust and
// one that has expired (the broker's EXPIRED listener) fail the job at
// start with an *AuthenticationError, a configuration error: no restarts.
func TestSecurityBadCredentialsFailAtStart(t *testing.T) {
	b := kafkatest.GetSecure(t)
	j := newSecureJob(t, b, "badcred", 10)
	j.grant(t, docACLs(t))
	otherCA, err := kafkatest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	otherCAFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(otherCAFile, otherCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mechanism string
		sec             kafka.Security
		brokers         []string
	}{
		{"wrong password", kafka.SASLScramSHA512, j.security("wrong-" + j.password), nil},
		{"untrusted broker certificate", "TLS", kafka.Security{TLS: &kafka.TLS{CAFile: otherCAFile}, SASL: j.security(j.password).SASL}, nil},
		// The broker's own listener with a certificate of the trusted CA
		// that expired before it started.
		{"expired broker certificate", "TLS", j.security(j.password), b.ExpiredAddrs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := j.config(t, j.password)
			cfg.Security = tc.sec
			if tc.brokers != nil {
				cfg.Brokers = tc.brokers
			}
			err, restarts, _, took := securityFailure(t, cfg)
			t.Logf("%s: failed after %s, %d restarts: %v", tc.name, took.Round(time.Millisecond), restarts, err)
			var ae *kafka.AuthenticationError
			if !errors.As(err, &ae) || !errors.Is(err, kafka.ErrAuthenticationFailed) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("error %v; want a *kafka.AuthenticationError wrapping ErrAuthenticationFailed and ErrInvalidConfiguration", err)
			}
			if ae.Mechanism != tc.mechanism {
				t.Errorf("the error names %q, want %q", ae.Mechanism, tc.mechanism)
			}
			// Each TLS case fails for its own reason, not for another
			// one the listener happens to have (a name the certificate
			// does not hold would pass the checks above as well).
			var invalid x509.CertificateInvalidError
			var unknown x509.UnknownAuthorityError
			switch tc.name {
			case "untrusted broker certificate":
				if !errors.As(err, &unknown) {
					t.Errorf("error %v; want an x509.UnknownAuthorityError in its chain", err)
				}
			case "expired broker certificate":
				if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
					t.Errorf("error %v; want an x509.CertificateInvalidError of an expired certificate in its chain", err)
				}
			}
			if restarts != 0 {
				t.Errorf("the job restarted %d times", restarts)
			}
			if strings.Contains(err.Error(), j.password) {
				t.Error("the error shows the password")
			}
		})
	}
}

// A right revoked while the job runs fails it the same way, with an
// *AuthorizationError and no restart: Read on the input at the reader's
// next fetch (or the next discovery), Write on the output at the next
// transaction's flush, Read on the group at the checkpoint completion
// after a refused offset commit, Write on the transactional ids at the
// next transaction's begin, write or commit.
func TestSecurityRevokedACLFailsRunningJob(t *testing.T) {
	b := kafkatest.GetSecure(t)
	acls := docACLs(t)
	for _, tc := range []struct {
		name, resource, variable, op string
		maxRestarts                  int64
	}{
		{"input read", kafka.ResourceTopic, "$INPUT", "Read", 0},
		{"output write", kafka.ResourceTopic, "$OUTPUT", "Write", 0},
		{"group read", kafka.ResourceGroup, "$GROUP", "Read", 0},
		{"transactional id write", kafka.ResourceTransactionalID, "$PREFIX:", "Write", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newSecureJob(t, b, "revoke", 100)
			j.grant(t, acls)
			var revoke documentedACL
			for _, a := range acls {
				if a.Resource == tc.resource && a.Name == tc.variable && strings.EqualFold(a.Operation.String(), tc.op) {
					revoke = a
				}
			}
			if revoke.Line == "" {
				t.Fatalf("docs/security.md lists no %s on %s", tc.op, tc.variable)
			}
			cfg := j.config(t, j.password)
			cfg.Unbounded = true
			cfg.Discovery = 500 * time.Millisecond
			var restarts atomic.Int64
			checkpoints := make(chan int64, 100)
			cfg.Restart = restart.FixedDelay(1000, 100*time.Millisecond)
			cfg.Listener = runtime.JobListener{
				Restarting: func(n int, err error) {
					if restarts.Add(1) <= 3 {
						t.Logf("restart %d after: %v", n, err)
					}
				},
				CheckpointCompleted: func(id int64) {
					select {
					case checkpoints <- id:
					default:
					}
				},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- idjob.Run(ctx, cfg) }()
			select {
			case <-checkpoints:
			case err := <-done:
				t.Fatalf("the job ended before its first checkpoint: %v", err)
			case <-ctx.Done():
				t.Fatal("no checkpoint within 90s")
			}
			revoked := time.Now()
			j.revoke(t, revoke)
			// More input, so that the sink has something to write.
			feed := b.AdminClient(t, kgo.DefaultProduceTopic(j.input))
			for id := int64(100); id < 200; id++ {
				feed.Produce(ctx, &kgo.Record{Value: strconv.AppendInt(nil, id, 10)}, nil)
			}
			if err := feed.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatalf("the job still ran 90s after %s was revoked (%d restarts)", revoke.Line, restarts.Load())
			}
			t.Logf("failed %s after the revocation, %d restarts: %v", time.Since(revoked).Round(time.Millisecond), restarts.Load(), err)
			want := revoke.Expand(j.vars)
			var ae *kafka.AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, connector.ErrInvalidConfiguration) || ae.Resource != tc.resource ||
				ae.Name != want || ae.Operation != tc.op || ae.Principal != j.principal() {
				t.Fatalf("error %v; want an *AuthorizationError for %s on %s %s by %s", err, tc.op, tc.resource, want, j.principal())
			}
			if n := restarts.Load(); n > tc.maxRestarts {
				t.Errorf("the job restarted %d times, want at most %d", n, tc.maxRestarts)
			}
		})
	}
}

// The documented ACL on a job's transactional ids covers that job's ids
// and none of another job's whose prefix begins with the first one's:
// job P's principal, with exactly the documented ACLs, may register its
// own ids and the lease group P:lease, and is refused job P-b's ids (of
// no claim and of a claim) and P-b:lease. Before, the ids were
// P-<subtask>-<n> and the documented ACL $PREFIX- also matched P-b-0-0.
func TestSecurityDocumentedTransactionalIDACLCoversOneJobsIDsAlone(t *testing.T) {
	b := kafkatest.GetSecure(t)
	a := newSecureJob(t, b, "acla", 1)
	other := newSecureJob(t, b, "aclb", 1)
	other.prefix = a.prefix + "-b"
	other.vars["$PREFIX"] = other.prefix
	a.grant(t, docACLs(t))
	other.grant(t, docACLs(t))
	secOpts, err := a.security(a.password).ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	opts := append(secOpts, kgo.SeedBrokers(b.Addrs()...))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range []string{txn.TransactionalID(a.prefix, 0, 0), txn.ClaimTransactionalID(a.prefix, 1, 2, 3)} {
		if _, err := txn.AbortAndFence(ctx, cl, id); err != nil {
			t.Errorf("job %s's principal may not register its own id %s: %v", a.prefix, id, err)
		}
	}
	for _, id := range []string{txn.TransactionalID(other.prefix, 0, 0), txn.ClaimTransactionalID(other.prefix, 1, 2, 3)} {
		if _, err := txn.AbortAndFence(ctx, cl, id); !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("job %s's principal registered job %s's id %s (or failed otherwise): %v; want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", a.prefix, other.prefix, id, err)
		}
	}
	lease := func(prefix string) error {
		lcl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := txn.AcquireLease(ctx, lcl, txn.LeaseConfig{Prefix: prefix, Holder: "acl test", SessionTimeout: 6 * time.Second})
		if err == nil {
			l.Release()
		}
		return err
	}
	if err := lease(a.prefix); err != nil {
		t.Errorf("job %s's principal may not take its own prefix's lease: %v", a.prefix, err)
	}
	if err := lease(other.prefix); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Errorf("job %s's principal took job %s's lease (or failed otherwise): %v; want GROUP_AUTHORIZATION_FAILED", a.prefix, other.prefix, err)
	}
}
