package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/splitflow/splitflow/connector"
)

// fakeStatus is a job of three vertices whose clock and counters advance
// by one fakeStep per snapshot, so rates computed from two snapshots are
// non-zero and exact however close together the snapshots were taken
// (Chromium's virtual time runs the page's polls back to back); the sink
// is slow, so the source is backpressured.
func fakeStatus(began time.Time) func() JobStatus {
	var snapshots atomic.Int64
	return func() JobStatus {
		n := snapshots.Add(1)
		now := began.Add(time.Duration(n) * fakeStep)
		ms := now.Sub(began).Milliseconds()
		wm := now.Add(-2 * time.Second).UnixMilli()
		task := func(v int, name string, sub int, perSecIn, perSecOut int64, busy, bp float64) TaskStatus {
			return TaskStatus{Vertex: v, Name: name, Subtask: sub, Attempt: 1, State: "running",
				RecordsIn: perSecIn * ms / 1000, RecordsOut: perSecOut * ms / 1000,
				BusyMillis: int64(busy * float64(ms)), BackpressuredMillis: int64(bp * float64(ms)),
				IdleMillis: int64((1 - busy - bp) * float64(ms)), Watermark: &wm}
		}
		src, count, sink := "Source: lines -> split", "count -> tally", "Sink: counts"
		st := JobStatus{
			Name: "wordcount", State: "running", StartTime: began.Add(-90 * time.Second), Now: now,
			Graph: GraphStatus{
				Vertices: []VertexStatus{
					{ID: 1, Name: src, Operators: []string{"Source: lines", "split"}, Parallelism: 2},
					{ID: 2, Name: count, Operators: []string{"count", "tally"}, Parallelism: 2},
					{ID: 3, Name: sink, Operators: []string{"Sink: counts"}, Parallelism: 1},
				},
				Edges: []EdgeStatus{{From: 1, To: 2, Partitioning: "hash"}, {From: 2, To: 3, Partitioning: "rebalance"}},
			},
			Tasks: []TaskStatus{
				task(1, src, 0, 0, 42000, 0.2, 0.7),
				task(1, src, 1, 0, 39000, 0.25, 0.6),
				task(2, count, 0, 42000, 41000, 0.5, 0.2),
				task(2, count, 1, 39000, 38000, 0.45, 0.15),
				task(3, sink, 0, 79000, 0, 0.95, 0),
			},
			Checkpoints: CheckpointsStatus{Enabled: true, IntervalMillis: 1000, Completed: 41, Failed: 1},
			Restarts:    2,
			LastFailure: &FailureStatus{Time: began.Add(-30 * time.Second), Task: count + " (2/2)",
				Error: "injected failure at record 10000 (--fail-every 10000)"},
			Restore: &RestoreStatus{Checkpoint: 29, Path: "/var/lib/wordcount/chk-29", TakenAt: began.Add(-31 * time.Second),
				Message: "restored from checkpoint 29 at /var/lib/wordcount/chk-29, taken at 2026-11-30T11:59:29.000Z",
				Sources: []SourcePosition{{Operator: "Source: lines", UID: "lines", Splits: []string{"lines-0[120,)", "lines-1[98,)"}}},
				Time:    began.Add(-29 * time.Second)},
		}
		st.Tasks[0].Splits = []string{"lines-0", "lines-2"}
		st.Tasks[1].Splits = []string{"lines-1", "lines-3"}
		for id := int64(30); id <= 43; id++ {
			c := CheckpointStatus{ID: id, Status: "completed", TriggerTime: began.Add(time.Duration(id-44) * time.Second),
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

// Every endpoint of WithHTTP, on a fake job.
func TestHTTPEndpointsServeStatusAndMetrics(t *testing.T) {
	status := fakeStatus(time.Now())
	reg, counter := fakeMetrics()
	counter.Add(7)
	srv := httptest.NewServer(newStatusHandler(status, reg, jobControl{}))
	defer srv.Close()

	code, body, _ := get(t, srv.URL+"/healthz")
	if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	code, body, hdr := get(t, srv.URL+"/api/v1/job")
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/api/v1/job: %d %s\n%s", code, hdr.Get("Content-Type"), body)
	}
	var got JobStatus
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/api/v1/job is not a JobStatus: %v\n%s", err, body)
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
	cps := func(enabled bool, completed, sinceRestart int64) CheckpointsStatus {
		return CheckpointsStatus{Enabled: enabled, IntervalMillis: 1000, Completed: completed, CompletedSinceRestart: sinceRestart}
	}
	for _, c := range []struct {
		state    string
		restarts int
		cp       CheckpointsStatus
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
		st := JobStatus{State: c.state, Restarts: c.restarts, Checkpoints: c.cp}
		srv := httptest.NewServer(newStatusHandler(func() JobStatus { return st }, prometheus.NewRegistry(), jobControl{}))
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

// An address in use fails Execute before anything runs, naming the address
// and keeping the system error reachable.
func TestHTTPBindErrorFailsExecute(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	addr := taken.Addr().String()

	env := NewEnvironment(WithHTTP(addr), WithLogger(discardLogger()))
	src := &memSource[int]{numSplits: 1, perSplit: 10, gen: func(_, i int) (int, int64) { return i, 0 }}
	sink := newCollectSink[int]()
	SinkTo(FromSource(env, src, "numbers"), sink)
	err = env.Execute(context.Background(), "bind")
	if err == nil || !strings.Contains(err.Error(), addr) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Execute with WithHTTP(%q) on a taken port: %v", addr, err)
	}
	if sink.count() != 0 {
		t.Fatalf("the job ran (%d records) although its server could not bind", sink.count())
	}
}

// WithHTTPListener: Execute serves on the caller's listener and closes it
// when the job ends, also when the job is refused.
func TestHTTPListenerIsClosedByExecute(t *testing.T) {
	for _, valid := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		par := 1
		if !valid {
			par = 0
		}
		env := NewEnvironment(WithHTTPListener(ln), WithParallelism(par), WithLogger(discardLogger()))
		src := &memSource[int]{numSplits: 1, perSplit: 10, gen: func(_, i int) (int, int64) { return i, 0 }}
		SinkTo(FromSource(env, src, "numbers"), newCollectSink[int]())
		if err := env.Execute(context.Background(), "listener"); (err == nil) != valid {
			t.Fatalf("valid=%v: Execute: %v", valid, err)
		}
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("valid=%v: listener still open after Execute: %v", valid, err)
		}
		if env.HTTPAddr() != "" {
			t.Fatalf("HTTPAddr after Execute: %q", env.HTTPAddr())
		}
	}
}

// liveJob is a small unbounded job with checkpoints: numbers -> square ->
// keyBy -> running sum -> a sink slow enough to backpressure the source.
// It runs until stop; addr is its status server.
type liveJob struct {
	env    *Environment
	addr   string
	cancel context.CancelFunc
	done   chan error
	names  []string // vertex names the graph must show
}

func startLiveJob(t *testing.T, opts ...Option) *liveJob {
	t.Helper()
	env := NewEnvironment(append([]Option{WithParallelism(2), WithCheckpointInterval(100 * time.Millisecond),
		WithHTTP("127.0.0.1:0"), WithLogger(discardLogger())}, opts...)...)
	src := &rangeSrc{splits: 2, perSplit: 1 << 40, readerFailAt: -1}
	nums := FromSource(env, src, "numbers").UID("numbers")
	squares := Map(nums, func(n int64) (int64, error) { return n * n % 1000003, nil }).Name("square").UID("square")
	sums := ProcessPerSubtask(KeyBy(squares, func(n int64) int64 { return n % 16 }), func() KeyedProcessFunction[int64, int64, int64] {
		var sum ValueState[int64]
		return KeyedProcessFuncs[int64, int64, int64]{
			Setup: func(ctx *KeyedContext[int64, int64]) (err error) {
				sum, err = GetValueState[int64](ctx, "sum")
				return err
			},
			Element: func(ctx *KeyedContext[int64, int64], n int64) error {
				s, _ := sum.Value()
				sum.Update(s + n)
				ctx.Collect(s + n)
				return nil
			},
		}
	}).Name("running sum").UID("sum")
	sink := newCollectSink[int64]()
	var mu sync.Mutex
	written := map[int]int{}
	// Sleeping every 256 records caps the sink near 100k records/s per
	// subtask, which keeps the test's CPU low and shows backpressure.
	sink.writeFn = func(sub int, _ int64, _ connector.WriteContext) error {
		mu.Lock()
		written[sub]++
		n := written[sub]
		mu.Unlock()
		if n%256 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	}
	SinkTo(sums, sink).Name("store").UID("store")

	ctx, cancel := context.WithCancel(context.Background())
	j := &liveJob{env: env, cancel: cancel, done: make(chan error, 1), names: []string{"numbers", "square", "running sum", "store"}}
	go func() { j.done <- env.Execute(ctx, "live-numbers") }()
	deadline := time.Now().Add(5 * time.Second)
	for j.addr = env.HTTPAddr(); j.addr == ""; j.addr = env.HTTPAddr() {
		select {
		case err := <-j.done:
			t.Fatalf("job ended before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			j.stop(t)
			t.Fatal("status server not listening 5s after Execute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() { j.stop(t) })
	return j
}

// stop drains the job and checks that it ended cleanly and took its server
// with it.
func (j *liveJob) stop(t *testing.T) {
	t.Helper()
	if j.cancel == nil {
		return
	}
	j.cancel()
	j.cancel = nil
	select {
	case err := <-j.done:
		if err != nil {
			t.Errorf("Execute: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("job did not drain within 20s")
	}
	if a := j.env.HTTPAddr(); a != "" {
		t.Errorf("HTTPAddr after Execute returned: %q", a)
	}
	if j.addr != "" {
		if c, err := net.DialTimeout("tcp", j.addr, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("status server still accepts connections on %s after Execute returned", j.addr)
		}
	}
}

// waitReady polls /readyz until it answers 200, for at most d.
func (j *liveJob) waitReady(t *testing.T, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body, _ := get(t, "http://"+j.addr+"/readyz")
		if code == http.StatusOK {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("/readyz still %d after %s: %s", code, d, strings.TrimSpace(body))
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A real job under WithHTTP: every endpoint serves while it runs, with the
// job's own graph, tasks, checkpoints and metrics; the server is gone once
// Execute returns.
func TestHTTPServesRunningJob(t *testing.T) {
	j := startLiveJob(t)
	base := "http://" + j.addr
	if code, body, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	j.waitReady(t, 5*time.Second)

	_, body, _ := get(t, base+"/api/v1/job")
	var st JobStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/api/v1/job: %v\n%s", err, body)
	}
	if st.Name != "live-numbers" || st.State != "running" {
		t.Errorf("job %q state %q, want live-numbers running", st.Name, st.State)
	}
	var names []string
	for _, v := range st.Graph.Vertices {
		names = append(names, v.Name)
	}
	all := strings.Join(names, " | ")
	for _, n := range j.names {
		if !strings.Contains(all, n) {
			t.Errorf("graph vertices %q lack %q", all, n)
		}
	}
	if len(st.Graph.Edges) == 0 || st.Graph.Edges[0].Partitioning != "hash" {
		t.Errorf("graph edges %+v, want the keyBy as a hash edge", st.Graph.Edges)
	}
	var out int64
	for _, task := range st.Tasks {
		out += task.RecordsOut
	}
	if len(st.Tasks) != 4 || out == 0 {
		t.Errorf("tasks %+v: want 4 with records flowing", st.Tasks)
	}
	if !st.Checkpoints.Enabled || st.Checkpoints.Completed == 0 || len(st.Checkpoints.Recent) == 0 {
		t.Errorf("checkpoints %+v: want completed ones", st.Checkpoints)
	}

	// Tasks publish every 200ms, so a later scrape shows more records;
	// how much later depends on the machine's load, hence a deadline
	// rather than a fixed pause.
	_, m1, _ := get(t, base+"/metrics")
	first := recordsCounter(m1)
	if first < 0 {
		t.Fatalf("no splitflow_*records* counter in /metrics:\n%s", m1)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(50 * time.Millisecond)
		_, m2, _ := get(t, base+"/metrics")
		if recordsCounter(m2) > first {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no splitflow_*records* counter grew in 10s of scrapes (%v then %v):\n%s", first, recordsCounter(m2), m2)
			break
		}
	}

	if code, page, _ := get(t, base+"/"); code != http.StatusOK || !strings.Contains(page, "api/v1/job") {
		t.Errorf("/: %d, %d bytes", code, len(page))
	}
	j.stop(t)
}

// recordsCounter sums the samples of every splitflow_ counter whose name
// mentions records; -1 when there is none.
func recordsCounter(exposition string) float64 {
	sum, found := 0.0, false
	re := regexp.MustCompile(`(?m)^(splitflow_[a-z_]*records[a-z_]*)(\{[^}]*\})? ([0-9.e+]+)$`)
	for _, m := range re.FindAllStringSubmatch(exposition, -1) {
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}
