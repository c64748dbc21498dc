package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/kafkatest"
)

// The --kafka-* settings are checked with the other flags: bad ones are
// usage errors naming the problem, and good ones reach the options.
func TestSecurityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Before any case sets the password in the environment, which
		// then stays set for the test.
		{[]string{"--brokers", "127.0.0.1:9092", "--kafka-tls-ca", "/nonexistent/ca.pem"}, "read the TLS CA file"},
		{[]string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u"}, "need --brokers"},
		{[]string{"--brokers", "127.0.0.1:9092", "--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u"}, `unknown SASL mechanism "GSSAPI"`},
	} {
		if strings.Contains(strings.Join(tc.args, " "), "sasl") {
			t.Setenv("SPLITFLOW_KAFKA_SASL_PASSWORD", "pw-wordcount-secret")
		}
		var errOut bytes.Buffer
		if _, err := parseFlags(tc.args, &errOut); err == nil || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: %v, output %q; want a usage error saying %q", tc.args, err, errOut.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "pw-wordcount-secret") {
			t.Errorf("%v: the usage error shows the password", tc.args)
		}
	}
	o, err := parseFlags([]string{"--brokers", "127.0.0.1:9092", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.job.Security.SASL == nil || o.job.Security.SASL.User != "u" || string(o.job.Security.SASL.Password) != "pw-wordcount-secret" || len(o.clientOpts) != 1 {
		t.Fatalf("options %+v, %d client options; want SCRAM-SHA-512 as u with the password from the environment", o.job.Security.SASL, len(o.clientOpts))
	}
}

// wordcount run against a cluster that speaks only TLS with SCRAM-SHA-512,
// with the CA and user from flags and the password from the environment,
// sets up its topics, counts and verifies exactly-once.
func TestSecurityRunOverTLSAndSCRAMIsExact(t *testing.T) {
	const password = "pw-wordcount-run-secret"
	c := kafkatest.NewSecureFake(t, "SCRAM-SHA-512", "wordcount", password)
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte("to be or not to be\nthat is the question\nto be\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPLITFLOW_KAFKA_SASL_PASSWORD", password)
	out, code := runWith(t, "--brokers", strings.Join(c.Seeds, ","), "--input-file", input, "--checkpoint-interval", "50ms",
		"--kafka-tls-ca", c.CAFile, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "wordcount")
	if code != 0 || !strings.Contains(out, "exactly-once: OK") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, password) {
		t.Fatal("the output shows the password")
	}
}

// wordcount's exactly-once job on the real broker over SASL_SSL
// (SCRAM-SHA-512, a CA made at start, the standard authorizer), its
// settings from the --kafka-* flags and the password from the
// environment, as a principal holding exactly the ACLs docs/security.md
// lists: the counts are exact. The topics and the input are set up, and
// the output verified, by the super user: a job's principal needs no
// Create, and no Read on what it writes.
func TestSecurityExactlyOnceOnSecureBrokerWithDocumentedACLs(t *testing.T) {
	runSecureWordcount(t, kafkatest.DocumentedACLs(t, "../../docs/security.md", kafkatest.JobACLs))
}

// A principal without DescribeConfigs on the cluster runs the same job
// with --no-broker-timeout-check, as docs/security.md says: exact.
func TestSecurityWithoutDescribeConfigsRunsWithNoBrokerTimeoutCheck(t *testing.T) {
	var acls []kafkatest.DocumentedACL
	for _, a := range kafkatest.DocumentedACLs(t, "../../docs/security.md", kafkatest.JobACLs) {
		if a.Resource != "cluster" {
			acls = append(acls, a)
		}
	}
	runSecureWordcount(t, acls, "--no-broker-timeout-check")
}

// secureUserAndInput creates user on b, sets its password for the
// --kafka-sasl-* flags, and writes an input file of 2000 lines.
func secureUserAndInput(t *testing.T, b *kafkatest.SecureBroker, user string) string {
	t.Helper()
	password := b.CreateUser(t, user)
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "the %d quick brown foxes jump over %d lazy dogs\n", i%17, i%5)
	}
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPLITFLOW_KAFKA_SASL_PASSWORD", password)
	return input
}

// fillSecureInput creates the topics and writes secureUserAndInput's
// 2000 lines, as admin.
func fillSecureInput(ctx context.Context, t *testing.T, seeds []string, admin options) {
	t.Helper()
	if err := ensureTopics(ctx, seeds, admin); err != nil {
		t.Fatal(err)
	}
	if n, err := fillInput(ctx, seeds, admin); err != nil || n != 2000 {
		t.Fatalf("fill the input: %d lines, %v", n, err)
	}
}

