package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latencyRow is one system's end-to-end visibility latency.
type latencyRow struct {
	spec           Spec
	sys            System
	sent, received int64
	dups           int64
	p50, p99, pmax time.Duration
	cpuPerM        float64
	peakRSS        int64
	err            error
}

func runLatencySection(ctx context.Context, h *harness, res *results) error {
	for _, s := range latencySystems() {
		if !h.cfg.wants(s) {
			continue
		}
		row := &latencyRow{spec: s.Spec(), sys: s}
		res.latency = append(res.latency, row)
		if !s.Available() {
			continue
		}
		logf("latency: %s, %d records/s of %d B for %s", row.spec.Label(), h.cfg.latRate, h.cfg.latSize, h.cfg.latDuration)
		if err := runLatency(ctx, h, row); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("  failed: %v", err)
			row.err = err
			continue
		}
		logf("  p50 %s p99 %s max %s, received %d/%d", row.p50, row.p99, row.pmax, row.received, row.sent)
	}
	return nil
}

// Latency records: 'W' (warm-up) or 'M' (measured), the id in 11 digits, a
// space, the intended send time in Unix nanoseconds in 19 digits, padding.
func appendLatencyPayload(buf []byte, kind byte, id int64, sendNanos int64, size int) []byte {
	start := len(buf)
	buf = append(buf, kind)
	buf = appendPadded(buf, id, 11)
	buf = append(buf, ' ')
	buf = appendPadded(buf, sendNanos, 19)
	for len(buf)-start < size {
		buf = append(buf, ' ')
	}
	return buf
}

func parseLatencyPayload(v []byte) (kind byte, id, sendNanos int64, ok bool) {
	if len(v) < 32 {
		return 0, 0, 0, false
	}
	id, sendNanos = parseID(v[1:], 11), parseID(v[13:], 19)
	return v[0], id, sendNanos, id >= 0 && sendNanos >= 0
}

// runLatency: fresh input and output topics; the system starts; warm-up
// records trickle in until one comes out; then an open-loop producer sends
// latRate records/s for latDuration, each stamped with its intended send
// time (so a stalled producer does not hide latency), and a read_committed
// consumer of the output takes receive time minus that stamp.
func runLatency(ctx context.Context, h *harness, row *latencyRow) error {
	cfg := h.cfg
	slug := row.spec.Slug()
	in, out, appID := h.name("lat-in-"+slug), h.name("lat-out-"+slug), h.name("lat-app-"+slug)
	defer deleteTopicsWithPrefix(context.Background(), h.adm, in, out, appID)
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, h.adm, t, int32(cfg.partitions)); err != nil {
			return err
		}
	}
	total := int64(cfg.latRate) * int64(cfg.latDuration/time.Millisecond) / 1000

	cons, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond)) // see newWatcher
	if err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		lats     = make([]time.Duration, 0, total)
		seen     = make([]bool, total)
		dups     int64
		warm     atomic.Bool
		received atomic.Int64
	)
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			fs := cons.PollFetches(cctx)
			if cctx.Err() != nil {
				return
			}
			now := time.Now().UnixNano()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				kind, id, sent, ok := parseLatencyPayload(r.Value)
				switch {
				case !ok:
				case kind == 'W':
					warm.Store(true)
				case kind == 'M' && id < total:
					if seen[id] {
						dups++
						return
					}
					seen[id] = true
					lats = append(lats, time.Duration(now-sent))
					received.Add(1)
				}
			})
			mu.Unlock()
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
		cons.Close()
	}()

	time.Sleep(settle) // see runThroughput
	p, err := row.sys.Start(ctx, h, Job{Bootstrap: joinSeeds(h.seeds), Input: in, Output: out, AppID: appID, Parallelism: cfg.parallelism})
	if err != nil {
		return err
	}
	defer p.Stop(20 * time.Second)

	prod, promise, failed, err := openLoopProducer(h)
	if err != nil {
		return err
	}
	defer prod.Close()
	send := func(kind byte, id int64, at time.Time) {
		key := make([]byte, 8)
		binary.BigEndian.PutUint64(key, uint64(id))
		v := appendLatencyPayload(make([]byte, 0, cfg.latSize), kind, id, at.UnixNano(), cfg.latSize)
		prod.Produce(ctx, &kgo.Record{Topic: in, Key: key, Value: v}, promise)
	}

	cpu0 := p.CPU()
	err = openLoop(ctx, p, openLoopRun{
		label: row.spec.Label(), what: "record", producer: "latency producer", rate: cfg.latRate, total: total,
		warmed: warm.Load, warmSend: func(id int64) { send('W', id, time.Now()) },
		send:     func(n int64, at time.Time) { send('M', n, at) },
		failed:   failed,
		received: received.Load,
	})
	if err != nil {
		return err
	}
	cpu1 := p.CPU()
	row.peakRSS = p.PeakRSS()
	row.cpuPerM = (cpu1 - cpu0).Seconds() / float64(total) * 1e6

	mu.Lock()
	defer mu.Unlock()
	row.sent, row.received, row.dups = total, received.Load(), dups
	row.p50, row.p99, row.pmax = percentile(lats, 50), percentile(lats, 99), percentile(lats, 100)
	return nil
}

