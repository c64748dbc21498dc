package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/examples/internal/exampletest"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/internal/testbin"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

func TestMain(m *testing.M) {
	code := kafkatest.Run(m)
	testbin.Cleanup()
	os.Exit(code)
}

// wordcountBinary is the wordcount program the process tests run, built
// as the image builds it (internal/testbin).
func wordcountBinary(t *testing.T) string {
	t.Helper()
	return testbin.Program(t, "github.com/splitflow/splitflow/examples/wordcount")
}

func runWith(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return exampletest.Run(t, parseFlags, run, args...)
}

// The default run (in-process Kafka, built-in text, heap state), the
// README's first command, ends exactly-once. Pebble's runs to the end are
// TestFailEveryIsExact's and the process-kill tests', on smaller inputs:
// the built-in text takes about 20 s a run under -race.
func TestDefaultRunIsExact(t *testing.T) {
	out, code := runWith(t)
	if code != 0 || !strings.Contains(out, "exactly-once: OK words=96 updates=1025000 duplicates=0 missing=0") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// smallInput writes lines lines of four words each (w0..w90, counts in
// the thousands) to a file of the test's, for --input-file: a smaller
// input than the built-in text for the runs that do their work more
// than once (restarts, replays), which run under -race.
func smallInput(t *testing.T, lines int) string {
	t.Helper()
	var text strings.Builder
	for i := range lines {
		fmt.Fprintf(&text, "w%d w%d w%d w%d\n", i%50, i%7, i%91, i%13)
	}
	input := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(input, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return input
}

// stateArgs chooses the state backend, with a state directory of the
// test's own for pebble.
func stateArgs(t *testing.T, backend string) []string {
	if backend == "pebble" {
		return []string{"--state-backend", backend, "--state-dir", t.TempDir()}
	}
	return []string{"--state-backend", backend}
}

// Injected task failures with frequent checkpoints: the job restarts many
// times from restored checkpoints and the output is still exact, on both
// state backends. The input is 40000 lines of 4 words (the built-in
// text's run is TestDefaultRunIsExact's), with a failure every 8000
// records read.
func TestFailEveryIsExact(t *testing.T) {
	input := smallInput(t, 40000)
	for _, backend := range []string{"heap", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			out, code := runWith(t, append(stateArgs(t, backend), "--input-file", input, "--fail-every", "8000", "--checkpoint-interval", "50ms", "--parallelism", "3")...)
			if code != 0 || !strings.Contains(out, "exactly-once: OK") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
			if strings.Contains(out, " 0 injected failures") {
				t.Fatalf("no failure was injected:\n%s", out)
			}
			t.Log(lastLines(out, 2))
		})
	}
}

// --emit latest with injected failures on both state backends: the count
// writes each changed word's latest count once per checkpoint, and what a
// read_committed consumer sees is, per word, strictly increasing counts
// ending at the word's true count, though restarts replayed records; far
// fewer records than --emit every's 80000 updates.
func TestEmitLatestIsExact(t *testing.T) {
	input := smallInput(t, 20000)
	for _, backend := range []string{"heap", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			out, code := runWith(t, append(stateArgs(t, backend), "--emit", "latest", "--input-file", input, "--fail-every", "6000", "--checkpoint-interval", "50ms", "--parallelism", "3")...)
			if code != 0 || !strings.Contains(out, "exactly-once: OK words=91 ") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
			if strings.Contains(out, " 0 injected failures") {
				t.Fatalf("no failure was injected:\n%s", out)
			}
			var words, updates int
			if _, err := fmt.Sscanf(out[strings.Index(out, "exactly-once: OK"):], "exactly-once: OK words=%d updates=%d", &words, &updates); err != nil || updates >= 80000 {
				t.Fatalf("%d records committed (%v), want fewer than --emit every's 80000:\n%s", updates, err, out)
			}
			t.Log(lastLines(out, 2))
		})
	}
}

