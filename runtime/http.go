package runtime

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpConfig is where the status server listens (both addr and listener
// empty means no server), the token that allows the endpoints that change
// the job, and the server's TLS.
type httpConfig struct {
	addr        string
	listener    net.Listener
	token       string        // WithHTTPToken; "" disables the endpoints that change the job
	tls         *tls.Config   // WithHTTPTLS; nil serves plain HTTP
	readTimeout time.Duration // WithHTTPReadTimeout; 0: defaultHTTPReadTimeout
	maxConns    int           // WithHTTPMaxConns; 0: defaultHTTPMaxConns
	// allowedHosts is WithHTTPAllowedHosts: Host names answered besides
	// loopback names, IP addresses and the host of addr.
	allowedHosts []string
}

// minHTTPTokenLen is the shortest token WithHTTPToken takes: 16 random
// characters are beyond guessing over a network, fewer invite it.
const minHTTPTokenLen = 16

// validate checks the status server's options (config.validate calls it).
func (h *httpConfig) validate() error {
	serves := h.addr != "" || h.listener != nil
	switch {
	case h.token != "" && !serves:
		return invalidGraph("WithHTTPToken without WithHTTP or WithHTTPListener: there is no status server to protect")
	case h.tls != nil && !serves:
		return invalidGraph("WithHTTPTLS without WithHTTP or WithHTTPListener: there is no status server to encrypt")
	case h.readTimeout < 0:
		return invalidGraph("WithHTTPReadTimeout(%s): the read timeout must be positive (or 0 for the default, %s)", h.readTimeout, defaultHTTPReadTimeout)
	case h.maxConns < 0:
		return invalidGraph("WithHTTPMaxConns(%d): the cap must be positive (or 0 for the default, %d)", h.maxConns, defaultHTTPMaxConns)
	case len(h.allowedHosts) > 0 && !serves:
		return invalidGraph("WithHTTPAllowedHosts without WithHTTP or WithHTTPListener: there is no status server to name")
	}
	for _, n := range h.allowedHosts {
		if n == "" || strings.ContainsAny(n, ":/[]@ *") {
			return invalidGraph("WithHTTPAllowedHosts(%q): give a host name alone, such as status.example.com (no scheme, port or wildcard; IP addresses need no entry)", n)
		}
	}
	// The token and the certificate are checked each on its own: a good
	// token does not make a TLS config without a certificate servable.
	if h.token != "" {
		if err := CheckHTTPToken(h.token); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidGraph, err)
		}
	}
	if h.tls != nil && len(h.tls.Certificates) == 0 && h.tls.GetCertificate == nil && h.tls.GetConfigForClient == nil {
		return invalidGraph("the status server's TLS config (WithHTTPTLS) has no certificate: set Certificates or GetCertificate")
	}
	return nil
}

