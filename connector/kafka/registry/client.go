package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/sr"
)

// Client is a connection to one schema registry (one or more URLs of the
// same registry) that serializers and deserializers share. It is safe for
// concurrent use. Its credentials stay inside it: String, LogValue and
// every error name the registry by its URLs only.
type Client struct {
	sr   *sr.Client
	name string // "schema registry http://a,http://b", for messages
	cfg  clientConfig
}

// ClientOption configures a Client.
type ClientOption interface{ apply(*clientConfig) }

type clientOptionFunc func(*clientConfig)

func (f clientOptionFunc) apply(c *clientConfig) { f(c) }

type clientConfig struct {
	urls           []string
	user, pass     string
	basic          bool
	bearer         string
	tls            *tls.Config
	requestTimeout time.Duration
	attempts       int
	backoff        time.Duration
	maxBackoff     time.Duration
}

func defaultClientConfig() clientConfig {
	return clientConfig{requestTimeout: 10 * time.Second, attempts: 5, backoff: 250 * time.Millisecond, maxBackoff: 4 * time.Second}
}

// WithURLs sets the registry's base URLs (Confluent: schema.registry.url),
// tried in order on each request: http or https, with the path of the
// Confluent-compatible API (Apicurio Registry serves it at
// /apis/ccompat/v7). A URL may not carry credentials (user:pass@): they
// would reach logs and errors; use WithBasicAuth. Required.
func WithURLs(urls ...string) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.urls = append(c.urls, urls...) })
}

// WithBasicAuth authenticates every request with HTTP basic auth
// (Confluent: basic.auth.user.info). Default: none. Excludes
// WithBearerToken.
func WithBasicAuth(user, password string) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.user, c.pass, c.basic = user, password, true })
}

// WithBearerToken authenticates every request with an OAuth bearer token
// (Confluent: bearer.auth.token). Default: none. Excludes WithBasicAuth.
func WithBearerToken(token string) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.bearer = token })
}

// WithTLS sets the TLS configuration of https URLs: the CAs to trust
// (RootCAs), a client certificate for mutual TLS (Certificates). Default:
// the system's roots, no client certificate.
func WithTLS(cfg *tls.Config) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.tls = cfg })
}

// WithRequestTimeout bounds each HTTP request. Default: 10s.
func WithRequestTimeout(d time.Duration) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.requestTimeout = d })
}

// WithRetries sets how often a request that could not reach the registry,
// or that it answered with a server error (5xx) or 429, is tried in all,
// and the wait before the first retry, doubled on each further one up to
// 4s. Default: 5 attempts, 250ms. A request the registry refused (4xx) is
// not retried. When the attempts run out the error names the registry and
// wraps ErrUnavailable.
func WithRetries(attempts int, backoff time.Duration) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.attempts, c.backoff = attempts, backoff })
}

