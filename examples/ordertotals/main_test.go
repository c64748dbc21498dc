package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/examples/internal/exampletest"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func runWith(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return exampletest.Run(t, parseFlags, run, args...)
}

// The default run (in-process Kafka and registry, generated input of v1
// then v2 orders and undecodable records, parallelism 2) is exact, down
// to the numbers: the input is a function of the seed, and no order is
// late whatever the watermark's timing.
func TestDefaultRunIsExact(t *testing.T) {
	out, code := runWith(t)
	if code != 0 || !strings.Contains(out, "ordertotals: OK totals=98 orders=4950 v1=2481 v2=2469 dead-letters=50\n") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// Injected task failures with frequent checkpoints: the job restarts from
// restored checkpoints (window sums, timers, source offsets) and both
// outputs, totals and dead letters, are still exact.
func TestFailEveryIsExact(t *testing.T) {
	out, code := runWith(t, "--orders", "20000", "--fail-every", "2500", "--checkpoint-interval", "20ms")
	if code != 0 || !strings.Contains(out, "ordertotals: OK ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, " 0 injected failures") || strings.Contains(out, " 1 injected failures") {
		t.Fatalf("fewer than two failures injected:\n%s", out)
	}
	t.Log(lastLines(out, 2))
}

// externalPair starts an in-process Kafka and registry of the test's own,
// for runs with --brokers and --registry.
func externalPair(t *testing.T) (brokers, registryURL string, cl *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return strings.Join(c.ListenAddrs(), ","), reg.URL(), cl
}

// With --brokers and --registry the example writes its input through that
// registry, and a second run on the same topics writes no more input and
// finds the output of the first: its totals are then written twice,
// which the verifier catches, naming the window.
func TestSecondRunOnTheSameTopicsIsCaught(t *testing.T) {
	brokers, url, _ := externalPair(t)
	args := []string{"--brokers", brokers, "--registry", url, "--orders", "2000", "--parallelism", "1"}
	out, code := runWith(t, args...)
	if code != 0 || !strings.Contains(out, "ordertotals: OK ") || !strings.Contains(out, "wrote 2000 orders") {
		t.Fatalf("first run: exit %d, output:\n%s", code, out)
	}
	out, code = runWith(t, args...)
	if code != 1 || strings.Contains(out, "wrote ") || !strings.Contains(out, "ordertotals: FAILED") || !strings.Contains(out, "written more than once") {
		t.Fatalf("second run: exit %d, output:\n%s", code, out)
	}
}

// The verifier is not fooled: a total the job did not write (here one
// written before the job, outside any transaction, not even Avro) makes
// the run fail, naming it.
func TestWrongOutputFailsTheRun(t *testing.T) {
	brokers, url, cl := externalPair(t)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "totals"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "totals", Key: []byte("acme"), Value: []byte("acme 1767225600000 9999")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, code := runWith(t, "--brokers", brokers, "--registry", url, "--orders", "1000")
	if code != 1 || !strings.Contains(out, "ordertotals: FAILED") || !strings.Contains(out, "output totals/0@0: not a shop.Total") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--brokers", "127.0.0.1:9092"}, "--brokers and --registry go together"},
		{[]string{"--registry", "http://127.0.0.1:8081"}, "--brokers and --registry go together"},
		{[]string{"--brokers", "127.0.0.1:9092", "--registry", "localhost:8081"}, `--registry "localhost:8081" is not an http or https URL`},
		{[]string{"--parallelism", "0"}, "parallelism"},
		{[]string{"--unbounded", "--checkpoint-interval", "0"}, "--unbounded needs --checkpoint-interval > 0"},
		{[]string{"--input-topic", "x", "--dlq-topic", "x"}, "must differ"},
		{[]string{"--window", "0s"}, "--window must be a positive whole number of milliseconds"},
		{[]string{"--out-of-orderness", "-1s"}, "--out-of-orderness must be a non-negative"},
		{[]string{"--fail-every", "-1"}, "--fail-every must not be negative"},
		{[]string{"--orders", "-1"}, "--orders must not be negative"},
		{[]string{"--transactional-id-prefix", ""}, "--transactional-id-prefix must not be empty"},
		{[]string{"--no-such-flag"}, "not defined"},
		{[]string{"extra"}, "unexpected arguments: extra"},
	} {
		var errOut bytes.Buffer
		_, err := parseFlags(c.args, &errOut)
		if err == nil || !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "usage: ordertotals") {
			t.Errorf("flags %q: err=%v, printed:\n%s", c.args, err, firstLines(errOut.String(), 3))
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

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// --unbounded runs until interrupted (here: its context ends), and what
// it committed by then is verified as a prefix: the windows the watermark
// closed are exact and written once, the last ones are still open.
func TestUnboundedRunIsVerifiedAsAPrefix(t *testing.T) {
	o, err := parseFlags([]string{"--unbounded", "--checkpoint-interval", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := run(ctx, o, &out, slog.New(slog.DiscardHandler))
	if code != 0 || err != nil || !strings.Contains(out.String(), "ordertotals: OK ") || !strings.Contains(out.String(), "(stopped before the end: ") {
		t.Fatalf("exit %d, %v, output:\n%s", code, err, out.String())
	}
	t.Log(lastLines(out.String(), 1))
}
