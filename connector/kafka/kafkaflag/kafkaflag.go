// Package kafkaflag reads a kafka.Security from command-line flags and the
// environment, the same way for every splitflow program (examples/wordcount,
// cmd/splitflow), so their users learn one set of names.
//
// Each flag has an environment variable; a flag given on the command line
// wins over it. The SASL password is never a flag, whose value would show
// in process listings and shell history: it comes from
// SPLITFLOW_KAFKA_SASL_PASSWORD or from a file (--kafka-sasl-password-file).
//
//	--kafka-tls                  SPLITFLOW_KAFKA_TLS=true      TLS with the system's roots
//	--kafka-tls-ca FILE          SPLITFLOW_KAFKA_TLS_CA        PEM CA certificates (implies TLS)
//	--kafka-tls-cert FILE        SPLITFLOW_KAFKA_TLS_CERT      PEM client certificate (implies TLS)
//	--kafka-tls-key FILE         SPLITFLOW_KAFKA_TLS_KEY       PEM client key (implies TLS)
//	--kafka-tls-server-name NAME SPLITFLOW_KAFKA_TLS_SERVER_NAME
//	--kafka-sasl-mechanism M     SPLITFLOW_KAFKA_SASL_MECHANISM  PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
//	--kafka-sasl-user USER       SPLITFLOW_KAFKA_SASL_USER
//	--kafka-sasl-password-file F SPLITFLOW_KAFKA_SASL_PASSWORD_FILE (or SPLITFLOW_KAFKA_SASL_PASSWORD)
//	--kafka-sasl-token-file F    SPLITFLOW_KAFKA_SASL_TOKEN_FILE  OAUTHBEARER token, read at every authentication
package kafkaflag

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// EnvPassword holds the SASL password of PLAIN and SCRAM.
const EnvPassword = "SPLITFLOW_KAFKA_SASL_PASSWORD"

// setting is one flag and its environment variable.
type setting struct {
	flag, env string
	value     string
	set       bool // given on the command line
}

func (s *setting) String() string { return s.value }
func (s *setting) Set(v string) error {
	s.value, s.set = v, true
	return nil
}

// boolSetting is a setting that is a flag without a value.
type boolSetting struct{ *setting }

func (boolSetting) IsBoolFlag() bool { return true }

// String is also called by package flag on a zero boolSetting, to learn
// the default.
func (b boolSetting) String() string {
	if b.setting == nil {
		return ""
	}
	return b.value
}

// Flags are the connection-security flags registered on one FlagSet.
type Flags struct {
	tls, ca, cert, key, serverName     setting
	mechanism, user, pwFile, tokenFile setting
}

// Register adds the flags to fs. After fs.Parse, Flags.Security builds the
// settings.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{
		tls:        setting{flag: "kafka-tls", env: "SPLITFLOW_KAFKA_TLS"},
		ca:         setting{flag: "kafka-tls-ca", env: "SPLITFLOW_KAFKA_TLS_CA"},
		cert:       setting{flag: "kafka-tls-cert", env: "SPLITFLOW_KAFKA_TLS_CERT"},
		key:        setting{flag: "kafka-tls-key", env: "SPLITFLOW_KAFKA_TLS_KEY"},
		serverName: setting{flag: "kafka-tls-server-name", env: "SPLITFLOW_KAFKA_TLS_SERVER_NAME"},
		mechanism:  setting{flag: "kafka-sasl-mechanism", env: "SPLITFLOW_KAFKA_SASL_MECHANISM"},
		user:       setting{flag: "kafka-sasl-user", env: "SPLITFLOW_KAFKA_SASL_USER"},
		pwFile:     setting{flag: "kafka-sasl-password-file", env: "SPLITFLOW_KAFKA_SASL_PASSWORD_FILE"},
		tokenFile:  setting{flag: "kafka-sasl-token-file", env: "SPLITFLOW_KAFKA_SASL_TOKEN_FILE"},
	}
	fs.Var(boolSetting{&f.tls}, f.tls.flag, "connect to Kafka over TLS, trusting the system's roots (env "+f.tls.env+"=true)")
	fs.Var(&f.ca, f.ca.flag, "PEM `file` of the CAs that sign the Kafka brokers' certificates; implies TLS (env "+f.ca.env+")")
	fs.Var(&f.cert, f.cert.flag, "PEM `file` of the client certificate for Kafka, with --kafka-tls-key; implies TLS (env "+f.cert.env+")")
	fs.Var(&f.key, f.key.flag, "PEM `file` of the client certificate's key; implies TLS (env "+f.key.env+")")
	fs.Var(&f.serverName, f.serverName.flag, "`name` the Kafka brokers' certificates must carry (default: the host dialled; env "+f.serverName.env+")")
	fs.Var(&f.mechanism, f.mechanism.flag, "SASL `mechanism` for Kafka: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (env "+f.mechanism.env+")")
	fs.Var(&f.user, f.user.flag, "SASL `user` for PLAIN and SCRAM (env "+f.user.env+"); the password comes from "+EnvPassword+" or --kafka-sasl-password-file")
	fs.Var(&f.pwFile, f.pwFile.flag, "`file` holding the SASL password, one line (env "+f.pwFile.env+")")
	fs.Var(&f.tokenFile, f.tokenFile.flag, "`file` holding the OAUTHBEARER token, read again at every authentication so it may be rotated (env "+f.tokenFile.env+")")
	return f
}

