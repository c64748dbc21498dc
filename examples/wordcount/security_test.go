package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if o.security.SASL == nil || o.security.SASL.User != "u" || string(o.security.SASL.Password) != "pw-wordcount-secret" || len(o.clientOpts) != 1 {
		t.Fatalf("options %+v, %d client options; want SCRAM-SHA-512 as u with the password from the environment", o.security.SASL, len(o.clientOpts))
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