// CheckHTTPToken reports what makes token unfit for WithHTTPToken (too
// short, a character a Bearer header cannot carry), or nil; Execute checks
// so, and a program that reads the token from its users calls it to report
// a bad one with its other settings. The error never holds the token.
func CheckHTTPToken(token string) error {
	switch {
	case len(token) < minHTTPTokenLen:
		// The length is no secret worth keeping; the token is never shown.
		return fmt.Errorf("the status server token (WithHTTPToken) has %d characters, fewer than %d; make a random one, e.g. `openssl rand -hex 32`", len(token), minHTTPTokenLen)
	case !isBearerToken(token):
		return errors.New("the status server token (WithHTTPToken) holds a character a Bearer token cannot carry; use letters, digits and - . _ ~ + /")
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

// WithHTTP serves the job's status over HTTP on addr (host:port; ":0" or
// "127.0.0.1:0" picks a free port, see Environment.HTTPAddr) for as long as
// Execute runs, in the spirit of Flink's REST endpoint and web UI:
//
//   - GET /metrics: the job's Prometheus metrics (text exposition format).
//   - GET /healthz: 200 while the process serves.
//   - GET /readyz: 200 while the job runs and, with checkpoints, has
//     completed one since its newest restart (or since the start); 503
//     otherwise (not started, restarting, crash-looping, ended), the body
//     saying why.
//   - GET /api/v1/job: Environment.Status as JSON (JobStatus).
//   - GET /: a self-contained page that draws the job graph with per-task
//     throughput and backpressure, the checkpoint history, restarts and the
//     last failure, refreshed every second from /api/v1/job.
//   - POST /api/v1/job/stop: stops the job gracefully, as cancelling
//     Execute's context does (202 Accepted; Execute then returns nil once
//     the job has drained). It changes the job, so it needs the token of
//     WithHTTPToken.
//   - POST /api/v1/savepoints: takes a savepoint (Environment.TriggerSavepoint),
//     or with {"stop": true} stops the job with one (StopWithSavepoint);
//     body {"target": "DIR or s3://bucket/prefix", "stop": false}, empty
//     for WithSavepointDir. The target must lie under WithSavepointDir
//     (a relative one is taken under it) unless the job sets
//     WithSavepointTargetsAnywhere; one outside, or with a ".." segment,
//     is refused with 400. It answers when the savepoint is complete
//     (a stop: when the job has ended), 200 with {"path", "checkpoint",
//     "takenAt"}; errors as {"error": "..."} with 400 (bad body), 409
//     (refused: checkpoints off, stopping, restarting, no target), 503 (no
//     job) or 500 (failed). It needs the token, as stop does.
//
// Every route answers only a request whose Host names the server
// (localhost, an IP address, addr's host, WithHTTPAllowedHosts); any other
// gets 421 Misdirected Request, which keeps a page of another site from
// reading the status through DNS rebinding. Once bound, the server logs
// the address it listens on ("status server listening", the port
// resolved when addr asked for port 0).
//
// The GET endpoints are read-only and open to whoever reaches the address.
// Every other endpoint changes the job and is refused unless the server
// has a token (WithHTTPToken) and the request carries it; see there. The
// address is used as given, as net.Listen takes it: ":8081" listens on
// every interface. Bind a loopback or otherwise private address unless
// the metrics are meant to be public, and use WithHTTPTLS when a token
// crosses a network.
//
// Execute binds addr after the graph is validated and before any task
// starts, and fails at once if it cannot (an address in use); it stops the
// server when the job has ended, before it returns. Default: no server.
func WithHTTP(addr string) Option {
	return optionFunc(func(c *config) { c.http.addr, c.http.listener = addr, nil })
}

// WithHTTPListener is WithHTTP on a listener the caller has bound, for a
// program that wants its bind error before it does anything else (or a
// test that wants the port before Execute). Execute serves on l while the job
// runs and closes it before returning, whatever the outcome; l must not be
// used by anything else. With WithHTTPTLS, l is a plain TCP listener and
// Execute adds the TLS.
func WithHTTPListener(l net.Listener) Option {
	return optionFunc(func(c *config) { c.http.addr, c.http.listener = "", l })
}

// WithHTTPToken allows the status server's endpoints that change the job
// (POST /api/v1/job/stop, and every such endpoint to come) to a request
// that carries the header "Authorization: Bearer <token>". Without a
// token they answer 401 Unauthorized (with WWW-Authenticate: Bearer); with
// a wrong one, 403 Forbidden. The read-only endpoints (GET) need no token.
// The token is compared in constant time and never logged or shown in the
// status; it must have at least 16 characters, all letters, digits or
// "-._~+/" (make one with `openssl rand -hex 32`). Over plain HTTP the
// token crosses the network readable: serve with WithHTTPTLS unless the
// server listens on loopback. Default: no token, and every endpoint that
// changes the job answers 403 Forbidden.
func WithHTTPToken(token string) Option {
	return optionFunc(func(c *config) { c.http.token = token })
}

// WithHTTPTLS serves the status server over HTTPS with cfg (which must hold
// a certificate: Certificates or GetCertificate); cfg is cloned, so later
// changes to it have no effect. Default: plain HTTP.
func WithHTTPTLS(cfg *tls.Config) Option {
	return optionFunc(func(c *config) {
		c.http.tls = nil
		if cfg != nil {
			c.http.tls = cfg.Clone()
		}
	})
}

// WithHTTPReadTimeout bounds how long the status server waits for one
// whole request, headers and body (its headers alone: the shorter of d
// and 5s); a client slower than that is cut off. A client that trickles
// a request a byte at a time (slowloris) would otherwise hold its
// connection for as long as it likes. Every request the server takes is
// small (a savepoint request's body is at most 64 KiB), so a client on a
// working network sends it in well under a second. Default: 10s.
func WithHTTPReadTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.http.readTimeout = d })
}

