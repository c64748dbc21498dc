package kafkaflag

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/integration/kafkatest"
)

const password = "pw-Kq3-flag-secret"

func parse(t *testing.T, args []string, env map[string]string) (kafka.Security, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Security(func(k string) string { return env[k] })
}

// The settings come from flags, else from the environment; the password
// only from the environment or a file.
func TestSecurityFlagsAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A CA file is read by ClientOpts at the end of Security: give it a
	// real certificate.
	writeCA(t, ca)

	sec, err := parse(t, []string{"--kafka-tls-ca", ca, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "flaguser"},
		map[string]string{"SPLITFLOW_KAFKA_SASL_USER": "envuser", EnvPassword: password})
	if err != nil {
		t.Fatal(err)
	}
	if sec.TLS == nil || sec.TLS.CAFile != ca || sec.SASL == nil || sec.SASL.User != "flaguser" || string(sec.SASL.Password) != password ||
		sec.SASL.Mechanism != "SCRAM-SHA-512" {
		t.Fatalf("flags and environment gave %+v %+v", sec.TLS, sec.SASL)
	}

	sec, err = parse(t, []string{"--kafka-sasl-password-file", pwFile},
		map[string]string{"SPLITFLOW_KAFKA_SASL_MECHANISM": "PLAIN", "SPLITFLOW_KAFKA_SASL_USER": "envuser", "SPLITFLOW_KAFKA_TLS": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if sec.TLS == nil || *sec.TLS != (kafka.TLS{}) || sec.SASL.User != "envuser" || string(sec.SASL.Password) != password {
		t.Fatalf("environment and password file gave %+v %+v", sec.TLS, sec.SASL)
	}

	sec, err = parse(t, nil, nil)
	if err != nil || sec.TLS != nil || sec.SASL != nil {
		t.Fatalf("no settings gave %+v, %v; want plaintext", sec, err)
	}
}

// An OAUTHBEARER token file is read at every authentication.
func TestSecurityTokenFileRotates(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec, err := parse(t, []string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-token-file", tok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first", "second"} {
		if err := os.WriteFile(tok, []byte(want+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := sec.SASL.Token(context.Background())
		if err != nil || a.Token != want {
			t.Fatalf("token %q, %v; want %q", a.Token, err, want)
		}
	}
}

// Bad settings are configuration errors that name the flag and never the
// password.
func TestSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"credentials without mechanism", []string{"--kafka-sasl-user", "u"}, map[string]string{EnvPassword: password}, "no mechanism"},
		{"unknown mechanism", []string{"--kafka-sasl-mechanism", "KERBEROS", "--kafka-sasl-user", "u"}, map[string]string{EnvPassword: password}, `unknown SASL mechanism "KERBEROS"`},
		{"password twice", []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", pwFile}, map[string]string{EnvPassword: password}, "give the password once"},
		{"missing password file", []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", filepath.Join(dir, "absent")}, nil, "--kafka-sasl-password-file"},
		{"no password", []string{"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "u"}, nil, "needs a password"},
		{"token without OAUTHBEARER", []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-token-file", pwFile}, map[string]string{EnvPassword: password}, "is for OAUTHBEARER"},
		{"OAUTHBEARER without token", []string{"--kafka-sasl-mechanism", "OAUTHBEARER"}, nil, "--kafka-sasl-token-file"},
		{"bad TLS switch", nil, map[string]string{"SPLITFLOW_KAFKA_TLS": "perhaps"}, "SPLITFLOW_KAFKA_TLS"},
		{"missing CA file", []string{"--kafka-tls-ca", filepath.Join(dir, "absent.pem")}, nil, "read the TLS CA file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.args, tc.env)
			if !errors.Is(err, connector.ErrInvalidConfiguration) || !errors.Is(err, kafka.ErrInvalidSecurity) {
				t.Fatalf("%v, want a configuration error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func writeCA(t *testing.T, path string) {
	t.Helper()
	kafkatest.WriteCA(t, path)
}
