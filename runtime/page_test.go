package runtime

import (
	"bytes"
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The status page is checked the way a person sees it: headless Chromium
// loads it, runs its script against the live API for a few seconds of
// virtual time, and the test reads the DOM Chromium rendered. A screenshot
// of the page goes to the test's artifact directory (kept with
// `go test -artifacts -outputdir DIR`).

// chromiumPath finds Chromium; its absence fails the test, because the
// page is then untested.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the status page tests need Chromium, which is not on PATH: install it " +
		"(Debian/Ubuntu: apt-get install -y chromium; .ci/run does this in CI) or put chromium on PATH")
	return ""
}

// renderPage loads url in headless Chromium, lets the page run for budget
// of virtual time (its timers, so its polls, run; network waits are real),
// and returns the DOM; a screenshot is written to png.
func renderPage(t *testing.T, url string, budget time.Duration, png string) string {
	t.Helper()
	bin := chromiumPath(t)
	profile := t.TempDir()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-dev-shm-usage", "--disable-extensions", "--disable-sync", "--no-first-run",
		"--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + profile, "--window-size=1400,1100",
		"--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--dump-dom", "--screenshot="+png, url)...)
	// Chromium forks helpers (zygote, renderer, GPU); a group of its own
	// lets the test kill all of them, also on timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+profile)
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers that outlived the browser
	}
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", bin, err, lastLines(stderr.String(), 20))
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", png, err)
	} else {
		t.Logf("screenshot: %s", png)
	}
	return stdout.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var (
	vertexNameRe = regexp.MustCompile(`<text class="vertex-name"[^>]*>([^<]*)</text>`)
	taskRowRe    = regexp.MustCompile(`<tr class="task" data-vertex="(\d+)" data-subtask="(\d+)" data-records-in="(\d+)" data-records-out="(\d+)" data-rate-in="([0-9.]*)" data-rate-out="([0-9.]*)"`)
	cpRowRe      = regexp.MustCompile(`<tr class="checkpoint" data-id="(\d+)" data-status="([a-z_]+)"`)
	vertexBpRe   = regexp.MustCompile(`<g class="vertex" data-vertex="(\d+)" data-name="[^"]*" data-backpressure="([a-z]+)"`)
	cspBlockedRe = regexp.MustCompile(`data-csp-violations="(\d+)"`)
)

// checkPolicyKept fails when the page's Content-Security-Policy blocked
// anything while Chromium ran it (the page counts violations on its body),
// and when the page's script did not run at all (a wrong script hash).
func checkPolicyKept(t *testing.T, dom string) {
	t.Helper()
	if m := cspBlockedRe.FindStringSubmatch(dom); m != nil {
		t.Errorf("the page's Content-Security-Policy blocked %s things in Chromium", m[1])
	}
	if len(taskRows(dom)) == 0 {
		t.Error("no task rows: the page's script did not run (blocked by its policy?)")
	}
}

type taskRow struct {
	vertex, subtask       int
	recordsIn, recordsOut int64
	rateIn, rateOut       float64
	hasRateIn, hasRateOut bool
}

func taskRows(dom string) []taskRow {
	var rows []taskRow
	for _, m := range taskRowRe.FindAllStringSubmatch(dom, -1) {
		var r taskRow
		r.vertex, _ = strconv.Atoi(m[1])
		r.subtask, _ = strconv.Atoi(m[2])
		r.recordsIn, _ = strconv.ParseInt(m[3], 10, 64)
		r.recordsOut, _ = strconv.ParseInt(m[4], 10, 64)
		r.rateIn, _ = strconv.ParseFloat(m[5], 64)
		r.rateOut, _ = strconv.ParseFloat(m[6], 64)
		r.hasRateIn, r.hasRateOut = m[5] != "", m[6] != ""
		rows = append(rows, r)
	}
	return rows
}

