package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/status"
)

const savepointTestToken = "a-token-of-the-status-server"

// runningJob starts an unbounded job (generated records, checkpoints every
// 20ms) whose status server has the token and whose savepoints go under
// savepointRoot, and returns its URL and the channel Execute's error
// arrives on, once it is ready (a checkpoint completed).
func runningJob(t *testing.T, savepointRoot string) (string, <-chan error) {
	t.Helper()
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) string { return strconv.FormatInt(i, 10) },
		datagen.WithRecordsPerSecond(2000), datagen.WithSplits(2))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(20*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()), runtime.WithHTTP("", status.WithListener(ln), status.WithToken(savepointTestToken)), runtime.WithSavepointDir(savepointRoot),
		runtime.WithLogger(slog.New(slog.DiscardHandler)))
	ds := runtime.Map(runtime.FromSource(env, src, "gen").UID("gen"), func(s string) (string, error) { return s, nil }).UID("map")
	runtime.SinkTo(ds, &discardSink{}).UID("sink")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	done, ended := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(ended)
		done <- env.Execute(ctx, "savepoint-cli")
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Error("the job did not end 30s after its context")
		}
	})
	base := "http://" + ln.Addr().String()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if res, err := http.Get(base + "/readyz"); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the job was not ready 30s after start")
		}
	}
	return base, done
}

var savepointLine = regexp.MustCompile(`^savepoint of checkpoint (\d+): (\S+)\n$`)

// savepointAt checks the CLI's line and that it names a completed
// savepoint under target, of the checkpoint it says.
func savepointAt(t *testing.T, out, target string) string {
	t.Helper()
	m := savepointLine.FindStringSubmatch(out)
	if m == nil || !strings.HasPrefix(m[2], target+string(filepath.Separator)) {
		t.Fatalf("output %q, want one line naming a savepoint under %s", out, target)
	}
	c, err := checkpoint.OpenRestorePoint(m[2])
	if err != nil {
		t.Fatal(err)
	}
	if !c.Savepoint || strconv.FormatInt(c.ID, 10) != m[1] {
		t.Fatalf("%s holds checkpoint %d (savepoint %v), the CLI said %s", m[2], c.ID, c.Savepoint, m[1])
	}
	return m[2]
}

// Rule: splitflow savepoint trigger takes a savepoint of a running job
// through its status server and prints its path once complete, the job
// going on; savepoint stop takes one and the job ends with it. The token
// comes from SPLITFLOW_HTTP_TOKEN or --token-file; without it the server's
// refusal is the command's error, and nothing is written. --path names a
// place under the job's savepoint root; one outside it is refused.
func TestSavepointCommandsOnARunningJob(t *testing.T) {
	target := t.TempDir()
	base, done := runningJob(t, target)
	getenv = func(string) string { return "" }
	t.Cleanup(func() { getenv = os.Getenv })

	var out bytes.Buffer
	err := run(context.Background(), []string{"savepoint", "trigger", "--url", base, "--path", target}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("trigger without a token: %v, want the server's 401", err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Fatalf("a refused trigger wrote %d entries under %s", len(entries), target)
	}

	getenv = func(k string) string {
		if k == "SPLITFLOW_HTTP_TOKEN" {
			return savepointTestToken
		}
		return ""
	}
	out.Reset()
	if err := run(context.Background(), []string{"savepoint", "trigger", "--url", base + "/", "--path", target}, &out, &out); err != nil {
		t.Fatalf("trigger: %v\n%s", err, out.String())
	}
	first := savepointAt(t, out.String(), target)
	out.Reset()
	if err := run(context.Background(), []string{"savepoint", "trigger", "--url", base, "--path", "nightly"}, &out, &out); err != nil {
		t.Fatalf("trigger --path nightly: %v\n%s", err, out.String())
	}
	savepointAt(t, out.String(), filepath.Join(target, "nightly"))
	outside := t.TempDir()
	err = run(context.Background(), []string{"savepoint", "trigger", "--url", base, "--path", outside}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "outside the job's savepoint root") {
		t.Fatalf("trigger --path outside the savepoint root: %v, want the server's 400", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a refused trigger wrote %d entries under %s", len(entries), outside)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended after a trigger: %v", err)
	default:
	}

	getenv = func(string) string { return "" }
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(savepointTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"savepoint", "stop", "--url", base, "--token-file", tokenFile, "--path", target}, &out, &out); err != nil {
		t.Fatalf("stop: %v\n%s", err, out.String())
	}
	if second := savepointAt(t, out.String(), target); second == first {
		t.Fatalf("stop answered the trigger's savepoint %s", first)
	}
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrStopped) {
			t.Fatalf("the job stopped with a savepoint ended with %v, want runtime.ErrStopped", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job still runs 30s after savepoint stop answered")
	}

	// The job is gone: the command says it cannot reach it.
	if err := run(context.Background(), []string{"savepoint", "trigger", "--url", base, "--token-file", tokenFile, "--path", target}, &out, &out); err == nil || errors.Is(err, errUsage) {
		t.Fatalf("trigger on a job that ended: %v, want a connection error", err)
	}
}

// Rule: the savepoint commands' bad usage is exit status 2, before any
// request: no URL, a URL that is not http(s), extra arguments.
func TestSavepointCommandsBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"savepoint", "trigger"},
		{"savepoint", "stop", "--url", "ftp://127.0.0.1:1"},
		{"savepoint", "trigger", "--url", "http://127.0.0.1:1", "extra"},
		{"savepoint", "trigger", "--no-such-flag"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}
