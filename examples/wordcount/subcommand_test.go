package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// wordcount write-input fills the input topic once; wordcount verify
// passes on a complete exactly-once output and fails, after its timeout,
// on an output with counts missing. Bad arguments are usage errors. The
// input is 5000 lines of 4 words (--input-file), not the built-in text.
func TestWriteInputAndVerify(t *testing.T) {
	input := smallInput(t, 5000)
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub := func(name string, args ...string) (int, string) {
		var out, errs bytes.Buffer
		code, err := runSubcommand(ctx, name, args, &out, &errs)
		if err != nil {
			errs.WriteString(err.Error())
		}
		return code, out.String() + errs.String()
	}
	if code, out := sub("write-input", "--brokers", brokers, "--input-topic", "wi-lines", "--output-topic", "wi-counts", "--input-file", input); code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("write-input: %d %s", code, out)
	}
	if code, out := sub("write-input", "--brokers", brokers, "--input-topic", "wi-lines", "--output-topic", "wi-counts", "--input-file", input); code != 0 || !strings.Contains(out, "nothing written") {
		t.Fatalf("second write-input: %d %s", code, out)
	}
	// Nothing counted yet: counts missing until the timeout.
	if code, out := sub("verify", "--brokers", brokers, "--input-topic", "wi-lines", "--output-topic", "wi-counts", "--timeout", "3s"); code != 1 || !strings.Contains(out, "FAILED") || !strings.Contains(out, "missing=") {
		t.Fatalf("verify of an empty output: %d %s", code, out)
	}
	out, code := runWith(t, "--brokers", brokers, "--input-topic", "wi-lines", "--output-topic", "wi-counts", "--checkpoint-interval", "100ms")
	if code != 0 || !strings.Contains(out, "exactly-once: OK") {
		t.Fatalf("the job: %d\n%s", code, out)
	}
	if code, out := sub("verify", "--brokers", brokers, "--input-topic", "wi-lines", "--output-topic", "wi-counts"); code != 0 || !strings.Contains(out, "exactly-once: OK words=91 updates=20000") {
		t.Fatalf("verify: %d %s", code, out)
	}
	for _, args := range [][]string{{}, {"--brokers", brokers, "extra"}, {"--brokers", brokers, "--timeout", "0s"}} {
		if code, out := sub("verify", args...); code != 2 {
			t.Fatalf("verify %q: exit %d, want a usage error\n%s", args, code, out)
		}
	}
}