func (c *clientConfig) validate() error {
	var errs []error
	if len(c.urls) == 0 {
		errs = append(errs, errors.New("no registry URL (WithURLs)"))
	}
	for i, u := range c.urls {
		p, err := url.Parse(u)
		switch {
		case err != nil:
			// url's error quotes the URL, which may hold a password.
			errs = append(errs, fmt.Errorf("registry URL #%d does not parse", i+1))
		case p.User != nil:
			errs = append(errs, fmt.Errorf("registry URL %s carries credentials; pass them with WithBasicAuth, which keeps them out of logs and errors", p.Redacted()))
		case p.Scheme != "http" && p.Scheme != "https" || p.Host == "":
			errs = append(errs, fmt.Errorf("registry URL %q is not an http or https URL with a host", u))
		}
	}
	if c.basic && c.bearer != "" {
		errs = append(errs, errors.New("WithBasicAuth and WithBearerToken exclude each other"))
	}
	if c.requestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("request timeout %s is not positive (WithRequestTimeout)", c.requestTimeout))
	}
	if c.attempts < 1 || c.backoff < 0 {
		errs = append(errs, fmt.Errorf("retries: %d attempts and backoff %s; want at least 1 attempt and no negative backoff (WithRetries)", c.attempts, c.backoff))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("schema registry client: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	return nil
}

// NewClient returns a client of the registry the options name. It checks
// the options and fails with every problem it finds, in an error wrapping
// connector.ErrInvalidConfiguration; it does not contact the registry.
func NewClient(opts ...ClientOption) (*Client, error) {
	cfg := defaultClientConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.tls != nil {
		tr.TLSClientConfig = cfg.tls.Clone()
	}
	srOpts := []sr.ClientOpt{
		sr.URLs(cfg.urls...),
		sr.HTTPClient(&http.Client{Transport: tr, Timeout: cfg.requestTimeout}),
		sr.UserAgent("splitflow"),
	}
	if cfg.basic {
		srOpts = append(srOpts, sr.BasicAuth(cfg.user, cfg.pass))
	}
	if cfg.bearer != "" {
		srOpts = append(srOpts, sr.BearerToken(cfg.bearer))
	}
	cl, err := sr.NewClient(srOpts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w: %w", err, connector.ErrInvalidConfiguration)
	}
	return &Client{sr: cl, name: "schema registry " + strings.Join(cfg.urls, ","), cfg: cfg}, nil
}

// String names the registry by its URLs, never its credentials.
func (c *Client) String() string { return c.name }

// GoString is String, so %#v prints no credentials either.
func (c *Client) GoString() string { return c.name }

// LogValue is String, so slog prints no credentials.
func (c *Client) LogValue() slog.Value { return slog.StringValue(c.name) }

// ErrUnavailable is wrapped by errors of requests that could not reach the
// registry, or that it answered with server errors, on every attempt. It
// wraps kafka.ErrDeserializerUnavailable, so a source whose deserializer
// meets it fails the job instead of treating the record as a bad one.
var ErrUnavailable = fmt.Errorf("schema registry unavailable: %w", kafka.ErrDeserializerUnavailable)

// Error is a failed registry request: which registry, what was asked
// (Op, and the Subject or schema ID it was about), and why.
type Error struct {
	// Registry names the registry by its URLs.
	Registry string
	// Op is what was asked: "look up", "register", "fetch schema".
	Op      string
	Subject string // "" when the request names no subject
	ID      int    // 0 when the request names no schema id
	// Status is the HTTP status of the registry's answer; 0 when none came.
	Status int
	// Unavailable is true when no attempt reached an answer the registry
	// meant (no connection, timeouts, 5xx, 429): Err then wraps
	// ErrUnavailable.
	Unavailable bool
	Err         error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Registry)
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Subject != "" {
		fmt.Fprintf(&b, " subject %q", e.Subject)
	}
	if e.ID != 0 {
		fmt.Fprintf(&b, " schema id %d", e.ID)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// NotFound reports whether the registry answered that the subject,
// version or schema id does not exist.
func (e *Error) NotFound() bool { return e.Status == http.StatusNotFound }

// do runs fn, retrying what may pass (no answer, 5xx, 429) with backoff,
// and wraps the last error in an *Error.
func (c *Client) do(ctx context.Context, op, subject string, id int, fn func(context.Context) error) error {
	wait := c.cfg.backoff
	var last error
	status := 0
	for attempt := 1; ; attempt++ {
		last = fn(ctx)
		if last == nil {
			return nil
		}
		status = 0
		var re *sr.ResponseError
		retriable := true
		if errors.As(last, &re) {
			status = re.StatusCode
			retriable = status >= 500 || status == http.StatusTooManyRequests
		}
		if !retriable || ctx.Err() != nil {
			break
		}
		if attempt >= c.cfg.attempts {
			return &Error{Registry: c.name, Op: op, Subject: subject, ID: id, Status: status, Unavailable: true,
				Err: fmt.Errorf("%w after %d attempts: %w", ErrUnavailable, attempt, last)}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &Error{Registry: c.name, Op: op, Subject: subject, ID: id, Status: status, Unavailable: true,
				Err: fmt.Errorf("%w: gave up after %d attempts (%w): %w", ErrUnavailable, attempt, ctx.Err(), last)}
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.maxBackoff)
	}
	return &Error{Registry: c.name, Op: op, Subject: subject, ID: id, Status: status, Err: last}
}

// schemaByID fetches the schema the registry assigned id.
func (c *Client) schemaByID(ctx context.Context, id int) (sr.Schema, error) {
	var s sr.Schema
	err := c.do(ctx, "fetch", "", id, func(ctx context.Context) error {
		var err error
		s, err = c.sr.SchemaByID(ctx, id)
		return err
	})
	return s, err
}

// lookUp returns the id and version of schema under subject, which must
// be registered there already.
func (c *Client) lookUp(ctx context.Context, subject string, s sr.Schema) (sr.SubjectSchema, error) {
	var got sr.SubjectSchema
	err := c.do(ctx, "look up the schema under", subject, 0, func(ctx context.Context) error {
		var err error
		got, err = c.sr.LookupSchema(ctx, subject, s)
		return err
	})
	return got, err
}

// register registers schema under subject (the registry checks the
// subject's compatibility rule) and returns its id and version; a schema
// registered already keeps them.
func (c *Client) register(ctx context.Context, subject string, s sr.Schema) (sr.SubjectSchema, error) {
	var got sr.SubjectSchema
	err := c.do(ctx, "register the schema under", subject, 0, func(ctx context.Context) error {
		var err error
		got, err = c.sr.CreateSchema(ctx, subject, s)
		return err
	})
	return got, err
}

// resolve registers schema under subject when autoRegister holds, and
// looks it up otherwise, saying how to fix a schema not registered yet.
func (c *Client) resolve(ctx context.Context, subject string, s sr.Schema, autoRegister bool) (sr.SubjectSchema, error) {
	if autoRegister {
		return c.register(ctx, subject, s)
	}
	got, err := c.lookUp(ctx, subject, s)
	var re *Error
	if errors.As(err, &re) && re.NotFound() {
		err = fmt.Errorf("%w; register it first (or give WithAutoRegister)", err)
	}
	return got, err
}

// schemaByVersion fetches version of subject: a schema reference's.
func (c *Client) schemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	var got sr.SubjectSchema
	err := c.do(ctx, fmt.Sprintf("fetch version %d of", version), subject, 0, func(ctx context.Context) error {
		var err error
		got, err = c.sr.SchemaByVersion(ctx, subject, version)
		return err
	})
	return got, err
}

// fetchContext bounds a fetch a deserializer makes on a record's behalf,
// which has no context of its own: every attempt WithRetries allows.
func (c *Client) fetchContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(c.cfg.attempts)*(c.cfg.requestTimeout+c.cfg.maxBackoff))
}