// The same with checkpoints on S3 (an in-process S3 server, reached
// through the AWS environment as a user's would be): every restart
// restores from the S3 prefix, and the output is exact. Pebble's SST files
// go to the prefix's shared/ objects, and only the new ones each time.
// The input is a quarter of the built-in text, so that the run stays well
// inside runWith's bound under -race on a loaded machine.
func TestFailEveryOnS3IsExact(t *testing.T) {
	srv := s3test.New(t)
	srv.Env(t)
	input := smallInput(t, 20000)
	for _, backend := range []string{"heap", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			url := srv.URLOf("wordcount-" + backend)
			out, code := runWith(t, append(stateArgs(t, backend), "--input-file", input, "--checkpoint-dir", url, "--fail-every", "8000", "--checkpoint-interval", "50ms", "--parallelism", "3")...)
			if code != 0 || !strings.Contains(out, "exactly-once: OK") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
			if strings.Contains(out, " 0 injected failures") {
				t.Fatalf("no failure was injected:\n%s", out)
			}
			st, err := checkpoint.OpenStorageForInspection(url)
			if err != nil {
				t.Fatal(err)
			}
			if ids, err := st.List(); err != nil || len(ids) == 0 {
				t.Fatalf("no checkpoint on %s after the run: %v, %v", url, ids, err)
			}
			t.Log(lastLines(out, 2))
		})
	}
}

// Bounded input needs no checkpoints: the output is committed once, at the
// end of the input, and a failure starts the job over without committing
// what the failed attempt wrote.
// The input is smaller than the built-in text: without checkpoints the
// failed attempt's work is all done again, and the test runs with -race.
func TestWithoutCheckpointsIsExact(t *testing.T) {
	input := smallInput(t, 20000)
	out, code := runWith(t, "--input-file", input, "--checkpoint-interval", "0", "--fail-every", "12000")
	if code != 0 || !strings.Contains(out, "exactly-once: OK") || !strings.Contains(out, " 0 checkpoints") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, " 0 injected failures") {
		t.Fatalf("no failure was injected:\n%s", out)
	}
	t.Log(lastLines(out, 2))
}

// Against a real broker, with a checkpoint directory and failures. The
// input is 40000 lines of 4 words, with a failure every 8000 records read.
func TestRunOnRealBrokerIsExact(t *testing.T) {
	b := kafkatest.Get(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	out, code := runWith(t, "--brokers", b.Bootstrap(), "--input-topic", "lines-"+suffix, "--output-topic", "counts-"+suffix,
		"--transactional-id-prefix", "wc-"+suffix, "--checkpoint-dir", t.TempDir(), "--input-file", smallInput(t, 40000),
		"--fail-every", "8000", "--checkpoint-interval", "200ms")
	if code != 0 || !strings.Contains(out, "exactly-once: OK words=91 updates=160000 duplicates=0 missing=0") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, " 0 injected failures") {
		t.Fatalf("no failure was injected:\n%s", out)
	}
	t.Log(lastLines(out, 2))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--parallelism", "0"},
		{"--checkpoint-interval", "-1s"},
		{"--unbounded", "--checkpoint-interval", "0"},
		{"--checkpoint-dir", "/tmp/x", "--checkpoint-interval", "0"},
		{"--input-topic", "x", "--output-topic", "x"},
		{"--unbounded", "--partition-discovery-interval", "-1s"},
		{"--partition-discovery-interval", "1s"}, // a bounded run discovers nothing
		{"--no-such-flag"},
		{"extra"},
	} {
		var errOut bytes.Buffer
		if _, err := parseFlags(args, &errOut); err == nil || !strings.Contains(errOut.String(), "usage: wordcount") {
			t.Errorf("flags %q: err=%v, usage printed: %v", args, err, strings.Contains(errOut.String(), "usage"))
		}
	}
}

// Unreachable brokers give a clear error within seconds, not a hang.
func TestUnreachableBrokers(t *testing.T) {
	began := time.Now()
	out, code := runWith(t, "--brokers", "127.0.0.1:1")
	if code != 1 || time.Since(began) > 20*time.Second {
		t.Fatalf("exit %d after %s:\n%s", code, time.Since(began), out)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Rule: --from-savepoint needs --brokers. The in-process Kafka is new in
// every run, so a savepoint's offsets and counts would meet another
// cluster's input; it is refused before anything starts, saying why. With
// --brokers it is taken bounded or --unbounded (a bounded run ends at the
// end offsets as of its start: the bounded case of
// TestStopWithSavepointThenRestoreAtAnotherParallelismIsExact).
func TestFromSavepointNeedsBrokers(t *testing.T) {
	sp := filepath.Join(t.TempDir(), "savepoint-3-x")
	_, err := parseFlags([]string{"--from-savepoint", sp, "--unbounded"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--from-savepoint needs --brokers") {
		t.Errorf("--from-savepoint without --brokers: %v, want a refusal saying it needs --brokers", err)
	}
	for _, args := range [][]string{
		{"--from-savepoint", sp, "--brokers", "127.0.0.1:9092", "--unbounded"},
		{"--from-savepoint", sp, "--brokers", "127.0.0.1:9092"},
	} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("flags %q: %v", args, err)
		}
	}
}
