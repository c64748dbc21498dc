package status

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRunner is a job for the server alone: status and metrics as given,
// stop and savepoint calls handed to the functions given (a nil savepoint
// is a job that no longer runs).
type fakeRunner struct {
	status    func() Job
	metrics   prometheus.Gatherer
	stop      func()
	savepoint func(ctx context.Context, target string, stop bool) (Savepoint, error)
}

func (f *fakeRunner) Status() Job {
	if f.status == nil {
		return Job{State: StateCreated}
	}
	return f.status()
}

func (f *fakeRunner) Metrics() prometheus.Gatherer {
	if f.metrics == nil {
		return prometheus.NewRegistry()
	}
	return f.metrics
}

func (f *fakeRunner) Stop() {
	if f.stop != nil {
		f.stop()
	}
}

func (f *fakeRunner) TriggerSavepoint(ctx context.Context, target string) (Savepoint, error) {
	return f.take(ctx, target, false)
}

func (f *fakeRunner) StopWithSavepoint(ctx context.Context, target string) (Savepoint, error) {
	return f.take(ctx, target, true)
}

func (f *fakeRunner) take(ctx context.Context, target string, stop bool) (Savepoint, error) {
	if f.savepoint == nil {
		return Savepoint{}, ErrNoRunningJob
	}
	return f.savepoint(ctx, target, stop)
}

// fakeStatus is a job of three vertices whose clock and counters advance
// by one fakeStep per snapshot, so rates computed from two snapshots are
// non-zero and exact however close together the snapshots were taken
// (Chromium's virtual time runs the page's polls back to back); the sink
// is slow, so the source is backpressured.
func fakeStatus(began time.Time) func() Job {
	var snapshots atomic.Int64
	return func() Job {
		n := snapshots.Add(1)
		now := began.Add(time.Duration(n) * fakeStep)
		ms := now.Sub(began).Milliseconds()
		wm := now.Add(-2 * time.Second).UnixMilli()
		task := func(v int, name string, sub int, perSecIn, perSecOut int64, busy, bp float64) Task {
			return Task{Vertex: v, Name: name, Subtask: sub, Attempt: 1, State: "running",
				RecordsIn: perSecIn * ms / 1000, RecordsOut: perSecOut * ms / 1000,
				BusyMillis: int64(busy * float64(ms)), BackpressuredMillis: int64(bp * float64(ms)),
				IdleMillis: int64((1 - busy - bp) * float64(ms)), Watermark: &wm}
		}
		src, count, sink := "Source: lines -> split", "count -> tally", "Sink: counts"
		st := Job{
			Name: "wordcount", State: "running", StartTime: began.Add(-90 * time.Second), Now: now,
			Graph: Graph{
				Vertices: []Vertex{
					{ID: 1, Name: src, Operators: []string{"Source: lines", "split"}, Parallelism: 2},
					{ID: 2, Name: count, Operators: []string{"count", "tally"}, Parallelism: 2},
					{ID: 3, Name: sink, Operators: []string{"Sink: counts"}, Parallelism: 1},
				},
				Edges: []Edge{{From: 1, To: 2, Partitioning: "hash"}, {From: 2, To: 3, Partitioning: "rebalance"}},
			},
			Tasks: []Task{
				task(1, src, 0, 0, 42000, 0.2, 0.7),
				task(1, src, 1, 0, 39000, 0.25, 0.6),
				task(2, count, 0, 42000, 41000, 0.5, 0.2),
				task(2, count, 1, 39000, 38000, 0.45, 0.15),
				task(3, sink, 0, 79000, 0, 0.95, 0),
			},
			Checkpoints: Checkpoints{Enabled: true, IntervalMillis: 1000, Completed: 41, Failed: 1},
			Restarts:    2,
			LastFailure: &Failure{Time: began.Add(-30 * time.Second), Task: count + " (2/2)",
				Error: "injected failure at record 10000 (--fail-every 10000)"},
			Restore: &Restore{Checkpoint: 29, Path: "/var/lib/wordcount/chk-29", TakenAt: began.Add(-31 * time.Second),
				Message: "restored from checkpoint 29 at /var/lib/wordcount/chk-29, taken at 2026-11-30T11:59:29.000Z",
				Sources: []SourcePosition{{Operator: "Source: lines", UID: "lines", Splits: []string{"lines-0[120,)", "lines-1[98,)"}}},
				Time:    began.Add(-29 * time.Second)},
		}
		st.Tasks[0].Splits = []string{"lines-0", "lines-2"}
		st.Tasks[1].Splits = []string{"lines-1", "lines-3"}
		for id := int64(30); id <= 43; id++ {
			c := Checkpoint{ID: id, Status: "completed", TriggerTime: began.Add(time.Duration(id-44) * time.Second),
				DurationMillis: 40 + (id*37)%90, SizeBytes: 180_000 + id*1500, AlignmentMillis: (id * 7) % 15}
			switch id {
			case 36:
				c.Status, c.SizeBytes, c.AlignmentMillis, c.Error = "failed", 0, 0, "checkpoint 36 expired after 2m0s"
			case 43:
				c.Status, c.SizeBytes, c.AlignmentMillis = "in_progress", 0, 0
			}
			st.Checkpoints.Recent = append(st.Checkpoints.Recent, c)
		}
		return st
	}
}

// fakeStep is how far the fake job's clock moves per snapshot: the page's
// rate window, so every pair of polls yields a rate.
const fakeStep = time.Second

// fakeMetrics is a registry with one counter, as the job's own would have.
func fakeMetrics() (*prometheus.Registry, prometheus.Counter) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "splitflow_task_records_out_total", Help: "records out"})
	reg.MustRegister(c)
	return reg, c
}