// WithHTTPMaxConns caps the connections the status server holds at once,
// idle keep-alive ones included. A connection beyond the cap is closed as
// soon as it is accepted, unanswered, and the refusal logged (at most
// once a minute): clients that open many connections would otherwise take
// the file handles the job needs for Kafka and its checkpoints. A
// Prometheus scraper, a probe or two and a few browsers need a handful.
// Default: 64.
func WithHTTPMaxConns(n int) Option {
	return optionFunc(func(c *config) { c.http.maxConns = n })
}

// WithHTTPAllowedHosts adds host names the status server answers to. A
// request is answered only when its Host header names the server: a
// loopback name (localhost, *.localhost), an IP address (an address in
// the URL cannot be rebound), the host given to WithHTTP, or one of names
// (compared without case, port or trailing dot). Any other Host is answered
// 421 Misdirected Request on every route, GET included: a web page on
// another site that points its own name at this address (DNS rebinding)
// sends its own name, and would otherwise read the job's status and
// metrics from a browser that reaches a server the attacker does not. Add
// the names clients use: a DNS name or Kubernetes Service name of the
// server, the name a reverse proxy forwards. Default: none, so only
// loopback names, IP addresses and WithHTTP's host are answered.
func WithHTTPAllowedHosts(names ...string) Option {
	return optionFunc(func(c *config) { c.http.allowedHosts = append(c.http.allowedHosts, names...) })
}

// The status server's limits besides WithHTTPReadTimeout and
// WithHTTPMaxConns: no request of it needs more.
const (
	defaultHTTPReadTimeout = 10 * time.Second
	defaultHTTPMaxConns    = 64
	// httpMaxHeaderBytes bounds a request's headers (net/http allows a
	// little more for its own bookkeeping).
	httpMaxHeaderBytes = 16 << 10
	// httpMaxBodyBytes bounds a request's body; a savepoint request is
	// the only one with a body.
	httpMaxBodyBytes = 64 << 10
)

// HTTPAddr returns the address the status server listens on (the port
// resolved when WithHTTP was given port 0), or "" when no server is
// running: before Execute has bound it, after Execute has returned, or
// without WithHTTP. Safe from any goroutine.
func (env *Environment) HTTPAddr() string {
	if s := env.httpServer.Load(); s != nil {
		return s.ln.Addr().String()
	}
	return ""
}

// statusServer is the HTTP server of one Execute call.
type statusServer struct {
	srv    *http.Server
	ln     net.Listener
	served chan struct{} // closed when Serve has returned
}

