package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/integration/registrytest"
	"github.com/twmb/franz-go/pkg/sr"
)

// realServices starts a real Kafka broker and a real Apicurio Registry at
// once (each takes seconds), or gets the external ones the environment
// names, and stops them when the test ends. Either missing skips the
// test, or fails it when real services are required (make test).
func realServices(t *testing.T) (*kafkatest.Broker, *registrytest.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	type started struct {
		b   *kafkatest.Broker
		r   *registrytest.Registry
		err error
	}
	bc, rc := make(chan started, 1), make(chan started, 1)
	go func() { b, err := kafkatest.Start(ctx); bc <- started{b: b, err: err} }()
	go func() { r, err := registrytest.Start(ctx); rc <- started{r: r, err: err} }()
	b, r := <-bc, <-rc
	if b.err == nil {
		t.Cleanup(func() { _ = b.b.Close() })
	}
	if r.err == nil {
		t.Cleanup(func() { _ = r.r.Close() })
	}
	for _, s := range []struct {
		what string
		err  error
		req  bool
	}{{"Kafka broker", b.err, kafkatest.Required()}, {"schema registry", r.err, registrytest.Required()}} {
		if s.err == nil {
			continue
		}
		if s.req {
			t.Fatalf("%s: %v", s.what, s.err)
		}
		t.Skipf("no %s (%v); see integration/kafkatest and integration/registrytest for how to get one", s.what, s.err)
	}
	return b.b, r.r
}

// Against a real broker and Apicurio Registry, with the input's subject
// BACKWARD compatible: the producer registers v1 and writes with it, then
// registers v2 (accepted: its new field has a default) and writes with it,
// with undecodable records among them; the job, failing and restarting,
// reads both versions into v2, registers its output schema, and its totals
// and dead letters are exact.
func TestRealBrokerAndRegistryV1ThenV2(t *testing.T) {
	b, reg := realServices(t)
	prefix := registrytest.Subject("ordertotals")
	in, out, dlq := prefix+"-orders", prefix+"-totals", prefix+"-dlq"
	res := reg.Client(t).SetCompatibility(context.Background(), sr.SetCompatibility{Level: sr.CompatBackward}, in+"-value")
	if err := res[0].Err; err != nil {
		t.Fatalf("set BACKWARD on %s-value: %v", in, err)
	}
	o, code := runWith(t, "--brokers", b.Bootstrap(), "--registry", reg.URL(),
		"--input-topic", in, "--output-topic", out, "--dlq-topic", dlq, "--transactional-id-prefix", prefix,
		"--orders", "3000", "--fail-every", "1000", "--checkpoint-interval", "100ms")
	m := regexp.MustCompile(`ordertotals: OK totals=(\d+) orders=(\d+) v1=(\d+) v2=(\d+) dead-letters=(\d+)\n`).FindStringSubmatch(o)
	if code != 0 || m == nil || m[3] == "0" || m[4] == "0" || m[5] == "0" {
		t.Fatalf("exit %d, output:\n%s", code, o)
	}
	if strings.Contains(o, " 0 injected failures") {
		t.Fatalf("no failure injected:\n%s", o)
	}
	t.Log(lastLines(o, 2))
}
