package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security says how clients reach the brokers: over TLS, with SASL, with
// both (Kafka's SASL_SSL) or with neither (PLAINTEXT, the zero value). The
// same value configures the source (WithSecurity), the sink (WithSecurity),
// a txn.Pool or any other franz-go client (ClientOpts).
type Security struct {
	// TLS, when not nil, encrypts every connection.
	TLS *TLS
	// SASL, when not nil, authenticates every connection.
	SASL *SASL
}

// TLS configures encrypted connections (Kafka: security.protocol SSL or
// SASL_SSL). With every field zero it trusts the system's roots and checks
// the broker's name against the address dialled.
type TLS struct {
	// Config, when not nil, is the base configuration; it is cloned, and
	// the files below add to the clone.
	Config *tls.Config
	// CAFile is a PEM file of the certificates that sign the brokers'
	// (Kafka: ssl.truststore.location). Default: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate chain and key,
	// for brokers that authenticate clients by certificate (Kafka:
	// ssl.keystore.location; ssl.client.auth=required on the broker). Both
	// or neither.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry.
	// Default: the host of each address dialled.
	ServerName string
}

// SASL mechanisms that Security builds from a user and password or a token
// function (Kafka: sasl.mechanism).
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
)

// SASL configures authentication (Kafka: security.protocol SASL_PLAINTEXT
// or SASL_SSL, with sasl.mechanism and sasl.jaas.config).
type SASL struct {
	// Mechanism is SASLPlain, SASLScramSHA256, SASLScramSHA512 or
	// SASLOAuthBearer (case does not matter); ignored when Custom is set.
	Mechanism string
	// User and Password are the credentials of PLAIN and SCRAM.
	User     string
	Password Secret
	// Token returns the OAUTHBEARER token; it is called for every new
	// connection and every re-authentication, so it may rotate the token.
	Token func(context.Context) (oauth.Auth, error) `json:"-"`
	// Custom, when not nil, is a franz-go mechanism used as it is (AWS
	// MSK IAM, say). The principal in error messages is then unknown.
	Custom sasl.Mechanism `json:"-"`
}

// Secret is a string that never shows itself: printed with any verb,
// logged with slog, or marshalled to JSON or text, it reads [redacted].
// Convert it with string(s) where the value itself is needed.
type Secret string

const redacted = "[redacted]"

// String returns [redacted].
func (Secret) String() string { return redacted }

// GoString returns [redacted], for %#v.
func (Secret) GoString() string { return redacted }

// LogValue returns [redacted], for slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText returns [redacted], for encoding/json and other encoders.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// ErrInvalidSecurity is wrapped by every error Security reports about
// itself (together with connector.ErrInvalidConfiguration): an unknown
// mechanism, missing credentials, a certificate file that cannot be read.
var ErrInvalidSecurity = errors.New("invalid connection security")

// ClientOpts returns the franz-go options that make a client connect as s
// says, for clients splitflow does not make itself (txn.WithClientOpts, an
// admin client). It reads the certificate files now, so an unreadable or
// malformed one is an error here, at start, and not a failed dial later.
// Errors wrap ErrInvalidSecurity and connector.ErrInvalidConfiguration and
// never hold the password.
func (s Security) ClientOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	var errs []error
	if s.TLS != nil {
		c, err := s.TLS.config()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(c))
		}
	}
	if s.SASL != nil {
		m, err := s.SASL.mechanism()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.SASL(m))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w: %w", err, ErrInvalidSecurity, connector.ErrInvalidConfiguration)
	}
	return opts, nil
}

// Principal is the Kafka principal the brokers will see for s, as ACLs
// name it: User:<name> for PLAIN and SCRAM, User:ANONYMOUS without SASL
// or client certificate. It is "" when only the broker can tell (a client
// certificate, OAUTHBEARER, a custom mechanism): the broker maps those by
// rules the client does not know.
func (s Security) Principal() string {
	if s.SASL != nil {
		switch s.SASL.mechanismName() {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
			if s.SASL.Custom == nil {
				return "User:" + s.SASL.User
			}
		}
		return ""
	}
	if s.TLS != nil && (s.TLS.CertFile != "" || s.TLS.Config != nil && (len(s.TLS.Config.Certificates) > 0 || s.TLS.Config.GetClientCertificate != nil)) {
		return ""
	}
	return "User:ANONYMOUS"
}

