package status

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newHandler serves the routes of Server.Start from job: token ("" for
// none) allows the routes that change the job, and log takes refusals.
// It needs no running job, so it is tested with fakes.
func newHandler(job Runner, token string, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(job.Metrics(), promhttp.HandlerOpts{
		// A failing collector should not hide the other metrics.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := readiness(job.Status()); ok {
			writeText(w, http.StatusOK, why)
		} else {
			writeText(w, http.StatusServiceUnavailable, why)
		}
	})
	mux.HandleFunc("GET /api/v1/job", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(job.Status())
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
		job.Stop()
		writeText(w, http.StatusAccepted, "stopping: the job drains and then ends, as on a cancel")
	})
	mux.HandleFunc("POST /api/v1/savepoints", func(w http.ResponseWriter, r *http.Request) {
		serveSavepoint(w, r, job)
	})
	return hardened(authorized(mux, token, log))
}

// authorized lets a request through to mux if it only reads (GET, HEAD),
// if mux has no route for it (mux answers 404 or 405), or if it carries
// the token. Guarding by method, after routing and before any handler,
// is what makes every endpoint that changes the job need the token
// without each one having to ask.
func authorized(mux *http.ServeMux, token string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	want := sha256.Sum256([]byte(token))
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
		case token == "":
			code, why = http.StatusForbidden, "this status server has no token (status.WithToken), so no endpoint may change the job"
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
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
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
		panic(fmt.Sprintf("status: page.html must hold exactly one <%s> element without attributes", tag))
	}
	sum := sha256.Sum256(page[i+len(open) : j])
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// readiness says whether the job is worth routing to: running and, with
// checkpoints, having completed one since its newest restart (its output
// is then being committed again). A job that restarts over and over is
// not ready, however many checkpoints it completed before.
func readiness(s Job) (bool, string) {
	cp := s.Checkpoints
	switch {
	case s.State != StateRunning:
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
// means {} (a savepoint to the job's default target, the job going on).
type savepointRequestBody struct {
	// Target is the directory or s3://bucket/prefix the savepoint goes
	// under; "" for the job's default (runtime.WithSavepointDir).
	Target string `json:"target"`
	// Stop stops the job with the savepoint (Runner.StopWithSavepoint).
	Stop bool `json:"stop"`
}

// serveSavepoint answers POST /api/v1/savepoints once the savepoint is
// complete (for a stop: once the job has ended): 200 with the Savepoint
// as JSON. Errors are JSON too, {"error": "..."}: 400 for a body that is
// not a savepointRequestBody or a target the job does not allow
// (ErrSavepointTarget), 409 for a request the job refuses
// (ErrSavepointRefused), 503 with no job running (ErrNoRunningJob), 500
// when the savepoint failed. The answer waits as long as the savepoint takes, past the
// server's write timeout; a client that goes away leaves the savepoint
// to complete.
func serveSavepoint(w http.ResponseWriter, r *http.Request, job Runner) {
	fail := func(code int, err error) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		b, _ := json.Marshal(map[string]string{"error": err.Error()}) // a string always marshals
		_, _ = w.Write(append(b, '\n'))
	}
	var body savepointRequestBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		fail(http.StatusBadRequest, fmt.Errorf("body: %w; send {\"target\": \"DIR or s3://bucket/prefix\", \"stop\": false} or nothing", err))
		return
	}
	// The answer waits for the savepoint, however long it takes: lift the
	// write deadline, and the read deadline too, since the server's
	// watch for the client going away reads under it and, once it
	// passed, would cancel r.Context() and so the wait. A server without
	// deadlines has nothing to lift.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	take := job.TriggerSavepoint
	if body.Stop {
		take = job.StopWithSavepoint
	}
	sp, err := take(r.Context(), body.Target)
	switch {
	case err == nil:
	case errors.Is(err, ErrSavepointTarget):
		fail(http.StatusBadRequest, err)
		return
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