// startHTTP binds and starts the status server if the options ask for
// one; nil, nil otherwise. stop is what POST /api/v1/job/stop calls: it
// cancels the context the job runs under.
func (env *Environment) startHTTP(stop func()) (*statusServer, error) {
	hc := env.cfg.http
	ln := hc.listener
	if ln == nil {
		if hc.addr == "" {
			return nil, nil
		}
		var err error
		ln, err = net.Listen("tcp", hc.addr)
		if err != nil {
			return nil, fmt.Errorf("status HTTP server (WithHTTP %q) cannot listen: %w; choose a free address or port 0", hc.addr, err)
		}
	}
	log := env.cfg.cp.logger
	if log == nil {
		log = slog.Default()
	}
	addr := ln.Addr()
	// The cap counts TCP connections, below TLS: a client that never
	// finishes its handshake holds one too.
	ln = newCappedListener(ln, cmp.Or(hc.maxConns, defaultHTTPMaxConns), log)
	// The bound address, not the one asked for: with port 0 the log is
	// where an operator learns the port.
	scheme := "http"
	if hc.tls != nil {
		scheme = "https"
	}
	log.Info("splitflow: status server listening", "addr", addr.String(), "url", scheme+"://"+addr.String()+"/")
	if hc.tls != nil {
		ln = tls.NewListener(ln, hc.tls)
	} else if hc.token != "" && !isLoopback(addr) {
		log.Warn("splitflow: the status server takes its token over plain HTTP on an address other hosts reach; anyone on the path can read it (serve with WithHTTPTLS or bind loopback)",
			"addr", addr.String())
	}
	readTimeout := cmp.Or(hc.readTimeout, defaultHTTPReadTimeout)
	s := &statusServer{
		srv: &http.Server{
			Handler: hostChecked(newStatusHandler(env.Status, env.gatherer(), jobControl{token: hc.token, stop: stop, savepoint: env.savepoint, log: log,
				savepointRoot: env.cfg.cp.savepointDir, savepointAnywhere: env.cfg.cp.savepointAnywhere}), newHostPolicy(hc), log),
			// Bounds what a slow or idle client can hold; every response
			// is small and computed at once (a savepoint's answer lifts
			// its deadlines, see serveSavepoint).
			ReadHeaderTimeout: min(5*time.Second, readTimeout),
			ReadTimeout:       readTimeout,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       time.Minute,
			MaxHeaderBytes:    httpMaxHeaderBytes,
			// A failed TLS handshake (a plain-HTTP client, an untrusted
			// certificate) is the client's problem: a debug line, not a
			// line per try on the process's stderr.
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		ln:     ln,
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		// Serve returns ErrServerClosed after stopHTTP. Any other error
		// (the listener failing) leaves the job running without its
		// status endpoints, which is worth a line but not a failed job.
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("splitflow: status HTTP server stopped; the job goes on without it", "addr", addr.String(), "err", err)
		}
	}()
	env.httpServer.Store(s)
	return s, nil
}

// cappedListener holds at most cap connections at once: a connection
// accepted beyond them is closed at once. Closing rather than leaving it
// in the kernel's backlog answers the client (its connection ends) and
// keeps the backlog for the connections to come once one is freed.
type cappedListener struct {
	net.Listener
	slots chan struct{} // one token per open connection
	log   *slog.Logger
	// lastWarned is when a refusal was last logged; only Accept, on the
	// server's one accepting goroutine, touches it.
	lastWarned time.Time
}

func newCappedListener(ln net.Listener, n int, log *slog.Logger) *cappedListener {
	return &cappedListener{Listener: ln, slots: make(chan struct{}, n), log: log}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
		}
		_ = c.Close()
		if now := time.Now(); now.Sub(l.lastWarned) >= time.Minute {
			l.lastWarned = now
			l.log.Warn("splitflow: the status server holds as many connections as it may (WithHTTPMaxConns) and closed a new one; further refusals within a minute are not logged",
				"max", cap(l.slots), "remote", c.RemoteAddr().String())
		}
	}
}

// cappedConn gives its slot back when it is first closed.
type cappedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// hostPolicy is the set of host names, lower case and without a trailing
// dot, the status server answers to besides loopback names and IP
// addresses.
type hostPolicy map[string]bool

