package status

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Option configures a status server (runtime.WithHTTP takes them).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is where the server listens (both addr and listener empty means
// nothing to serve on), the token that allows the endpoints that change
// the job, its TLS, limits and host names.
type config struct {
	addr        string
	listener    net.Listener  // WithListener
	token       string        // WithToken; "" disables the endpoints that change the job
	tls         *tls.Config   // WithTLS; nil serves plain HTTP
	readTimeout time.Duration // WithReadTimeout; 0: defaultReadTimeout
	maxConns    int           // WithMaxConns; 0: defaultMaxConns
	// allowedHosts is WithAllowedHosts: Host names answered besides
	// loopback names, IP addresses and the host of addr.
	allowedHosts []string
}

// The server's limits besides WithReadTimeout and WithMaxConns: no request
// of it needs more.
const (
	defaultReadTimeout = 10 * time.Second
	defaultMaxConns    = 64
	// maxHeaderBytes bounds a request's headers (net/http allows a little
	// more for its own bookkeeping).
	maxHeaderBytes = 16 << 10
	// maxBodyBytes bounds a request's body; a savepoint request is the
	// only one with a body.
	maxBodyBytes = 64 << 10
)

// minTokenLen is the shortest token WithToken takes: 16 random characters
// are beyond guessing over a network, fewer invite it.
const minTokenLen = 16

// WithListener serves on a listener the caller has bound instead of
// listening on an address, for a program that wants its bind error before
// it does anything else (or a test that wants the port before the job
// starts); give no address with it (runtime.WithHTTP("", ...)). The server
// owns l from New on: it closes l when it is closed, and New closes l when
// it fails, so l is closed on every path (runtime's Execute closes it
// before returning, whatever the outcome, also when the job is refused); l
// must not be used by anything else. With WithTLS, l is a plain TCP
// listener and the server adds the TLS. Default: none, the server listens
// on its address.
func WithListener(l net.Listener) Option {
	return optionFunc(func(c *config) { c.listener = l })
}

// WithToken allows the server's endpoints that change the job (POST
// /api/v1/job/stop, POST /api/v1/savepoints, and every such endpoint to
// come) to a request that carries the header "Authorization: Bearer
// <token>". Without a token they answer 401 Unauthorized (with
// WWW-Authenticate: Bearer); with a wrong one, 403 Forbidden. The
// read-only endpoints (GET) need no token. The token is compared in
// constant time and never logged or shown in the status; it must have at
// least 16 characters, all letters, digits or "-._~+/" (CheckToken; make
// one with `openssl rand -hex 32`). Over plain HTTP the token crosses the
// network readable: serve with WithTLS unless the server listens on
// loopback. Default: no token, and every endpoint that changes the job
// answers 403 Forbidden.
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token = token })
}

// WithTLS serves over HTTPS with cfg (which must hold a certificate:
// Certificates or GetCertificate); cfg is cloned, so later changes to it
// have no effect. Default: plain HTTP.
func WithTLS(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		c.tls = nil
		if cfg != nil {
			c.tls = cfg.Clone()
		}
	})
}

// WithReadTimeout bounds how long the server waits for one whole request,
// headers and body (its headers alone: the shorter of d and 5s); a client
// slower than that is cut off. A client that trickles a request a byte at
// a time (slowloris) would otherwise hold its connection for as long as it
// likes. Every request the server takes is small (a savepoint request's
// body is at most 64 KiB), so a client on a working network sends it in
// well under a second. Default: 10s.
func WithReadTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.readTimeout = d })
}

// WithMaxConns caps the connections the server holds at once, idle
// keep-alive ones included. A connection beyond the cap is closed as soon
// as it is accepted, unanswered, and the refusal logged (at most once a
// minute): clients that open many connections would otherwise take the
// file handles the job needs for Kafka and its checkpoints. A Prometheus
// scraper, a probe or two and a few browsers need a handful. Default: 64.
func WithMaxConns(n int) Option {
	return optionFunc(func(c *config) { c.maxConns = n })
}

