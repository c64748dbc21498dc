package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

// BenchmarkDistributedAutoscale runs the autoscale measurement
// (autoscale.go) once on a local broker (or KAFKA_BOOTSTRAP_SERVERS):
// a distributed wordcount under steady input taken 1 -> 3 -> 2 -> 4 -> 1
// processes, one process at a time. It reports the handover's p50 and
// maximum, the lowest one-second output rate around a change against the
// steady rate, and fails unless the output is exact. `make bench` runs
// it; BENCH_AUTOSCALE_HOLD (default 10s, the steady time before each
// change) and BENCH_AUTOSCALE_RATE (input lines/s, default 1000) make a
// longer or heavier soak.
func BenchmarkDistributedAutoscale(b *testing.B) {
	hold := 10 * time.Second
	if v := os.Getenv("BENCH_AUTOSCALE_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("BENCH_AUTOSCALE_HOLD: %v", err)
		}
		hold = d
	}
	rate := 1000
	if v := os.Getenv("BENCH_AUTOSCALE_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("BENCH_AUTOSCALE_RATE: %v", err)
		}
		rate = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	root, err := repoRoot()
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	bin, err := buildWordcount(ctx, root, tmp)
	if err != nil {
		b.Fatal(err)
	}
	broker, err := kafkatest.Start(ctx)
	if err != nil {
		b.Skipf("no Kafka broker: %v", err)
	}
	defer func() { _ = broker.Close() }()
	defer killAll()
	b.ResetTimer()
	for range b.N {
		r, err := runAutoscale(ctx, autoscaleConfig{seeds: broker.Addrs(), bin: bin, slots: 8, partitions: 8, rate: rate,
			hold: hold, checkpoint: 500 * time.Millisecond, schedule: []int{1, 3, 2, 4, 1}, tmp: tmp})
		if err != nil {
			b.Fatal(err)
		}
		// On stderr whole: go test cuts a benchmark's log to ten lines.
		fmt.Fprintf(os.Stderr, "\n%s\n", r.markdown())
		if !r.exact {
			b.Fatalf("output not exact: %s", r.verdict)
		}
		p50, worst := r.handovers()
		b.ReportMetric(p50.Seconds(), "handover-p50-s")
		b.ReportMetric(worst.Seconds(), "handover-max-s")
		dip := 1.0
		for _, ch := range r.changes {
			dip = min(dip, ch.minRate/r.steady)
		}
		b.ReportMetric(dip, "min-rate-vs-steady")
		b.ReportMetric(0, "ns/op")
	}
}