// newHostPolicy holds the host of hc.addr, when it is a name, and the
// names of WithHTTPAllowedHosts.
func newHostPolicy(hc httpConfig) hostPolicy {
	p := hostPolicy{}
	if host, _, err := net.SplitHostPort(hc.addr); err == nil && host != "" {
		p[normalHost(host)] = true
	}
	for _, n := range hc.allowedHosts {
		p[normalHost(n)] = true
	}
	return p
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allows says whether a request with Host header host is for this server.
// No Host at all (an HTTP/1.0 client) is allowed: every browser sends one.
// An IP address is allowed whatever it is: DNS rebinding needs a name the
// attacker controls in the browser's URL, and an address is no name, so a
// request for one was sent by a client that chose this server's address.
// A loopback name resolves to this machine alone (RFC 6761), whatever DNS
// says. Anything else must be a name the job was given.
func (p hostPolicy) allows(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = normalHost(host)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || p[host]
}

// hostChecked answers 421 Misdirected Request to a request whose Host is
// not one of the server's (hostPolicy), before any route, and logs the
// refusal at most once a minute (a rebinding page may send many).
func hostChecked(h http.Handler, p hostPolicy, log *slog.Logger) http.Handler {
	var lastWarned atomic.Int64 // unix nanoseconds
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.allows(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		if now, last := time.Now().UnixNano(), lastWarned.Load(); now-last >= int64(time.Minute) && lastWarned.CompareAndSwap(last, now) {
			log.Warn("splitflow: the status server refused a request for a host that is not its own (WithHTTPAllowedHosts); further refusals within a minute are not logged",
				"host", r.Host, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}
		writeText(w, http.StatusMisdirectedRequest, fmt.Sprintf("this status server does not answer for host %q: it answers for localhost, its IP addresses and the names given with WithHTTPAllowedHosts (wordcount --http-allowed-hosts); add the name you reach it by there", r.Host))
	})
}

// isLoopback says whether a listens on a loopback address only.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// stopHTTP shuts the server down: requests in progress get a second to
// finish, then connections are closed. It returns once the serving
// goroutine has exited.
func (env *Environment) stopHTTP(s *statusServer) {
	env.httpServer.Store(nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close() // a request outlived the grace period; cut it
	}
	<-s.served
}

// jobControl is what the endpoints that change the job need: the token
// that allows them and the actions they take.
type jobControl struct {
	token string       // "" refuses every endpoint that changes the job
	stop  func()       // a graceful stop, as cancelling Execute's context
	log   *slog.Logger // refusals; nil: slog.Default
	// savepoint takes a savepoint (stop: and stops the job with it),
	// Environment.TriggerSavepoint and StopWithSavepoint.
	savepoint func(ctx context.Context, target string, stop bool) (Savepoint, error)
	// savepointRoot is WithSavepointDir, under which a requested target
	// must lie unless savepointAnywhere (WithSavepointTargetsAnywhere).
	savepointRoot     string
	savepointAnywhere bool
}

// newStatusHandler serves the endpoints of WithHTTP from status and
// metrics; it needs no running job, so it is tested with fakes.
func newStatusHandler(status func() JobStatus, metrics prometheus.Gatherer, ctl jobControl) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{
		// A failing collector should not hide the other metrics.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := readiness(status()); ok {
			writeText(w, http.StatusOK, why)
		} else {
			writeText(w, http.StatusServiceUnavailable, why)
		}
	})
	mux.HandleFunc("GET /api/v1/job", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(status())
		if err != nil {
			writeText(w, http.StatusInternalServerError, "encode status: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n')) // the client went away; nothing to do
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", statusPagePolicy)
		_, _ = w.Write(statusPage)
	})
	// The endpoints that change the job. They are registered here like
	// the others; authorized (below) guards every route whose method is
	// not GET or HEAD, so one added later needs nothing of its own.
	mux.HandleFunc("POST /api/v1/job/stop", func(w http.ResponseWriter, _ *http.Request) {
		if ctl.stop == nil {
			writeText(w, http.StatusServiceUnavailable, "no job to stop")
			return
		}
		ctl.stop()
		writeText(w, http.StatusAccepted, "stopping: the job drains and then ends, as on a cancel")
	})
	mux.HandleFunc("POST /api/v1/savepoints", func(w http.ResponseWriter, r *http.Request) {
		serveSavepoint(w, r, ctl)
	})
	return hardened(authorized(mux, ctl))
}

