// Package pagetest checks the status page the way a person sees it:
// headless Chromium loads it, runs its script against the live API for a
// few seconds of virtual time, and the test reads the DOM Chromium
// rendered. A screenshot of the page goes to the test's artifact directory
// (kept with `go test -artifacts -outputdir DIR`). The status server's
// tests (runtime/status) and the running job's (runtime) share it.
package pagetest

import (
	"bytes"
	"context"
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

// Render loads url in headless Chromium, lets the page run for budget
// of virtual time (its timers, so its polls, run; network waits are real),
// and returns the DOM; a screenshot is written to png.
func Render(t *testing.T, url string, budget time.Duration, png string) string {
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

// The page's elements as Chromium renders them: a vertex's name, a
// checkpoint row (id, status), a vertex's backpressure level.
var (
	VertexNameRe         = regexp.MustCompile(`<text class="vertex-name"[^>]*>([^<]*)</text>`)
	taskRowRe            = regexp.MustCompile(`<tr class="task" data-vertex="(\d+)" data-subtask="(\d+)" data-records-in="(\d+)" data-records-out="(\d+)" data-rate-in="([0-9.]*)" data-rate-out="([0-9.]*)"`)
	CheckpointRowRe      = regexp.MustCompile(`<tr class="checkpoint" data-id="(\d+)" data-status="([a-z_]+)"`)
	VertexBackpressureRe = regexp.MustCompile(`<g class="vertex" data-vertex="(\d+)" data-name="[^"]*" data-backpressure="([a-z]+)"`)
	cspBlockedRe         = regexp.MustCompile(`data-csp-violations="(\d+)"`)
)

// CheckPolicyKept fails when the page's Content-Security-Policy blocked
// anything while Chromium ran it (the page counts violations on its body),
// and when the page's script did not run at all (a wrong script hash).
func CheckPolicyKept(t *testing.T, dom string) {
	t.Helper()
	if m := cspBlockedRe.FindStringSubmatch(dom); m != nil {
		t.Errorf("the page's Content-Security-Policy blocked %s things in Chromium", m[1])
	}
	if len(TaskRows(dom)) == 0 {
		t.Error("no task rows: the page's script did not run (blocked by its policy?)")
	}
}

// TaskRow is one row of the page's task table.
type TaskRow struct {
	Vertex, Subtask       int
	RecordsIn, RecordsOut int64
	RateIn, RateOut       float64
	HasRateIn, HasRateOut bool
}

// TaskRows reads the task table of dom.
func TaskRows(dom string) []TaskRow {
	var rows []TaskRow
	for _, m := range taskRowRe.FindAllStringSubmatch(dom, -1) {
		var r TaskRow
		r.Vertex, _ = strconv.Atoi(m[1])
		r.Subtask, _ = strconv.Atoi(m[2])
		r.RecordsIn, _ = strconv.ParseInt(m[3], 10, 64)
		r.RecordsOut, _ = strconv.ParseInt(m[4], 10, 64)
		r.RateIn, _ = strconv.ParseFloat(m[5], 64)
		r.RateOut, _ = strconv.ParseFloat(m[6], 64)
		r.HasRateIn, r.HasRateOut = m[5] != "", m[6] != ""
		rows = append(rows, r)
	}
	return rows
}

// SlowAPI fronts the status server at addr with a proxy that holds every
// /api/v1/job answer for 300ms and returns the page's URL through it.
// Chromium's virtual time runs the page's one-second poll timer at once,
// but waits for the network in real time: the delay spaces the snapshots
// beyond the tasks' publishing interval (200ms), so a live job's counters
// move between them as they do for a person watching.
func SlowAPI(t *testing.T, addr string) string {
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

// Artifact is where a test's file name goes among its artifacts.
func Artifact(t *testing.T, name string) string {
	return filepath.Join(t.ArtifactDir(), name)
}
