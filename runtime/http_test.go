package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
)

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
	if sink.Count() != 0 {
		t.Fatalf("the job ran (%d records) although its server could not bind", sink.Count())
	}
}

// status.WithListener: Execute serves on the caller's listener and closes it
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
		env := NewEnvironment(WithHTTP("", status.WithListener(ln)), WithParallelism(par), WithLogger(discardLogger()))
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
	sums := KeyedProcessPerSubtask(KeyBy(squares, func(n int64) int64 { return n % 16 }), func() KeyedProcessFunction[int64, int64, int64] {
		var sum state.ValueState[int64]
		return KeyedProcessFuncs[int64, int64, int64]{
			Setup: func(ctx *KeyedContext[int64, int64]) (err error) {
				sum, err = state.NewValueState[int64]("sum").Handle(ctx)
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
	var st status.Job
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