// runSecureWordcount runs wordcount's job on the secure broker as a new
// principal holding acls, with extra flags, and checks its counts exact.
func runSecureWordcount(t *testing.T, acls []kafkatest.DocumentedACL, extra ...string) {
	t.Helper()
	b := kafkatest.GetSecure(t)
	user := fmt.Sprintf("wordcount-%d", time.Now().UnixNano())
	input := secureUserAndInput(t, b, user)
	o, err := parseFlags(append([]string{"--brokers", strings.Join(b.Addrs(), ","), "--input-file", input,
		"--input-topic", user + "-lines", "--output-topic", user + "-counts", "--transactional-id-prefix", user + "-txn",
		"--checkpoint-interval", "100ms", "--partitions", "2",
		"--kafka-tls-ca", b.CAFile, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user}, extra...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"$INPUT": o.inputTopic, "$OUTPUT": o.outputTopic, "$GROUP": user + "-group", "$PREFIX": o.txnPrefix}
	b.Grant(t, "User:"+user, vars, acls...)

	admin := o
	admin.clientOpts = b.ClientOpts(kafkatest.SecureAdminUser, b.AdminPassword)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seeds := b.Addrs()
	fillSecureInput(ctx, t, seeds, admin)
	var p progress
	began := time.Now()
	if err := runJob(ctx, o, seeds, &p, slog.New(slog.DiscardHandler), nil); err != nil {
		t.Fatalf("wordcount over SASL_SSL with the documented ACLs: %v", err)
	}
	t.Logf("job over SASL_SSL: %s, %d lines, %d updates, %d checkpoints", time.Since(began).Round(time.Millisecond), p.lines.Load(), p.updates.Load(), p.checkpoints.Load())
	want, err := inputCounts(ctx, seeds, o.inputTopic, admin.clientOpts)
	if err != nil {
		t.Fatal(err)
	}
	r, err := verify(ctx, seeds, o.outputTopic, want, false, false, admin.clientOpts)
	if err != nil {
		t.Fatal(err)
	}
	var words int64
	for _, n := range want {
		words += n
	}
	if !r.ok() || int64(r.updates) != words {
		t.Fatalf("not exact: %d words, %d updates (want %d), %d duplicates, %d missing, unexpected %v", r.words, r.updates, words, r.duplicates, r.missing, r.unexpected)
	}
}

// Two wordcount --distributed processes on the secure broker, as a
// principal holding exactly the ACLs docs/security.md lists for any job
// and for a distributed one: the slots group, the internal topics (made
// by the processes themselves) and the shuffle's transactional ids need
// nothing more, and the counts are exact. Without any one of the
// distributed lines, the processes fail at once, naming the right, as a
// job without one of its sink's or source's rights does (before, without
// Read on the group or on the internal topics they waited for ever).
func TestSecurityDistributedJobWithDocumentedACLs(t *testing.T) {
	b := kafkatest.GetSecure(t)
	jobACLs := kafkatest.DocumentedACLs(t, "../../docs/security.md", kafkatest.JobACLs)
	dist := kafkatest.DocumentedACLs(t, "../../docs/security.md", kafkatest.DistributedACLs)
	if err := runSecureDistributed(t, b, append(slices.Clone(jobACLs), dist...), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	for k, a := range dist {
		t.Run("without "+a.Operation.String()+" on "+a.Resource+" "+a.Name, func(t *testing.T) {
			acls := append(slices.Clone(jobACLs), dist[:k]...)
			acls = append(acls, dist[k+1:]...)
			err := runSecureDistributed(t, b, acls, time.Minute)
			if err == nil || !strings.Contains(err.Error(), "not allowed to "+opName(a)) || !errors.Is(err, connector.ErrInvalidConfiguration) {
				t.Fatalf("want a failure naming the missing right (%s), got %v", a.Line, err)
			}
			t.Logf("%v", err)
		})
	}
}

// opName is a documented line's operation as the refusals name it.
func opName(a kafkatest.DocumentedACL) string {
	op := strings.ToLower(a.Operation.String())
	return strings.ToUpper(op[:1]) + op[1:]
}

// runSecureDistributed runs two wordcount --distributed processes as a new
// principal holding acls until their output is exact (nil), or returns
// the first error of a process, or a timeout's.
func runSecureDistributed(t *testing.T, b *kafkatest.SecureBroker, acls []kafkatest.DocumentedACL, timeout time.Duration) error {
	t.Helper()
	user := fmt.Sprintf("wcdist-%d", time.Now().UnixNano())
	input := secureUserAndInput(t, b, user)
	common := []string{"--brokers", strings.Join(b.Addrs(), ","), "--input-topic", user + "-lines", "--output-topic", user + "-counts",
		"--checkpoint-interval", "100ms", "--partitions", "2",
		"--kafka-tls-ca", b.CAFile, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user}
	admin, err := parseFlags(append([]string{"--input-file", input}, common...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	admin.clientOpts = b.ClientOpts(kafkatest.SecureAdminUser, b.AdminPassword)
	o, err := parseFlags(append([]string{"--distributed", "--job-name", user, "--slots", "2", "--session-timeout", "6s",
		"--checkpoint-dir", t.TempDir()}, common...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b.Grant(t, "User:"+user, map[string]string{"$INPUT": o.inputTopic, "$OUTPUT": o.outputTopic, "$GROUP": user + "-group",
		"$PREFIX": o.txnPrefix, "$JOB": user}, acls...)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seeds := b.Addrs()
	fillSecureInput(ctx, t, seeds, admin)
	want, err := inputCounts(ctx, seeds, o.inputTopic, admin.clientOpts)
	if err != nil {
		t.Fatal(err)
	}
	var words int64
	for _, n := range want {
		words += n
	}
	jobCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			var p progress
			done <- runJob(jobCtx, o, seeds, &p, slog.New(slog.DiscardHandler), nil)
		}()
	}
	running := 2
	defer func() {
		stop()
		for ; running > 0; running-- {
			<-done
		}
	}()
	var r report
	for {
		select {
		case err := <-done:
			running--
			return fmt.Errorf("a distributed process ended: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("not exact within %s: %d words, %d updates (want %d), %d duplicates, %d missing", timeout, r.words, r.updates, words, r.duplicates, r.missing)
		case <-time.After(500 * time.Millisecond):
		}
		if r, err = verify(ctx, seeds, o.outputTopic, want, false, false, admin.clientOpts); err != nil {
			return err
		}
		if r.duplicates > 0 {
			t.Fatalf("%d duplicates", r.duplicates)
		}
		if r.ok() && int64(r.updates) == words {
			break
		}
	}
	stop()
	for ; running > 0; running-- {
		if err := <-done; err != nil {
			return fmt.Errorf("a distributed process stopped with %w", err)
		}
	}
	return nil
}
