package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// memoryRow is the slow-sink run: splitflow at-least-once passthrough whose
// sink accepts only memRate records/s while the driver writes memRecords
// 1 KiB records into its input evenly over the run, faster than that.
type memoryRow struct {
	records  int
	rate     float64
	duration time.Duration
	produced int64
	sunk     int64
	lags     []int64 // lag at each quarter of the run
	maxLag   int64
	peakRSS  int64
	bound    int64
	cpuS     float64
	pass     bool
	err      error
}

func runMemorySection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	row := &memoryRow{records: cfg.memRecords, rate: cfg.memRate, duration: cfg.memDuration, bound: int64(cfg.memBoundMB) << 20}
	res.memory = row
	if perSec := float64(row.records) / row.duration.Seconds(); perSec <= row.rate {
		row.err = fmt.Errorf("the input (%d records over %s = %.0f/s) is not faster than the sink (%.0f/s): raise --memory-records or lower --memory-sink-rate", row.records, row.duration, perSec, row.rate)
		return nil
	}
	logf("memory: splitflow slow sink at %.0f records/s, %d x 1 KiB written meanwhile, %s, bound %d MB", row.rate, row.records, row.duration, cfg.memBoundMB)
	if err := runMemory(ctx, h, row); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logf("  failed: %v", err)
		row.err = err
		return nil
	}
	logf("  peak RSS %d MB (bound %d MB), lag %v, max %d", row.peakRSS>>20, cfg.memBoundMB, row.lags, row.maxLag)
	return nil
}

func runMemory(ctx context.Context, h *harness, row *memoryRow) error {
	cfg := h.cfg
	in, out := h.name("mem-in"), h.name("mem-out")
	defer deleteTopicsWithPrefix(context.Background(), h.adm, in, out)
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, h.adm, t, int32(cfg.partitions)); err != nil {
			return err
		}
	}
	time.Sleep(settle) // see runThroughput
	var sunk, produced atomic.Int64
	onLine := func(line string) {
		if s, ok := strings.CutPrefix(line, "sunk "); ok {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				sunk.Store(n)
			}
		}
	}
	p, err := h.startChild("splitflow slow sink", onLine, "splitflow-slowsink",
		Job{Bootstrap: joinSeeds(h.seeds), Input: in, Output: out, Parallelism: cfg.parallelism},
		"--rate", strconv.FormatFloat(row.rate, 'f', -1, 64))
	if err != nil {
		return err
	}
	defer p.Stop(30 * time.Second)

	prod, err := kgo.NewClient(kgo.SeedBrokers(h.seeds...), kgo.ProducerLinger(10*time.Millisecond))
	if err != nil {
		return err
	}
	defer prod.Close()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The input arrives evenly over the run, faster than the sink takes
	// it, so the lag grows the whole time.
	go func() {
		start := time.Now()
		perSec := float64(row.records) / row.duration.Seconds()
		for id := int64(0); id < int64(row.records) && pctx.Err() == nil; id++ {
			if d := time.Until(start.Add(time.Duration(float64(id) / perSec * float64(time.Second)))); d > time.Millisecond {
				time.Sleep(d)
			}
			key := make([]byte, 8)
			binary.BigEndian.PutUint64(key, uint64(id))
			v := appendPayload(make([]byte, 0, 1024), id, 1024, nil)
			prod.Produce(pctx, &kgo.Record{Topic: in, Key: key, Value: v}, func(_ *kgo.Record, err error) {
				if err == nil {
					produced.Add(1)
				}
			})
		}
	}()

	began := time.Now()
	quarter := row.duration / 4
	nextQuarter := began.Add(quarter)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(began) < row.duration {
		select {
		case <-p.Done():
			return p.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		p.Sample()
		lag := produced.Load() - sunk.Load()
		row.maxLag = max(row.maxLag, lag)
		if len(row.lags) < 3 && time.Now().After(nextQuarter) {
			row.lags = append(row.lags, lag)
			nextQuarter = nextQuarter.Add(quarter)
		}
	}
	row.lags = append(row.lags, produced.Load()-sunk.Load())
	row.peakRSS = p.PeakRSS()
	row.cpuS = p.CPU().Seconds()
	row.produced, row.sunk = produced.Load(), sunk.Load()
	cancel()
	p.Stop(30 * time.Second)
	grew := len(row.lags) >= 2 && row.lags[len(row.lags)-1] > row.lags[0]
	row.pass = row.peakRSS < row.bound && grew
	if !grew {
		row.err = fmt.Errorf("lag did not grow (%v): the sink was not slower than the input; lower --memory-sink-rate", row.lags)
	}
	return nil
}