// WithAllowedHosts adds host names the server answers to. A request is
// answered only when its Host header names the server: a loopback name
// (localhost, *.localhost), an IP address (an address in the URL cannot be
// rebound), the host of the server's address (runtime.WithHTTP's), or one
// of names (compared without case, port or trailing dot). Any other Host
// is answered 421 Misdirected Request on every route, GET included: a web
// page on another site that points its own name at this address (DNS
// rebinding) sends its own name, and would otherwise read the job's
// status and metrics from a browser that reaches a server the attacker
// does not. Add the names clients use: a DNS name or Kubernetes Service
// name of the server, the name a reverse proxy forwards. Default: none, so
// only loopback names, IP addresses and the address's host are answered.
func WithAllowedHosts(names ...string) Option {
	return optionFunc(func(c *config) { c.allowedHosts = append(c.allowedHosts, names...) })
}

// validate is the one place the options are checked; New calls it.
func (c *config) validate() error {
	serves := c.addr != "" || c.listener != nil
	switch {
	case c.addr != "" && c.listener != nil:
		return fmt.Errorf("status.WithListener with the address %q: the server serves on the listener, so give no address (\"\")", c.addr)
	case c.token != "" && !serves:
		return errors.New("status.WithToken without an address or status.WithListener: there is no status server to protect")
	case c.tls != nil && !serves:
		return errors.New("status.WithTLS without an address or status.WithListener: there is no status server to encrypt")
	case len(c.allowedHosts) > 0 && !serves:
		return errors.New("status.WithAllowedHosts without an address or status.WithListener: there is no status server to name")
	case !serves:
		return errors.New("a status server without an address or status.WithListener: there is nothing to serve on; give an address (host:port, port 0 for a free one)")
	case c.readTimeout < 0:
		return fmt.Errorf("status.WithReadTimeout(%s): the read timeout must be positive (or 0 for the default, %s)", c.readTimeout, defaultReadTimeout)
	case c.maxConns < 0:
		return fmt.Errorf("status.WithMaxConns(%d): the cap must be positive (or 0 for the default, %d)", c.maxConns, defaultMaxConns)
	}
	for _, n := range c.allowedHosts {
		if n == "" || strings.ContainsAny(n, ":/[]@ *") {
			return fmt.Errorf("status.WithAllowedHosts(%q): give a host name alone, such as status.example.com (no scheme, port or wildcard; IP addresses need no entry)", n)
		}
	}
	// The token and the certificate are checked each on its own: a good
	// token does not make a TLS config without a certificate servable.
	if c.token != "" {
		if err := CheckToken(c.token); err != nil {
			return err
		}
	}
	if c.tls != nil && len(c.tls.Certificates) == 0 && c.tls.GetCertificate == nil && c.tls.GetConfigForClient == nil {
		return errors.New("the status server's TLS config (status.WithTLS) has no certificate: set Certificates or GetCertificate")
	}
	return nil
}

// CheckToken reports what makes token unfit for WithToken (too short, a
// character a Bearer header cannot carry), or nil; New checks so, and a
// program that reads the token from its users calls it to report a bad
// one with its other settings. The error never holds the token.
func CheckToken(token string) error {
	switch {
	case len(token) < minTokenLen:
		// The length is no secret worth keeping; the token is never shown.
		return fmt.Errorf("the status server token (status.WithToken) has %d characters, fewer than %d; make a random one, e.g. `openssl rand -hex 32`", len(token), minTokenLen)
	case !isBearerToken(token):
		return errors.New("the status server token (status.WithToken) holds a character a Bearer token cannot carry; use letters, digits and - . _ ~ + /")
	}
	return nil
}

// isBearerToken says whether s is an RFC 6750 token68 (letters, digits,
// "-._~+/", then any "="), the only form an Authorization: Bearer header
// carries unchanged.
func isBearerToken(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for _, r := range body {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-._~+/", r):
		default:
			return false
		}
	}
	return true
}
