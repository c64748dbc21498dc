package main

import (
	"bytes"
	"strings"
	"testing"
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
