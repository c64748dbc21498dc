package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpConfig is where the status server listens; both empty means no
// server.
type httpConfig struct {
	addr     string
	listener net.Listener
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
//
// Execute binds addr after the graph is validated and before any task
// starts, and fails at once if it cannot (an address in use); it stops the
// server when the job has ended, before it returns. Default: no server.
// The endpoints have no authentication: bind to a loopback or otherwise
// private address.
func WithHTTP(addr string) Option {
	return optionFunc(func(c *config) { c.http = httpConfig{addr: addr} })
}

// WithHTTPListener is WithHTTP on a listener the caller has bound, for a
// program that wants its bind error before it does anything else (or a
// test that wants the port before Execute). Execute serves on l while the job
// runs and closes it before returning, whatever the outcome; l must not be
// used by anything else.
func WithHTTPListener(l net.Listener) Option {
	return optionFunc(func(c *config) { c.http = httpConfig{listener: l} })
}

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
// one; nil, nil otherwise.
func (env *Environment) startHTTP() (*statusServer, error) {
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
	s := &statusServer{
		srv: &http.Server{
			Handler: newStatusHandler(env.Status, env.gatherer()),
			// Bounds what a slow or idle client can hold; every response
			// is small and computed at once.
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       time.Minute,
		},
		ln:     ln,
		served: make(chan struct{}),
	}
	log := env.cfg.cp.logger
	if log == nil {
		log = slog.Default()
	}
	go func() {
		defer close(s.served)
		// Serve returns ErrServerClosed after stopHTTP. Any other error
		// (the listener failing) leaves the job running without its
		// status endpoints, which is worth a line but not a failed job.
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("splitflow: status HTTP server stopped; the job goes on without it", "addr", ln.Addr().String(), "err", err)
		}
	}()
	env.httpServer.Store(s)
	return s, nil
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

// newStatusHandler serves the endpoints of WithHTTP from status and
// metrics; it needs no running job, so it is tested with fakes.
func newStatusHandler(status func() JobStatus, metrics prometheus.Gatherer) http.Handler {
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
	return hardened(mux)
}

// hardened adds the headers every response carries: no content sniffing,
// so a text or JSON answer that holds job-supplied strings (operator
// names, error messages) is never taken for HTML.
func hardened(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
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