// slowAPI fronts the status server at addr with a proxy that holds every
// /api/v1/job answer for 300ms and returns the page's URL through it.
// Chromium's virtual time runs the page's one-second poll timer at once,
// but waits for the network in real time: the delay spaces the snapshots
// beyond the tasks' publishing interval (200ms), so a live job's counters
// move between them as they do for a person watching.
func slowAPI(t *testing.T, addr string) string {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: addr}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{DisableKeepAlives: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/job" {
			time.Sleep(300 * time.Millisecond)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

func artifact(t *testing.T, name string) string {
	return filepath.Join(t.ArtifactDir(), name)
}

// The page draws what /api/v1/job says: every vertex by name, a row per
// task with its counts, throughput from two snapshots, backpressure
// levels, the checkpoint history and the last failure.
func TestPageRendersJobStatus(t *testing.T) {
	status := fakeStatus(time.Now())
	reg, _ := fakeMetrics()
	srv := httptest.NewServer(newStatusHandler(status, reg, jobControl{}))
	defer srv.Close()

	dom := renderPage(t, srv.URL+"/", 3*time.Second, artifact(t, "status-page-fake.png"))
	checkPolicyKept(t, dom)
	want := status()

	var names []string
	for _, m := range vertexNameRe.FindAllStringSubmatch(dom, -1) {
		names = append(names, html.UnescapeString(m[1]))
	}
	for _, v := range want.Graph.Vertices {
		if !strings.Contains(strings.Join(names, "|"), v.Name) {
			t.Errorf("graph shows vertices %q, lacks %q", names, v.Name)
		}
	}
	rows := taskRows(dom)
	if len(rows) != len(want.Tasks) {
		t.Fatalf("%d task rows, want %d", len(rows), len(want.Tasks))
	}
	for _, r := range rows {
		if r.vertex == 1 && (!r.hasRateOut || r.rateOut < 1000 || r.recordsOut == 0) {
			t.Errorf("source task %d: records out %d at %.1f/s, want the fake's ~40k/s", r.subtask, r.recordsOut, r.rateOut)
		}
	}
	levels := map[string]string{}
	for _, m := range vertexBpRe.FindAllStringSubmatch(dom, -1) {
		levels[m[1]] = m[2]
	}
	// Sources backpressured 60-70% of the time, the counters 15-20%, the
	// sink never.
	if levels["1"] != "high" || levels["2"] != "low" || levels["3"] != "ok" {
		t.Errorf("backpressure levels by vertex %v, want 1:high 2:low 3:ok", levels)
	}
	cps := cpRowRe.FindAllStringSubmatch(dom, -1)
	if len(cps) != len(want.Checkpoints.Recent) || cps[0][1] != "43" || cps[0][2] != "in_progress" {
		t.Errorf("checkpoint rows %v, want %d newest first", cps, len(want.Checkpoints.Recent))
	}
	for _, s := range []string{"checkpoint 36 expired after 2m0s", "injected failure at record 10000", ">wordcount<", "41",
		"Resumed: restored from checkpoint 29 at /var/lib/wordcount/chk-29", "Source: lines: lines-0[120,) lines-1[98,)"} {
		if !strings.Contains(dom, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// Chromium on the page of a real running job: the job's own vertex names,
// a row per subtask, and records counted and flowing.
func TestPageRendersRunningJob(t *testing.T) {
	j := startLiveJob(t)
	j.waitReady(t, 5*time.Second)

	dom := renderPage(t, slowAPI(t, j.addr), 3*time.Second, artifact(t, "status-page-live.png"))
	j.stop(t)
	checkPolicyKept(t, dom)

	names := strings.Join(func() (n []string) {
		for _, m := range vertexNameRe.FindAllStringSubmatch(dom, -1) {
			n = append(n, html.UnescapeString(m[1]))
		}
		return n
	}(), " | ")
	for _, n := range j.names {
		if !strings.Contains(names, n) {
			t.Errorf("graph shows %q, lacks %q", names, n)
		}
	}
	rows := taskRows(dom)
	var out int64
	flowing := false
	for _, r := range rows {
		out += r.recordsOut
		flowing = flowing || r.rateOut > 0
	}
	if len(rows) != 4 || out == 0 || !flowing {
		t.Errorf("%d task rows with %d records out (flowing: %v), want 4 rows and records moving", len(rows), out, flowing)
	}
	if len(cpRowRe.FindAllStringSubmatch(dom, -1)) == 0 {
		t.Error("no checkpoint rows, though the job checkpoints every 100ms")
	}
	if !strings.Contains(dom, ">live-numbers<") {
		t.Error("page lacks the job name live-numbers")
	}
}