// get fetches url without keep-alive, so no client goroutine outlives the
// test (goleak, TestMain).
func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	return do(t, http.MethodGet, url)
}

func do(t *testing.T, method, url string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return res.StatusCode, string(b), res.Header
}

// Every endpoint of the server, on a fake job.
func TestHTTPEndpointsServeStatusAndMetrics(t *testing.T) {
	status := fakeStatus(time.Now())
	reg, counter := fakeMetrics()
	counter.Add(7)
	srv := httptest.NewServer(newHandler(&fakeRunner{status: status, metrics: reg}, "", nil))
	defer srv.Close()

	code, body, _ := get(t, srv.URL+"/healthz")
	if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	code, body, hdr := get(t, srv.URL+"/api/v1/job")
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/api/v1/job: %d %s\n%s", code, hdr.Get("Content-Type"), body)
	}
	var got Job
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/api/v1/job is not a Job: %v\n%s", err, body)
	}
	want := status()
	if got.Name != want.Name || !reflect.DeepEqual(got.Graph, want.Graph) || len(got.Tasks) != len(want.Tasks) ||
		!got.Checkpoints.Recent[0].TriggerTime.Equal(want.Checkpoints.Recent[0].TriggerTime) ||
		got.Checkpoints.Recent[6].Error != want.Checkpoints.Recent[6].Error || got.LastFailure.Error != want.LastFailure.Error {
		t.Errorf("/api/v1/job round trip differs:\n got %+v\nwant %+v", got, want)
	}
	for _, field := range []string{`"recordsOut":`, `"backpressuredMillis":`, `"partitioning":"hash"`, `"status":"in_progress"`, `"lastFailure":`} {
		if !strings.Contains(body, field) {
			t.Errorf("/api/v1/job lacks %s", field)
		}
	}

	code, body, _ = get(t, srv.URL+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "splitflow_task_records_out_total 7") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}

	code, body, hdr = get(t, srv.URL+"/")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !strings.Contains(body, "api/v1/job") {
		t.Errorf("/: %d %s, %d bytes", code, hdr.Get("Content-Type"), len(body))
	}
	// No inline code runs but the page's own, by hash; the page cannot be
	// framed; no answer is content-sniffed.
	csp := hdr.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'sha256-", "style-src 'sha256-", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("page policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("page policy %q allows unsafe sources", csp)
	}
	if strings.Contains(body, " style=") {
		t.Error("the page has a style attribute, which its policy blocks")
	}
	for _, path := range []string{"/", "/healthz", "/readyz", "/api/v1/job", "/metrics", "/nope"} {
		if _, _, h := get(t, srv.URL+path); h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", path, h.Get("X-Content-Type-Options"))
		}
	}
	// Self-contained: nothing is loaded from elsewhere. The SVG namespace
	// is an identifier, never fetched.
	page := strings.ReplaceAll(body, `"http://www.w3.org/2000/svg"`, "")
	if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|<link\b|\bsrc\s*=`).FindString(page); m != "" {
		t.Errorf("/ refers to something outside the page: %q", m)
	}

	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodPost, "/api/v1/job", http.StatusMethodNotAllowed},
		{http.MethodHead, "/healthz", http.StatusOK},
	} {
		if code, _, _ := do(t, c.method, srv.URL+c.path); code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, code, c.code)
		}
	}
}

// /readyz: ready while running and, with checkpoints, once one completed
// since the newest restart; a job that crash-loops after checkpoints
// completed is not ready. Otherwise 503 with the reason.
func TestHTTPReadiness(t *testing.T) {
	cps := func(enabled bool, completed, sinceRestart int64) Checkpoints {
		return Checkpoints{Enabled: enabled, IntervalMillis: 1000, Completed: completed, CompletedSinceRestart: sinceRestart}
	}
	for _, c := range []struct {
		state    State
		restarts int
		cp       Checkpoints
		ready    bool
		why      string
	}{
		{"created", 0, cps(false, 0, 0), false, "job is created"},
		{"created", 0, cps(true, 0, 0), false, "job is created"},
		{"running", 0, cps(true, 0, 0), false, "no checkpoint completed yet (interval 1s"},
		{"running", 0, cps(true, 1, 1), true, "1 checkpoints completed"},
		{"restarting", 1, cps(true, 3, 0), false, "job is restarting (1 restarts)"},
		// Restarted after three checkpoints, none since: crash-looping.
		{"running", 4, cps(true, 3, 0), false, "no checkpoint completed since restart 4"},
		{"running", 4, cps(true, 5, 2), true, "2 checkpoints completed since restart 4"},
		{"running", 0, cps(false, 0, 0), true, "checkpoints disabled"},
		{"restarting", 1, cps(false, 0, 0), false, "job is restarting"},
		{"failed", 0, cps(true, 5, 5), false, "job is failed"},
		{"finished", 0, cps(true, 5, 5), false, "job is finished"},
	} {
		st := Job{State: c.state, Restarts: c.restarts, Checkpoints: c.cp}
		srv := httptest.NewServer(newHandler(&fakeRunner{status: func() Job { return st }, metrics: prometheus.NewRegistry()}, "", nil))
		code, body, _ := get(t, srv.URL+"/readyz")
		srv.Close()
		want := http.StatusServiceUnavailable
		if c.ready {
			want = http.StatusOK
		}
		if code != want || !strings.Contains(body, c.why) {
			t.Errorf("%s, %d restarts, %+v: %d %q, want %d and %q", c.state, c.restarts, c.cp, code, body, want, c.why)
		}
	}
}