// authorized lets a request through to mux if it only reads (GET, HEAD),
// if mux has no route for it (mux answers 404 or 405), or if it carries
// the token. Guarding by method, after routing and before any handler,
// is what makes every endpoint that changes the job need the token
// without each one having to ask.
func authorized(mux *http.ServeMux, ctl jobControl) http.Handler {
	want := sha256.Sum256([]byte(ctl.token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			mux.ServeHTTP(w, r)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			mux.ServeHTTP(w, r)
			return
		}
		code, why := http.StatusOK, ""
		given, isBearer := bearerToken(r.Header.Get("Authorization"))
		switch {
		case ctl.token == "":
			code, why = http.StatusForbidden, "this status server has no token (WithHTTPToken), so no endpoint may change the job"
		case !isBearer:
			w.Header().Set("WWW-Authenticate", `Bearer realm="splitflow"`)
			code, why = http.StatusUnauthorized, "this endpoint changes the job: send the status server's token as Authorization: Bearer <token>"
		default:
			// Hashes of equal length, compared in constant time: neither
			// the token's bytes nor its length leak through timing.
			got := sha256.Sum256([]byte(given))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				code, why = http.StatusForbidden, "wrong token"
			}
		}
		if code != http.StatusOK {
			log := ctl.log
			if log == nil {
				log = slog.Default()
			}
			// Never the header's value: a wrong token may be a right one
			// of another server.
			log.Warn("splitflow: status server refused a request that changes the job",
				"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", code, "reason", why)
			writeText(w, code, why)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header value (the scheme in any case, RFC 7235), and whether it is one.
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// hardened adds the headers every response carries: no content sniffing,
// so a text or JSON answer that holds job-supplied strings (operator
// names, error messages) is never taken for HTML.
func hardened(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// No route reads more; a body beyond is an error to whoever
		// reads it, and the connection closes after the answer.
		r.Body = http.MaxBytesReader(w, r.Body, httpMaxBodyBytes)
		h.ServeHTTP(w, r)
	})
}

// statusPagePolicy is the page's Content-Security-Policy. The page is
// self-contained: nothing loads but its own API, and of inline code only
// the page's own script and style block run, allowed by their hashes, so
// markup that found its way into the page could run nothing. No other site
// may frame it (clickjacking), and it has no base URL or form to redirect.
var statusPagePolicy = fmt.Sprintf("default-src 'none'; connect-src 'self'; script-src %s; style-src %s; img-src data:; "+
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
	inlineHash(statusPage, "script"), inlineHash(statusPage, "style"))