func (t *TLS) config() (*tls.Config, error) {
	var c *tls.Config
	if t.Config != nil {
		c = t.Config.Clone()
	} else {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	var errs []error
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the TLS CA file: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("TLS CA file %s holds no PEM certificate", t.CAFile))
			}
			c.RootCAs = pool
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The key's bytes are never in this error: crypto/tls names
			// only what it could not parse.
			errs = append(errs, fmt.Errorf("load the TLS client certificate %s and key %s: %w", t.CertFile, t.KeyFile, err))
		} else {
			c.Certificates = append(c.Certificates, cert)
		}
	case t.CertFile != "" || t.KeyFile != "":
		errs = append(errs, errors.New("a TLS client certificate needs both a certificate file and a key file"))
	}
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	return c, errors.Join(errs...)
}

// mechanismName is Mechanism as the connection settings (mechanism) and
// the principal (Principal) read it: upper case, without spaces around.
func (a *SASL) mechanismName() string { return strings.ToUpper(strings.TrimSpace(a.Mechanism)) }

func (a *SASL) mechanism() (sasl.Mechanism, error) {
	if a.Custom != nil {
		return a.Custom, nil
	}
	mech := a.mechanismName()
	switch mech {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		var errs []error
		if a.User == "" {
			errs = append(errs, fmt.Errorf("SASL %s needs a user", mech))
		}
		if a.Password == "" {
			errs = append(errs, fmt.Errorf("SASL %s needs a password", mech))
		}
		if a.Token != nil {
			errs = append(errs, fmt.Errorf("SASL %s takes a user and password, not a token function", mech))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		switch mech {
		case SASLPlain:
			return plain.Auth{User: a.User, Pass: string(a.Password)}.AsMechanism(), nil
		case SASLScramSHA256:
			return scram.Auth{User: a.User, Pass: string(a.Password)}.AsSha256Mechanism(), nil
		default:
			return scram.Auth{User: a.User, Pass: string(a.Password)}.AsSha512Mechanism(), nil
		}
	case SASLOAuthBearer:
		if a.Token == nil {
			return nil, errors.New("SASL OAUTHBEARER needs a token function")
		}
		if a.User != "" || a.Password != "" {
			return nil, errors.New("SASL OAUTHBEARER takes a token function, not a user and password")
		}
		return oauth.Oauth(a.Token), nil
	case "":
		return nil, fmt.Errorf("no SASL mechanism; choose %s, %s, %s or %s", SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer)
	default:
		// a.Mechanism may be anything the user typed; it holds no secret.
		return nil, fmt.Errorf("unknown SASL mechanism %q; choose %s, %s, %s or %s", a.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer)
	}
}

// WithSecurity makes every client of the source or sink connect as sec
// says (TLS, SASL). Its problems (an unknown mechanism, an unreadable
// certificate file) are NewSource's and NewSink's configuration errors.
// Options given with WithClientOpts come after it and win where they
// overlap; a later WithSecurity replaces an earlier one. The principal it
// names (Security.Principal) is the one authorization errors report.
// Default: plaintext, no authentication.
func WithSecurity(sec Security) Option {
	apply := func(opts *[]kgo.Opt, errs *[]error, sec *Security) {
		o, err := sec.ClientOpts()
		if err != nil {
			*errs = append(*errs, err)
			return
		}
		*opts = o // a later WithSecurity replaces an earlier one
	}
	return commonOption{
		src: func(c *sourceConfig) { c.security = sec; apply(&c.securityOpts, &c.optErrs, &sec) },
		snk: func(c *sinkConfig) { c.security = sec; apply(&c.securityOpts, &c.optErrs, &sec) },
	}
}

// withSecurityFirst puts the security options before the user's client
// options, so WithClientOpts wins whatever the order of the options.
func withSecurityFirst(sec, user []kgo.Opt) []kgo.Opt {
	if len(sec) == 0 {
		return user
	}
	return append(append([]kgo.Opt(nil), sec...), user...)
}
