package main

import (
	"strings"
	"testing"
	"time"
)

// The harness's own pure parts; nothing here starts a broker or a JVM.

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{100, 1024} {
		counts := make([]int64, vocabulary)
		v := appendPayload(nil, 123456, size, counts)
		if len(v) != size {
			t.Fatalf("size %d: payload is %d bytes", size, len(v))
		}
		if id := parseID(v, idDigits); id != 123456 {
			t.Fatalf("id %d, want 123456", id)
		}
		words := strings.Fields(string(v))[1:]
		var n int64
		for _, c := range counts {
			n += c
		}
		if int64(len(words)) != n {
			t.Fatalf("size %d: %d words in the payload, %d counted", size, len(words), n)
		}
		for _, w := range words {
			if _, ok := wordIndex(w); !ok {
				t.Fatalf("bad word %q", w)
			}
		}
	}
}

func TestLatencyPayload(t *testing.T) {
	now := time.Now().UnixNano()
	v := appendLatencyPayload(nil, 'M', 42, now, 200)
	kind, id, sent, ok := parseLatencyPayload(v)
	if len(v) != 200 || !ok || kind != 'M' || id != 42 || sent != now {
		t.Fatalf("got %c %d %d %v from %q", kind, id, sent, ok, v)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Fatalf("median %v", m)
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	if p := percentile(ds, 50); p != 50*time.Millisecond {
		t.Fatalf("p50 %v", p)
	}
	if p := percentile(ds, 99); p != 99*time.Millisecond {
		t.Fatalf("p99 %v", p)
	}
	if p := percentile(ds, 100); p != 100*time.Millisecond {
		t.Fatalf("max %v", p)
	}
}

func TestQuickFlags(t *testing.T) {
	c, err := parseFlags([]string{"--records", "200000", "--quick"})
	if err != nil {
		t.Fatal(err)
	}
	if c.records != 200000 || c.reps != 1 || c.latDuration != 10*time.Second || c.records1k != 25000 {
		t.Fatalf("quick flags: %+v", c)
	}
}

// Every system of the tables runs: splitflow exactly-once included, and
// every exactly-once row is verified with read_committed.
func TestEverySystemIsAvailable(t *testing.T) {
	for _, s := range append(throughputSystems(), latencySystems()...) {
		if !s.Available() {
			t.Fatalf("%s is not available", s.Spec().Label())
		}
		if s.Spec().Guarantee == "exactly-once" && !s.Spec().ReadCommitted {
			t.Fatalf("%s is exactly-once but not read with read_committed", s.Spec().Label())
		}
	}
}