// get returns the flag's value if given, else the environment's.
func (s *setting) get(getenv func(string) string) string {
	if s.set {
		return s.value
	}
	return strings.TrimSpace(getenv(s.env))
}

// Security builds the settings from the parsed flags and getenv (os.Getenv
// when nil). It reads the password file now; certificate files are read
// by kafka.Security.ClientOpts and by the connectors. Errors wrap
// kafka.ErrInvalidSecurity and connector.ErrInvalidConfiguration, name the
// flag or variable, and never hold the password.
func (f *Flags) Security(getenv func(string) string) (kafka.Security, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var sec kafka.Security
	var errs []error
	tlsOn := false
	if v := f.tls.get(getenv); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s / %s: %q is not true or false", f.tls.flag, f.tls.env, v))
		}
		tlsOn = on
	}
	t := kafka.TLS{CAFile: f.ca.get(getenv), CertFile: f.cert.get(getenv), KeyFile: f.key.get(getenv), ServerName: f.serverName.get(getenv)}
	if tlsOn || t != (kafka.TLS{}) {
		sec.TLS = &t
	}
	mech := f.mechanism.get(getenv)
	user, pwFile, tokenFile := f.user.get(getenv), f.pwFile.get(getenv), f.tokenFile.get(getenv)
	pw := getenv(EnvPassword)
	switch {
	case mech == "" && (user != "" || pwFile != "" || tokenFile != "" || pw != ""):
		errs = append(errs, fmt.Errorf("SASL credentials are set but no mechanism; give --%s (or %s)", f.mechanism.flag, f.mechanism.env))
	case mech != "":
		a := &kafka.SASL{Mechanism: mech, User: user}
		if pwFile != "" {
			if pw != "" {
				errs = append(errs, fmt.Errorf("both %s and --%s are set; give the password once", EnvPassword, f.pwFile.flag))
			}
			b, err := os.ReadFile(pwFile)
			if err != nil {
				// The path is no secret; os errors never hold the contents.
				errs = append(errs, fmt.Errorf("--%s: %w", f.pwFile.flag, err))
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		a.Password = kafka.Secret(pw)
		if tokenFile != "" {
			if strings.ToUpper(mech) != kafka.SASLOAuthBearer {
				errs = append(errs, fmt.Errorf("--%s is for OAUTHBEARER, not %s", f.tokenFile.flag, mech))
			}
			if _, err := os.Stat(tokenFile); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", f.tokenFile.flag, err))
			}
			a.Token = tokenFromFile(tokenFile)
		} else if strings.ToUpper(mech) == kafka.SASLOAuthBearer {
			errs = append(errs, fmt.Errorf("OAUTHBEARER needs --%s (or %s)", f.tokenFile.flag, f.tokenFile.env))
		}
		sec.SASL = a
	}
	if err := errors.Join(errs...); err != nil {
		return kafka.Security{}, fmt.Errorf("%w: %w: %w", err, kafka.ErrInvalidSecurity, connector.ErrInvalidConfiguration)
	}
	// Check the rest (mechanism, files) now, at the one place a program
	// learns its settings.
	if _, err := sec.ClientOpts(); err != nil {
		return kafka.Security{}, err
	}
	return sec, nil
}

// tokenFromFile reads the token at every authentication, so whatever
// refreshes the file (a sidecar, a mounted secret) rotates the token.
func tokenFromFile(path string) func(context.Context) (oauth.Auth, error) {
	return func(context.Context) (oauth.Auth, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return oauth.Auth{}, fmt.Errorf("read the OAUTHBEARER token: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return oauth.Auth{}, fmt.Errorf("the OAUTHBEARER token file %s is empty", path)
		}
		return oauth.Auth{Token: tok}, nil
	}
}
