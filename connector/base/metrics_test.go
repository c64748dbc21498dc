package base

import (
	"github.com/splitflow/splitflow/metrics/metricstest"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/metrics"
)

// A reader whose consumer stalls shows it in its metrics (the backpressure
// rule made visible): the elements queue full, and the fetcher's time blocked
// on it growing while it waits, not only once it is let through. The metrics
// leave with the reader.
func TestQueueMetricsShowBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		g := metrics.NewRegistry(reg).Group("Source: mem", "mem", 0)
		r, _, _ := newTestReader(t, readerSetup{batch: 8, capacity: 3, metrics: g,
			setup: func(mr *memReader) { mr.maxFetches = 1000 }})
		if err := r.AddSplits([]testSplit{{ID: "s", End: math.MaxInt64}}); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the fetcher is parked in Put
		if c, _ := metricstest.Sum(t, reg, "splitflow_source_elements_queue_capacity", nil); c != 3 {
			t.Errorf("capacity %v, want 3", c)
		}
		if n, _ := metricstest.Sum(t, reg, "splitflow_source_elements_queue_batches", nil); n != 3 {
			t.Errorf("queue fill %v with a stalled consumer, want 3", n)
		}
		time.Sleep(time.Hour)
		if b, _ := metricstest.Sum(t, reg, "splitflow_source_fetcher_blocked_seconds_total", nil); b < 3600 || b > 3601 {
			t.Errorf("blocked %vs after an hour behind a stalled consumer, want 3600", b)
		}

		// One poll lets the fetcher put and fetch once more; it blocks
		// again, and the hour stays counted.
		if st, err := r.PollNext(newRecordingOutput()); err != nil || st != connector.MoreAvailable {
			t.Fatalf("PollNext = %v, %v", st, err)
		}
		synctest.Wait()
		time.Sleep(time.Minute)
		if b, _ := metricstest.Sum(t, reg, "splitflow_source_fetcher_blocked_seconds_total", nil); b < 3660 || b > 3661 {
			t.Errorf("blocked %vs, want 3660 over both waits", b)
		}

		closeReader(t, r)
		if _, found := metricstest.Sum(t, reg, "splitflow_source_elements_queue_batches", nil); found > 0 {
			t.Error("queue metrics outlive the closed reader")
		}
	})
}

// The queue counts blocked time for every putter, waits under way
// included, and nothing for a Put that found room.
func TestQueueBlockedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newElementsQueue[int](1)
		q.Put(0, 1) // room: no wait
		if d := q.BlockedTime(); d != 0 {
			t.Fatalf("blocked %v after a Put that found room", d)
		}
		go q.Put(1, 2)
		go q.Put(2, 3)
		time.Sleep(time.Second)
		synctest.Wait()
		if d := q.BlockedTime(); d != 2*time.Second {
			t.Fatalf("two putters blocked for 1s: %v, want 2s", d)
		}
		q.Poll() // one putter gets in
		synctest.Wait()
		time.Sleep(time.Second)
		if d := q.BlockedTime(); d != 3*time.Second {
			t.Fatalf("after one got in and another second: %v, want 3s", d)
		}
		q.Close()
		synctest.Wait()
		if d := q.BlockedTime(); d != 3*time.Second {
			t.Fatalf("after close: %v, want 3s", d)
		}
	})
}