// openLoopProducer is the producer of an open-loop run: no batching
// beyond 1 ms, so a record's send time is about its intended one. promise
// keeps the first error of any send; failed returns it.
func openLoopProducer(h *harness) (prod *kgo.Client, promise func(*kgo.Record, error), failed func() error, err error) {
	prod, err = kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return nil, nil, nil, err
	}
	var perr atomic.Value
	promise = func(_ *kgo.Record, err error) {
		if err != nil {
			perr.CompareAndSwap(nil, err)
		}
	}
	failed = func() error { e, _ := perr.Load().(error); return e }
	return prod, promise, failed, nil
}

// openLoopRun is one open-loop latency run of openLoop.
type openLoopRun struct {
	label    string // the system's, for errors
	what     string // what the warm-up waits for: "record", "count"
	producer string // names the producer in its errors
	rate     int    // sends per second
	total    int64  // sends measured
	// warmed says the system answered a warm-up send; warmSend sends
	// warm-up number id; send sends measured number n, intended at at.
	warmed   func() bool
	warmSend func(id int64)
	send     func(n int64, at time.Time)
	// failed is the producer's first error, if any; received how many
	// measured sends came out.
	failed   func() error
	received func() int64
}

// openLoop drives a latency run against p: warm-up sends ten a second
// until the system answers and two seconds more (so every partition has
// carried records), then total sends at rate a second on a clock of their
// own (open loop: a slow system does not slow the sender, so its delay
// shows as latency), then waits at most 30 s for the rest to come out.
func openLoop(ctx context.Context, p *Proc, r openLoopRun) error {
	warmDeadline := time.Now().Add(3 * time.Minute)
	var warmUntil time.Time
	for id := int64(0); warmUntil.IsZero() || time.Now().Before(warmUntil); id++ {
		if warmUntil.IsZero() && r.warmed() {
			warmUntil = time.Now().Add(2 * time.Second)
		}
		if time.Now().After(warmDeadline) {
			return fmt.Errorf("%s: no warm-up %s came out in 3 minutes; last output:\n%s", r.label, r.what, p.log.lastLines(25))
		}
		select {
		case <-p.Done():
			return p.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		r.warmSend(id)
	}

	t0 := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var next int64
	for next < r.total {
		select {
		case <-p.Done():
			return p.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		due := min(r.total, int64(time.Since(t0).Seconds()*float64(r.rate)))
		for ; next < due; next++ {
			r.send(next, t0.Add(time.Duration(next)*time.Second/time.Duration(r.rate)))
		}
		if e := r.failed(); e != nil {
			return fmt.Errorf("%s: %w", r.producer, e)
		}
	}
	// Everything sent: wait for the rest, at most 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for r.received() < r.total && time.Now().Before(deadline) {
		select {
		case <-p.Done():
			return p.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// percentile returns the q-th percentile (nearest rank) of ds, sorting it.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(q/100*float64(len(ds)) + 0.5)
	i = max(1, min(i, len(ds)))
	return ds[i-1]
}
