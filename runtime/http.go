package runtime

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/runtime/internal/jobstorage"
	"github.com/splitflow/splitflow/runtime/status"
)

// httpConfig is WithHTTP: the status server's address and options; no
// address and no options means no server.
type httpConfig struct {
	addr string
	opts []status.Option
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
//   - GET /api/v1/job: Environment.Status as JSON (status.Job).
//   - GET /: a self-contained page that draws the job graph with per-task
//     throughput and backpressure, the checkpoint history, restarts and the
//     last failure, refreshed every second from /api/v1/job.
//   - POST /api/v1/job/stop: stops the job gracefully, as cancelling
//     Execute's context does (202 Accepted; Execute then returns
//     ErrStopped once the job has drained). It changes the job, so it needs the token of
//     status.WithToken.
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
// (localhost, an IP address, addr's host, status.WithAllowedHosts); any
// other gets 421 Misdirected Request, which keeps a page of another site
// from reading the status through DNS rebinding. Once bound, the server
// logs the address it listens on ("status server listening", the port
// resolved when addr asked for port 0). The server is package status's
// (status.Server); see there for the details.
//
// opts are the server's: status.WithToken (default: none, so every
// endpoint that changes the job answers 403), status.WithTLS (default:
// plain HTTP), status.WithReadTimeout (default 10s), status.WithMaxConns
// (default 64), status.WithAllowedHosts (default: none) and
// status.WithListener, which serves on a listener the caller has bound
// instead of addr (give addr "" then; Execute closes it before returning,
// whatever the outcome). A bad option fails Execute with ErrInvalidGraph
// before anything runs.
//
// The GET endpoints are read-only and open to whoever reaches the address.
// Every other endpoint changes the job and is refused unless the server
// has a token and the request carries it. The address is used as given,
// as net.Listen takes it: ":8081" listens on every interface. Bind a
// loopback or otherwise private address unless the metrics are meant to
// be public, and use status.WithTLS when a token crosses a network.
//
// Execute binds addr after the graph is validated and before any task
// starts, and fails at once if it cannot (an address in use); it stops the
// server when the job has ended, before it returns. Default: no server
// (WithHTTP("") with no options is none too).
func WithHTTP(addr string, opts ...status.Option) Option {
	return optionFunc(func(c *config) { c.http = httpConfig{addr: addr, opts: opts} })
}

// HTTPAddr returns the address the status server listens on (the port
// resolved when WithHTTP was given port 0), or "" when no server is
// running: before Execute has bound it, after Execute has returned, or
// without WithHTTP. Safe from any goroutine.
func (env *Environment) HTTPAddr() string {
	if s := env.httpServer.Load(); s != nil {
		return s.Addr()
	}
	return ""
}

// newHTTP makes the status server of WithHTTP, checking its options; nil,
// nil without WithHTTP. From here the server holds status.WithListener's
// listener, which it closes when it is closed (or, on an error, at once).
func (env *Environment) newHTTP() (*status.Server, error) {
	hc := env.cfg.http
	if hc.addr == "" && len(hc.opts) == 0 {
		return nil, nil
	}
	s, err := status.New(hc.addr, hc.opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidGraph, err)
	}
	return s, nil
}

// startHTTP starts s for the job; stop is what POST /api/v1/job/stop
// calls: it cancels the context the job runs under.
func (env *Environment) startHTTP(s *status.Server, stop func()) error {
	log := env.cfg.cp.logger
	if err := s.Start(statusRunner{env: env, stop: stop}, log); err != nil {
		return err
	}
	env.httpServer.Store(s)
	return nil
}

// stopHTTP shuts s down (see status.Server.Close); HTTPAddr is "" from
// here.
func (env *Environment) stopHTTP(s *status.Server) {
	env.httpServer.Store(nil)
	s.Close()
}

// statusRunner is the job as its status server sees it, for one Execute:
// the savepoints it asks for go under WithSavepointDir unless
// WithSavepointTargetsAnywhere, and its stop cancels Execute's context.
type statusRunner struct {
	env  *Environment
	stop func()
}

func (r statusRunner) Status() status.Job           { return r.env.Status() }
func (r statusRunner) Metrics() prometheus.Gatherer { return r.env.gatherer() }
func (r statusRunner) Stop()                        { r.stop() }
func (r statusRunner) TriggerSavepoint(ctx context.Context, target string) (status.Savepoint, error) {
	return r.savepoint(ctx, target, false)
}

func (r statusRunner) StopWithSavepoint(ctx context.Context, target string) (status.Savepoint, error) {
	return r.savepoint(ctx, target, true)
}

func (r statusRunner) savepoint(ctx context.Context, target string, stop bool) (status.Savepoint, error) {
	cp := r.env.cfg.cp
	if !cp.savepointAnywhere {
		t, err := jobstorage.ConfineSavepointTarget(cp.savepointDir, target)
		if err != nil {
			return status.Savepoint{}, err
		}
		target = t
	}
	return r.env.savepoint(ctx, target, stop)
}
