package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/status"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runResult is how one run of wordcount ended.
type runResult struct {
	code int
	err  error
}

// startRun runs wordcount with args in the background and returns its
// status server's base URL (with --http) and the channel its end arrives
// on; out collects what it prints.
func startRun(ctx context.Context, t *testing.T, out *bytes.Buffer, args ...string) (string, <-chan runResult) {
	t.Helper()
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	addrs := make(chan string, 1)
	o.onHTTP = func(a string) { addrs <- a }
	done := make(chan runResult, 1)
	go func() {
		code, err := run(ctx, o, out, slog.New(slog.DiscardHandler))
		done <- runResult{code, err}
	}()
	if o.job.HTTP.Addr == "" {
		return "", done
	}
	select {
	case a := <-addrs:
		return "http://" + a, done
	case r := <-done:
		t.Fatalf("run ended before serving: %d %v\n%s", r.code, r.err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("no status server 30s after start")
	}
	return "", nil
}

// produceLines writes n lines of four words into topic.
func produceLines(ctx context.Context, t *testing.T, seeds []string, topic string, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := from; i < from+n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("w%d w%d w%d w%d", i%50, i%7, i%91, i%13))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Rule (stop with savepoint, restore at another parallelism): an
// unbounded wordcount stopped with a savepoint through its status server
// commits up to it and ends exact; more input arrives; a wordcount started
// from the savepoint on the same cluster at another parallelism counts on
// from the savepoint's counts and offsets, and what read_committed sees
// over both runs is every word's counts 1..n exactly once, n its count in
// the whole input.
func TestStopWithSavepointThenRestoreAtAnotherParallelismIsExact(t *testing.T) {
	t.Run("unbounded", func(t *testing.T) { stopWithSavepointThenRestore(t, restoreUnbounded) })
	// Rule: a bounded run from an unbounded job's savepoint reads the
	// input up to its end offsets as of the restore and ends by itself
	// (its splits from the savepoint have no end of their own).
	t.Run("bounded", func(t *testing.T) { stopWithSavepointThenRestore(t, restoreBounded) })
	// Rule: a job moves from one process to a distributed job through a
	// savepoint: two processes of --distributed with 3 slots started
	// from it each restore their slots' share of it.
	t.Run("distributed", func(t *testing.T) { stopWithSavepointThenRestore(t, restoreDistributed) })
}

// How the second run of stopWithSavepointThenRestore goes on from the
// savepoint.
const (
	restoreUnbounded = iota
	restoreBounded
	restoreDistributed
)

func stopWithSavepointThenRestore(t *testing.T, mode int) {
	bounded := mode == restoreBounded
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	brokers := strings.Join(seeds, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var text strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&text, "w%d w%d w%d w%d\n", i%50, i%7, i%91, i%13)
	}
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvHTTPToken, wordcountToken)
	var out1 bytes.Buffer
	savepoints := t.TempDir()
	base, done1 := startRun(ctx, t, &out1, "--brokers", brokers, "--input-file", input, "--unbounded", "--http", "127.0.0.1:0",
		"--checkpoint-interval", "100ms", "--parallelism", "2", "--checkpoint-dir", t.TempDir(), "--savepoint-dir", savepoints)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := fetch(t, base+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run was not ready 30s after start")
		}
	}
	// More input while it runs, so the stop may come with records in
	// flight.
	produceLines(ctx, t, seeds, "lines", 20000, 5000)
	// A target relative to --savepoint-dir, the only place a request
	// may name.
	target := filepath.Join(savepoints, "stopped")
	body, _ := json.Marshal(map[string]any{"target": "stopped", "stop": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/savepoints", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+wordcountToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sp status.Savepoint
	err = json.NewDecoder(res.Body).Decode(&sp)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.HasPrefix(sp.Path, target+string(filepath.Separator)) {
		t.Fatalf("stop with savepoint: %d %v %+v", res.StatusCode, err, sp)
	}
	select {
	case r := <-done1:
		if r.code != 0 || !strings.Contains(out1.String(), "exactly-once: OK") {
			t.Fatalf("first run: exit %d (%v), output:\n%s", r.code, r.err, out1.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first run did not end 60s after its stop with savepoint")
	}

	// Input the first run never saw, then the second run from the
	// savepoint, with one more subtask per operator and no status server.
	produceLines(ctx, t, seeds, "lines", 25000, 10000)
	os.Unsetenv(EnvHTTPToken) // the second run serves nothing; t.Setenv restores it
	ctx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	var out2, out3 bytes.Buffer
	args := []string{"--brokers", brokers, "--from-savepoint", sp.Path,
		"--checkpoint-interval", "100ms", "--checkpoint-dir", t.TempDir()}
	switch mode {
	case restoreUnbounded:
		args = append(args, "--parallelism", "3", "--unbounded")
	case restoreBounded:
		args = append(args, "--parallelism", "3")
	case restoreDistributed:
		args = append(args, "--distributed", "--job-name", "moved", "--slots", "3")
	}
	_, done2 := startRun(ctx2, t, &out2, args...)
	var done3 <-chan runResult
	if mode == restoreDistributed {
		_, done3 = startRun(ctx2, t, &out3, args...)
	}
	want, err := inputCounts(ctx, seeds, "lines", nil)
	if err != nil {
		t.Fatal(err)
	}
	var total int
	for _, n := range want {
		total += int(n)
	}
	var r report
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if r, err = verify(ctx, seeds, "counts", want, true, false, nil); err != nil {
			t.Fatal(err)
		}
		if !r.ok() {
			t.Fatalf("output while the second run runs: %+v", r)
		}
		if r.updates >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second run committed %d of %d updates in 90s; output:\n%s", r.updates, total, out2.String())
		}
	}
	if !bounded {
		stop2()
	}
	select {
	case r := <-done2:
		// A distributed process leaves the verification to wordcount
		// verify, as this test does below.
		if r.code != 0 || (mode != restoreDistributed && !strings.Contains(out2.String(), "exactly-once: OK")) {
			t.Fatalf("second run: exit %d (%v), output:\n%s", r.code, r.err, out2.String())
		}
	case <-time.After(60 * time.Second):
		if bounded {
			t.Fatalf("the bounded second run did not end by itself 60s after committing all %d updates", total)
		}
		t.Fatal("the second run did not end 60s after its interrupt")
	}
	if done3 != nil {
		select {
		case r := <-done3:
			if r.code != 0 {
				t.Fatalf("the second process of the distributed run: exit %d (%v), output:\n%s", r.code, r.err, out3.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the second process of the distributed run did not end 60s after its interrupt")
		}
	}
	if r, err = verify(ctx, seeds, "counts", want, false, false, nil); err != nil || !r.ok() || r.updates != total {
		t.Fatalf("output over both runs: %+v (%v), want %d updates exactly once", r, err, total)
	}
	t.Logf("savepoint %s; %d words, %d updates over both runs", sp.Path, r.words, r.updates)
}
