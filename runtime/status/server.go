package status

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Runner is the job a status server reports on and acts on: in splitflow,
// one Execute of runtime's Environment. Every method is called from the
// server's request goroutines, concurrently with each other and with the
// job, for as long as the server serves.
type Runner interface {
	// Status returns a snapshot of the job (GET /api/v1/job, /readyz and
	// the page). It returns at once.
	Status() Job
	// Metrics is the registry GET /metrics serves; the server asks for
	// it once, in Start.
	Metrics() prometheus.Gatherer
	// Stop stops the job gracefully (POST /api/v1/job/stop) and returns
	// at once; the job drains and ends after.
	Stop()
	// TriggerSavepoint takes a savepoint under target, as the client
	// named it ("" for the job's default), and returns once it is
	// complete (POST /api/v1/savepoints). The runner decides where a
	// savepoint may go: a target it does not allow is refused with an
	// error wrapping ErrSavepointTarget. Errors wrapping
	// ErrSavepointRefused or ErrNoRunningJob answer 409 and 503, others
	// 500. ctx is the request's, which ends when the client goes away:
	// it bounds the wait, not the savepoint.
	TriggerSavepoint(ctx context.Context, target string) (Savepoint, error)
	// StopWithSavepoint is TriggerSavepoint that also stops the job with
	// the savepoint (POST /api/v1/savepoints with "stop": true); it
	// returns once the job has ended.
	StopWithSavepoint(ctx context.Context, target string) (Savepoint, error)
}

// ErrNoRunningJob is returned by runtime's TriggerSavepoint and
// StopWithSavepoint when no Execute of the Environment is running (not
// started yet, or ended); POST /api/v1/savepoints answers it with 503.
var ErrNoRunningJob = errors.New("no job is running on this environment")

// ErrSavepointRefused is wrapped by the errors of runtime's
// TriggerSavepoint and StopWithSavepoint for a request the job cannot take
// in its state: checkpoints off, the job stopping or restarting, no
// target given, a target inside the job's own checkpoint storage, or a
// distributed job (runtime.WithDistributed), which takes none yet.
// Nothing was written. POST /api/v1/savepoints answers it with 409.
var ErrSavepointRefused = errors.New("savepoint refused")

// ErrSavepointTarget is wrapped by the error of a savepoint request over
// the status server whose target lies outside the savepoint root
// (runtime.WithSavepointDir) of a job that confines them: POST
// /api/v1/savepoints answers it with 400 Bad Request. Nothing was
// written.
var ErrSavepointTarget = errors.New("savepoint target refused")

// Server is a status server: it serves one job's status, metrics and
// page over HTTP, and takes its stop and savepoint requests. New checks
// its options, Start binds and serves, Close stops it; it serves at most
// once.
type Server struct {
	cfg    config
	policy hostPolicy

	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener  // the bound listener while serving
	served chan struct{} // closed when Serve has returned
	closed bool
}

// New returns a server for addr (host:port, as net.Listen takes it; ":0"
// or "127.0.0.1:0" picks a free port), or for WithListener's listener with
// addr "". It checks the options (an error names the one at fault and
// never shows the token) and binds nothing yet.
func New(addr string, opts ...Option) (*Server, error) {
	c := config{addr: addr}
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		if c.listener != nil {
			_ = c.listener.Close()
		}
		return nil, err
	}
	return &Server{cfg: c, policy: newHostPolicy(c.addr, c.allowedHosts)}, nil
}

