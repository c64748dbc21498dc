package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/splitflow/splitflow/examples/internal/exampletest"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func runWith(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return exampletest.Run(t, parseFlags, run, args...)
}

// The default run (in-process Kafka, generated input, parallelism 2, no
// allowed lateness) is exact, down to the numbers: the input is a function
// of the seed and the verdicts a function of the input.
func TestDefaultRunIsExact(t *testing.T) {
	out, code := runWith(t)
	if code != 0 || !strings.Contains(out, "windows: OK windows=435 emissions=435 re-fired=0 late-events=390 events=20000\n") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// Allowed lateness re-fires windows, and the result is exact at
// parallelism 1 and 2, on both state backends.
func TestAllowedLatenessIsExact(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"p1", []string{"--parallelism", "1"}},
		{"p2", []string{"--parallelism", "2"}},
		{"p2-pebble", []string{"--parallelism", "2", "--state-backend", "pebble", "--state-dir", t.TempDir()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code := runWith(t, append(c.args, "--allowed-lateness", "30s")...)
			if code != 0 || !strings.Contains(out, "windows: OK windows=435 emissions=726 re-fired=291 late-events=397 events=20000\n") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
		})
	}
}

// Without lateness, at parallelism 1 and 3 and with small windows and no
// out-of-orderness: other shapes of the same rules.
func TestParallelismAndShapes(t *testing.T) {
	for _, args := range [][]string{
		{"--parallelism", "1"},
		{"--parallelism", "3", "--window", "10s", "--out-of-orderness", "0s", "--allowed-lateness", "1s", "--seed", "7"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, code := runWith(t, args...)
			if code != 0 || !strings.Contains(out, "windows: OK") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
			t.Log(lastLines(out, 1))
		})
	}
}

// Injected task failures with frequent checkpoints: the job restarts many
// times from restored checkpoints (window contents, timers and the
// watermark among them) and the output is still exact, with and without
// allowed lateness.
func TestFailEveryIsExact(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"no-lateness", nil},
		{"lateness-pebble", []string{"--allowed-lateness", "20s", "--state-backend", "pebble", "--state-dir", t.TempDir()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code := runWith(t, append(c.args, "--events", "20000", "--fail-every", "2500", "--checkpoint-interval", "20ms")...)
			if code != 0 || !strings.Contains(out, "windows: OK") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
			if strings.Contains(out, " 0 injected failures") || strings.Contains(out, " 1 injected failures") {
				t.Fatalf("fewer than two failures injected:\n%s", out)
			}
			t.Log(lastLines(out, 2))
		})
	}
}

// Bounded input needs no checkpoints: the output is committed once, at the
// end, and a failure starts over.
func TestWithoutCheckpointsIsExact(t *testing.T) {
	out, code := runWith(t, "--checkpoint-interval", "0", "--fail-every", "15000")
	if code != 0 || !strings.Contains(out, "windows: OK windows=435 emissions=435") || !strings.Contains(out, " 0 checkpoints") || strings.Contains(out, " 0 injected failures") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// newCluster starts an in-process Kafka of the test's own, for runs with
// --brokers on topics the test prepares.
func newCluster(t *testing.T) (string, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return strings.Join(c.ListenAddrs(), ","), cl
}

// The verifier is not fooled: a window count that the job did not write
// (here one written before the job, outside any transaction) makes the run
// fail, naming the window.
func TestWrongOutputFailsTheRun(t *testing.T) {
	brokers, cl := newCluster(t)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "window-counts"); err != nil {
		t.Fatal(err)
	}
	// ann's first window holds events: a count of 9999 is not its count.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "window-counts", Key: []byte("ann"), Value: []byte("1767225600000 1767225660000 9999")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, code := runWith(t, "--brokers", brokers)
	if code != 1 || !strings.Contains(out, "windows: FAILED") || !strings.Contains(out, "window ann [1767225600000,1767225660000): emitted counts [9999 ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// An input topic of several partitions (one that existed before, here
// empty, so the example writes each user's events into one of them by
// key): the watermark is then the minimum over partitions read in an
// order nobody controls, and the verifier checks what holds whatever the
// order.
func TestInputOfSeveralPartitions(t *testing.T) {
	brokers, cl := newCluster(t)
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, -1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	out, code := runWith(t, "--brokers", brokers, "--allowed-lateness", "30s")
	if code != 0 || !strings.Contains(out, "windows: OK") || !strings.Contains(out, "input of several partitions") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	t.Log(lastLines(out, 1))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--parallelism", "0"},
		{"--checkpoint-interval", "-1s"},
		{"--checkpoint-dir", "/tmp/x", "--checkpoint-interval", "0"},
		{"--input-topic", "x", "--late-topic", "x"},
		{"--window", "0s"},
		{"--window", "1500us"},
		{"--out-of-orderness", "-1s"},
		{"--allowed-lateness", "-1s"},
		{"--state-dir", "/tmp/x"},
		{"--no-such-flag"},
		{"extra"},
	} {
		var errOut bytes.Buffer
		if _, err := parseFlags(args, &errOut); err == nil || !strings.Contains(errOut.String(), "usage: windowcount") {
			t.Errorf("flags %q: err=%v, usage printed: %v", args, err, strings.Contains(errOut.String(), "usage"))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
