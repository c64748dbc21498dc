package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// runResult is one measured run.
type runResult struct {
	rate    float64 // input records per second
	cpuPerM float64 // CPU seconds per million input records
	peakRSS int64   // bytes, VmHWM
	wall    time.Duration
	whole   bool // rate and CPU over the whole run, startup included
	verdict verdict
}

// throughputRow is one system on one input, all repetitions.
type throughputRow struct {
	spec Spec
	ds   *dataset
	sys  System
	runs []runResult
	err  error
}

func runThroughputSection(ctx context.Context, h *harness, res *results) error {
	cfg := h.cfg
	ds100 := &dataset{name: "100 B", topic: h.name("in-100b"), records: cfg.records, size: 100, words: make([]int64, vocabulary)}
	sets := []*dataset{ds100}
	if cfg.records1k > 0 {
		sets = append(sets, &dataset{name: "1 KiB", topic: h.name("in-1k"), records: cfg.records1k, size: 1024})
	}
	for _, ds := range sets {
		began := time.Now()
		if err := prefill(ctx, h.seeds, h.adm, ds, int32(cfg.partitions)); err != nil {
			return err
		}
		logf("prefilled %s with %d x %s in %s", ds.topic, ds.records, ds.name, time.Since(began).Round(time.Millisecond))
	}
	var rows []*throughputRow
	for _, ds := range sets {
		for _, s := range throughputSystems() {
			if !cfg.wants(s) || (s.Spec().Workload == wordcount && ds != ds100) {
				continue
			}
			rows = append(rows, &throughputRow{spec: s.Spec(), ds: ds, sys: s})
		}
	}
	res.throughput = rows
	return runRows(ctx, h, rows, "throughput")
}

// runRows runs every row cfg.reps times. Repetitions alternate: every
// repetition runs each system once, in reverse order every other time, so
// drift on a shared machine is spread.
func runRows(ctx context.Context, h *harness, rows []*throughputRow, section string) error {
	cfg := h.cfg
	for rep := 0; rep < cfg.reps; rep++ {
		order := make([]*throughputRow, len(rows))
		copy(order, rows)
		if rep%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, row := range order {
			if !row.sys.Available() || row.err != nil {
				continue
			}
			logf("%s rep %d/%d: %s %s on %s", section, rep+1, cfg.reps, row.spec.Label(), row.spec.Workload, row.ds.name)
			r, err := runThroughput(ctx, h, row.sys, row.ds)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				logf("  failed: %v", err)
				row.err = err
				continue
			}
			logf("  %.0f records/s, %.2f CPU s/M, peak RSS %d MB, %s", r.rate, r.cpuPerM, r.peakRSS>>20, r.verdict)
			row.runs = append(row.runs, r)
		}
	}
	return nil
}

// runThroughput runs one system once over ds: a fresh output topic, the
// system as a child process, a read_committed watcher that says when the
// output is complete, then a read_committed drain that verifies it.
//
// Rate and CPU are taken from the first sight of output to completion, over
// the input not covered by all the output visible at that first sight (not
// just the first fetch of it), so JVM start, group joins and the first
// commit interval do not count. When the first visible output
// already covered over 90% of the input, or the window is under minWindow,
// the whole run (startup included) is used and the row says so.
func runThroughput(ctx context.Context, h *harness, s System, ds *dataset, jobOpts ...func(*Job)) (runResult, error) {
	spec := s.Spec()
	wc := spec.Workload != passthrough && spec.Workload != avroPassthrough
	out := h.name("out-" + spec.Slug())
	appID := h.name("app-" + spec.Slug())
	defer deleteTopicsWithPrefix(context.Background(), h.adm, out, appID)
	if err := createTopic(ctx, h.adm, out, int32(h.cfg.partitions)); err != nil {
		return runResult{}, err
	}
	debugf("topic %s created", out)
	w, err := newWatcher(h.seeds, out, ds, wc)
	if err != nil {
		return runResult{}, err
	}
	defer w.Close()
	// A just-created topic whose leaders the metadata already names may
	// still refuse fetches for a moment, and franz-go retries such a
	// partition about a second later: let it settle before the clock runs.
	time.Sleep(settle)
	job := Job{Bootstrap: joinSeeds(h.seeds), Input: ds.topic, Output: out, AppID: appID, Parallelism: h.cfg.parallelism}
	for _, o := range jobOpts {
		o(&job)
	}
	began := time.Now()
	p, err := s.Start(ctx, h, job)
	if err != nil {
		return runResult{}, err
	}
	defer p.Stop(20 * time.Second)
	debugf("child started")

	if err := waitOrExit(ctx, w.first, p, h.cfg.runTimeout, "first output record"); err != nil {
		return runResult{}, err
	}
	cpu0 := p.CPU()
	if err := waitOrExit(ctx, w.completed, p, h.cfg.runTimeout, "complete output"); err != nil {
		return runResult{}, err
	}
	cpu1 := p.CPU()
	// Known only now: the watcher may still have been reading the output
	// that was visible at its first sight when the window opened.
	n0 := w.firstN
	r := runResult{peakRSS: p.PeakRSS(), wall: w.doneAt.Sub(began)}
	p.Stop(20 * time.Second)
	w.Close()
	logf("%s: peak RSS %.0f MiB (/proc VmHWM), maximum resident set size %.0f MiB (wait4, as /usr/bin/time -v prints it)",
		spec.Label(), float64(r.peakRSS)/(1<<20), float64(p.MaxRSS())/(1<<20))

	n := float64(ds.records)
	if rest := n - float64(n0); rest >= n/10 && w.doneAt.Sub(w.firstAt) >= minWindow {
		r.rate = rest / w.doneAt.Sub(w.firstAt).Seconds()
		r.cpuPerM = (cpu1 - cpu0).Seconds() / rest * 1e6
	} else {
		r.whole = true
		r.rate = n / r.wall.Seconds()
		r.cpuPerM = cpu1.Seconds() / n * 1e6
	}
	v, err := verify(ctx, h.seeds, out, ds, wc)
	if err != nil {
		return r, fmt.Errorf("verify %s: %w", out, err)
	}
	if spec.EveryUpdate && v.outOfStep > 0 {
		v.exact = false
	}
	r.verdict = v
	if !spec.ReadCommitted && !v.exact && v.missing == 0 {
		// At-least-once may duplicate: reported, not a failure.
		return r, nil
	}
	if !v.exact {
		return r, errors.New("output not exact: " + v.String())
	}
	return r, nil
}

// minWindow is the shortest measuring window from first output to
// completion; a shorter one (a tiny input) is too coarse for /proc's 10 ms
// CPU ticks, and the whole run is measured instead.
const minWindow = 500 * time.Millisecond

// settle is the pause between creating a run's topics and starting the
// system.
const settle = 2 * time.Second

func joinSeeds(s []string) string {
	out := ""
	for i, a := range s {
		if i > 0 {
			out += ","
		}
		out += a
	}
	return out
}