// Start binds the server's address (or takes WithListener's listener) and
// serves job's endpoints until Close; it returns once the server listens,
// or with the error that kept it from binding (an address in use). It
// logs the address it is bound to on log, the port resolved, and logs
// refusals there too.
//
// The routes:
//
//   - GET /metrics: job.Metrics() (Prometheus text exposition format).
//   - GET /healthz: 200 while the process serves.
//   - GET /readyz: 200 while the job runs and, with checkpoints, has
//     completed one since its newest restart (or since the start); 503
//     otherwise (not started, restarting, crash-looping, ended), the body
//     saying why.
//   - GET /api/v1/job: job.Status() as JSON (Job).
//   - GET /: a self-contained page that draws the job graph with per-task
//     throughput and backpressure, the checkpoint history, restarts and the
//     last failure, refreshed every second from /api/v1/job.
//   - POST /api/v1/job/stop: job.Stop(), 202 Accepted. It changes the
//     job, so it needs the token of WithToken.
//   - POST /api/v1/savepoints: job.TriggerSavepoint or, with
//     {"stop": true}, job.StopWithSavepoint; body {"target": "DIR or
//     s3://bucket/prefix", "stop": false}, empty for the job's default
//     target. It answers when the savepoint is complete (a stop: when the
//     job has ended), 200 with Savepoint as JSON ({"path", "checkpoint",
//     "takenAt"}); errors as {"error": "..."} with 400 (bad body, or
//     ErrSavepointTarget), 409 (ErrSavepointRefused), 503
//     (ErrNoRunningJob) or 500 (failed). It needs the token, as stop
//     does.
//
// Every route answers only a request whose Host names the server
// (localhost, an IP address, the address's host, WithAllowedHosts); any
// other gets 421 Misdirected Request. The GET routes are read-only and
// open to whoever reaches the address; every other route changes the job
// and is refused unless the server has a token and the request carries
// it.
func (s *Server) Start(job Runner, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.srv != nil {
		return errors.New("status server: Start after Start or Close; a server serves once")
	}
	c := s.cfg
	ln := c.listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", c.addr)
		if err != nil {
			return fmt.Errorf("status HTTP server (WithHTTP %q) cannot listen: %w; choose a free address or port 0", c.addr, err)
		}
	}
	addr := ln.Addr()
	// The cap counts TCP connections, below TLS: a client that never
	// finishes its handshake holds one too.
	capped := newCappedListener(ln, cmp.Or(c.maxConns, defaultMaxConns), log)
	// The bound address, not the one asked for: with port 0 the log is
	// where an operator learns the port.
	scheme := "http"
	if c.tls != nil {
		scheme = "https"
	}
	log.Info("splitflow: status server listening", "addr", addr.String(), "url", scheme+"://"+addr.String()+"/")
	var serving net.Listener = capped
	if c.tls != nil {
		serving = tls.NewListener(capped, c.tls)
	} else if c.token != "" && !isLoopback(addr) {
		log.Warn("splitflow: the status server takes its token over plain HTTP on an address other hosts reach; anyone on the path can read it (serve with status.WithTLS or bind loopback)",
			"addr", addr.String())
	}
	readTimeout := cmp.Or(c.readTimeout, defaultReadTimeout)
	s.srv = &http.Server{
		Handler: hostChecked(newHandler(job, c.token, log), s.policy, log),
		// Bounds what a slow or idle client can hold; every response
		// is small and computed at once (a savepoint's answer lifts
		// its deadlines, see serveSavepoint).
		ReadHeaderTimeout: min(5*time.Second, readTimeout),
		ReadTimeout:       readTimeout,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		// A failed TLS handshake (a plain-HTTP client, an untrusted
		// certificate) is the client's problem: a debug line, not a
		// line per try on the process's stderr.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.ln = ln
	s.served = make(chan struct{})
	srv, served := s.srv, s.served
	go func() {
		defer close(served)
		// Serve returns ErrServerClosed after Close. Any other error
		// (the listener failing) leaves the job running without its
		// status endpoints, which is worth a line but not a failed job.
		if err := srv.Serve(serving); !errors.Is(err, http.ErrServerClosed) {
			log.Error("splitflow: status HTTP server stopped; the job goes on without it", "addr", addr.String(), "err", err)
		}
	}()
	return nil
}

// Addr returns the address the server listens on (the port resolved when
// it was given port 0), or "" before Start and after Close. Safe from any
// goroutine.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil || s.closed {
		return ""
	}
	return s.ln.Addr().String()
}

// Close shuts the server down: requests in progress get a second to
// finish, then connections are closed. It returns once the serving
// goroutine has exited. A server never started closes WithListener's
// listener. Calls after the first do nothing.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	srv, served := s.srv, s.served
	s.mu.Unlock()
	if srv == nil {
		if s.cfg.listener != nil {
			_ = s.cfg.listener.Close()
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close() // a request outlived the grace period; cut it
	}
	<-served
}

// isLoopback says whether a listens on a loopback address only.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
