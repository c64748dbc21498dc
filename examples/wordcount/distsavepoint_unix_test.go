//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/internal/testbin"
)

// splitflowCLI is the splitflow CLI, built as the image builds it
// (internal/testbin).
func splitflowCLI(t *testing.T) string {
	t.Helper()
	return testbin.Program(t, "github.com/splitflow/splitflow/cmd/splitflow")
}

// A distributed job's savepoint is restorable by every path, its output
// exact throughout: three --distributed processes of 6 slots count while
// input arrives; `splitflow savepoint stop --job ... --yes` takes one
// savepoint of every slot and every process exits with status 0; a
// wordcount in one process at parallelism 2 goes on from it
// (--from-savepoint) and stops with a savepoint of its own through its
// status server; two --distributed processes of a job of 4 slots (another
// slot count, so another job name) go on from that. The whole output,
// read with read_committed, holds every word's counts exactly 1..n.
func TestDistributedSavepointStopThenOneProcessThenAnotherSlotCountIsExact(t *testing.T) {
	cli := splitflowCLI(t)
	j := newDistJob(t, 6)
	root := j.args[slices.Index(j.args, "--checkpoint-dir")+1]
	j.write(1500)
	ps := []*distProc{j.start(), j.start(), j.start()}
	j.awaitSlots(ps...)
	j.awaitOutput(1500)
	j.write(600) // in flight when the stop comes
	savepoints := t.TempDir()
	var out, errOut bytes.Buffer
	// The command asks only of a job whose slots all run and whose group
	// is stable: the third process's slots may still be moving.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out.Reset()
		errOut.Reset()
		stop := exec.Command(cli, "savepoint", "stop", "--brokers", j.b.Bootstrap(), "--job", j.job,
			"--checkpoint-dir", root, "--target", savepoints, "--timeout", "3m", "--yes")
		stop.Stdout, stop.Stderr = &out, &errOut
		err := stop.Run()
		if err == nil {
			break
		}
		moving := strings.Contains(errOut.String(), "not Stable") || strings.Contains(errOut.String(), "owned by no process")
		if !moving || time.Now().After(deadline) {
			t.Fatalf("splitflow savepoint stop: %v\n%s%s\n%s", err, out.String(), errOut.String(), j.logs())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	sp := lines[len(lines)-1]
	if !strings.HasPrefix(sp, savepoints+"/savepoint-") {
		t.Fatalf("the savepoint's path, the last line: %q\n%s", sp, errOut.String())
	}
	for _, p := range ps {
		p.wait(t, time.Minute) // status 0
	}
	j.procs = nil

	// One process from it, stopped with a savepoint of its own.
	j.write(900)
	t.Setenv(EnvHTTPToken, wordcountToken)
	single := j.startProcess("single", "--brokers", j.b.Bootstrap(), "--input-topic", j.in, "--output-topic", j.out,
		"--transactional-id-prefix", j.job+".counts", "--unbounded", "--parallelism", "2", "--from-savepoint", sp,
		"--checkpoint-dir", t.TempDir(), "--checkpoint-interval", "200ms", "--http", "127.0.0.1:0", "--savepoint-dir", savepoints)
	j.awaitOutput(2 * j.lines)
	var addr []string
	for deadline := time.Now().Add(time.Minute); addr == nil; time.Sleep(100 * time.Millisecond) {
		if addr = regexp.MustCompile(`status page http://(\S+)/`).FindStringSubmatch(single.log.String()); addr == nil && time.Now().After(deadline) {
			t.Fatalf("no status page address in the single process's output:\n%s", single.log.String())
		}
	}
	body, _ := json.Marshal(map[string]any{"stop": true})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr[1]+"/api/v1/savepoints", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+wordcountToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sp2 struct{ Path string }
	err = json.NewDecoder(res.Body).Decode(&sp2)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || sp2.Path == "" {
		t.Fatalf("stop with savepoint: %d %v %+v\n%s", res.StatusCode, err, sp2, single.log.String())
	}
	single.wait(t, time.Minute)
	j.procs = nil
	os.Unsetenv(EnvHTTPToken)

	// Two processes of 4 slots from the second savepoint.
	j.write(900)
	j.job += "-4"
	j.args = []string{"--distributed", "--brokers", j.b.Bootstrap(), "--job-name", j.job, "--slots", "4",
		"--input-topic", j.in, "--output-topic", j.out, "--checkpoint-dir", t.TempDir(), "--checkpoint-interval", "200ms",
		"--session-timeout", "6s", "-v"}
	a := j.start("--from-savepoint", sp2.Path)
	j.awaitSlots(a)
	b := j.start()
	j.awaitSlots(b)
	j.exact()
	j.stopAll()
	t.Logf("savepoints: %s, then %s", sp, sp2.Path)
}