// inlineHash returns the CSP source ('sha256-...') of the one inline
// <tag> element of page, which must have no attributes. The hash covers
// exactly the text between the tags, as browsers compute it, so an edit
// of the page changes its policy with it.
func inlineHash(page []byte, tag string) string {
	open, end := []byte("<"+tag+">"), []byte("</"+tag+">")
	i := bytes.Index(page, open)
	j := bytes.Index(page, end)
	if i < 0 || j < i || bytes.Count(page, open) != 1 {
		panic(fmt.Sprintf("runtime: page.html must hold exactly one <%s> element without attributes", tag))
	}
	sum := sha256.Sum256(page[i+len(open) : j])
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// readiness says whether the job is worth routing to: running and, with
// checkpoints, having completed one since its newest restart (its output
// is then being committed again). A job that restarts over and over is
// not ready, however many checkpoints it completed before.
func readiness(s JobStatus) (bool, string) {
	cp := s.Checkpoints
	switch {
	case s.State != "running":
		return false, fmt.Sprintf("not ready: job is %s (%d restarts)", s.State, s.Restarts)
	case !cp.Enabled:
		return true, "ready: job is running (checkpoints disabled)"
	case cp.CompletedSinceRestart > 0 && s.Restarts > 0:
		return true, fmt.Sprintf("ready: job is running, %d checkpoints completed since restart %d", cp.CompletedSinceRestart, s.Restarts)
	case cp.CompletedSinceRestart > 0:
		return true, fmt.Sprintf("ready: job is running, %d checkpoints completed", cp.CompletedSinceRestart)
	case s.Restarts > 0:
		return false, fmt.Sprintf("not ready: job is running, no checkpoint completed since restart %d (interval %s, %d failed in all)",
			s.Restarts, time.Duration(cp.IntervalMillis)*time.Millisecond, cp.Failed)
	default:
		return false, fmt.Sprintf("not ready: job is running, no checkpoint completed yet (interval %s, %d failed)",
			time.Duration(cp.IntervalMillis)*time.Millisecond, cp.Failed)
	}
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, body) // the client went away; nothing to do
}

// statusPage is the page served at /: HTML, CSS and JavaScript in one file
// so that it works offline and behind any proxy.
//
//go:embed page.html
var statusPage []byte

// savepointRequestBody is the body of POST /api/v1/savepoints; empty
// means {} (a savepoint into WithSavepointDir, the job going on).
type savepointRequestBody struct {
	// Target is the directory or s3://bucket/prefix the savepoint goes
	// under; "" for WithSavepointDir.
	Target string `json:"target"`
	// Stop stops the job with the savepoint (StopWithSavepoint).
	Stop bool `json:"stop"`
}

// serveSavepoint answers POST /api/v1/savepoints once the savepoint is
// complete (for a stop: once the job has ended): 200 with the Savepoint
// as JSON. Errors are JSON too, {"error": "..."}: 400 for a body that is
// not a savepointRequestBody, 409 for a request the job refuses
// (ErrSavepointRefused), 503 with no job running, 500 when the savepoint
// failed. The answer waits as long as the savepoint takes, past the
// server's write timeout; a client that goes away leaves the savepoint
// to complete.
func serveSavepoint(w http.ResponseWriter, r *http.Request, ctl jobControl) {
	fail := func(code int, err error) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		b, _ := json.Marshal(map[string]string{"error": err.Error()}) // a string always marshals
		_, _ = w.Write(append(b, '\n'))
	}
	if ctl.savepoint == nil {
		fail(http.StatusServiceUnavailable, ErrNoRunningJob)
		return
	}
	var body savepointRequestBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, httpMaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		fail(http.StatusBadRequest, fmt.Errorf("body: %w; send {\"target\": \"DIR or s3://bucket/prefix\", \"stop\": false} or nothing", err))
		return
	}
	if !ctl.savepointAnywhere {
		t, err := confineSavepointTarget(ctl.savepointRoot, body.Target)
		if err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		body.Target = t
	}
	// The answer waits for the savepoint, however long it takes: lift the
	// write deadline, and the read deadline too, since the server's
	// watch for the client going away reads under it and, once it
	// passed, would cancel r.Context() and so the wait. A server without
	// deadlines has nothing to lift.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	sp, err := ctl.savepoint(r.Context(), body.Target, body.Stop)
	switch {
	case err == nil:
	case errors.Is(err, ErrSavepointRefused):
		fail(http.StatusConflict, err)
		return
	case errors.Is(err, ErrNoRunningJob):
		fail(http.StatusServiceUnavailable, err)
		return
	default:
		// The savepoint failed, or (a stop) it is complete and the job
		// failed after it: the message names its path then.
		fail(http.StatusInternalServerError, err)
		return
	}
	b, err := json.Marshal(sp)
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}
