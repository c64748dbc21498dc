package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// `txn list` reaches a cluster that speaks only TLS with SCRAM, taking the
// CA and user from flags and the password from the environment; without
// the password it is a usage error that names what is missing.
func TestTxnListOverTLSAndSASL(t *testing.T) {
	const password = "pw-cli-7Rv-secret"
	c := kafkatest.NewSecureFake(t, "SCRAM-SHA-256", "ops", password, kfake.SeedTopics(1, "out"))
	caFile, ca := c.CAFile, c.CA
	seeds := c.Seeds
	ctx := context.Background()
	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("job-0-1"), kgo.DefaultProduceTopic("out"),
		kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: "ops", Pass: password}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.Close() // abandoned: the transaction stays open

	env := map[string]string{}
	getenv = func(k string) string { return env[k] }
	t.Cleanup(func() { getenv = os.Getenv })
	args := []string{"txn", "list", "--brokers", strings.Join(seeds, ","), "--prefix", "job",
		"--kafka-tls-ca", caFile, "--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "ops"}

	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "needs a password") {
		t.Fatalf("txn list without a password: %v, want a usage error saying the password is missing", err)
	}

	env["SPLITFLOW_KAFKA_SASL_PASSWORD"] = password
	out.Reset()
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("txn list: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "job-0-1") || !strings.Contains(out.String(), "Ongoing") {
		t.Fatalf("txn list output lacks the open transaction:\n%s", out.String())
	}
	if strings.Contains(out.String()+errOut.String(), password) {
		t.Fatal("the output shows the password")
	}
}

// Rule (one validation point): txn's bad settings are one usage error
// naming each, before anything is dialled: malformed broker addresses, an
// unreadable CA file, an unknown SASL mechanism.
func TestTxnBadSettingsAreOneUsageError(t *testing.T) {
	env := map[string]string{"SPLITFLOW_KAFKA_SASL_PASSWORD": "pw-cli-bad-secret"}
	getenv = func(k string) string { return env[k] }
	t.Cleanup(func() { getenv = os.Getenv })
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"txn", "list", "--brokers", "kafka1,:9092", "--prefix", "job",
		"--kafka-tls-ca", "/nonexistent/ca.pem", "--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "ops"}, &out, &errOut)
	if !errors.Is(err, errUsage) {
		t.Fatalf("txn list with bad settings: %v, want a usage error", err)
	}
	for _, want := range []string{`"kafka1" has no port`, `":9092" has no host`, "read the TLS CA file", `unknown SASL mechanism "GSSAPI"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "pw-cli-bad-secret") {
		t.Error("the error shows the password")
	}
}
