// Command sourcesink reproduces, without Kafka, the experiment that shows how
// FLIP-27 sources keep splits exactly-once across a failure: a range source
// of N splits x M records (split-k is [k*M, (k+1)*M)), a map that fails once
// at a chosen record, and a two-phase-commit sink into an in-memory store,
// with checkpoints. Every enumerator and reader step is logged with the time
// since start, and the committed records are counted at the end.
//
//	go run ./examples/sourcesink normal|fail [--mode pull|push] [--fail-at 80]
//	    [--parallelism 2] [--splits 4] [--records-per-split 40]
//	    [--checkpoint-interval 1s] [--record-delay 60ms]
//
// In pull mode a reader asks for a split when it has finished the one it
// has; in push mode the enumerator assigns every split of a reader (k mod
// parallelism) when the reader registers. The job is a set of independent
// pipelines (source -> map -> sink, forward edges), so the failure restarts
// only the failed subtask's pipeline: the enumerator gets the splits
// assigned to it after the last checkpoint back (addSplitsBack) and the
// restarted reader resumes from its checkpointed splits. It exits 0 when the
// committed records are exactly the input, 1 otherwise.
//
// The source is built on connector/base (NewSource: a StaticEnumerator, a
// SplitReader and an emit function), wrapped to log every call between
// the engine, the enumerator and the readers.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// logWriter turns the engine's log lines into experiment log lines.
type logWriter func(format string, args ...any)

func (w logWriter) Write(p []byte) (int, error) {
	w("ENGINE %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "normal" && os.Args[1] != "fail") {
		fmt.Fprintln(os.Stderr, "usage: sourcesink normal|fail [--mode pull|push] [--fail-at 80] [--parallelism 2] [--splits 4] [--records-per-split 40] [--checkpoint-interval 1s] [--record-delay 60ms]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("sourcesink", flag.ExitOnError)
	mode := fs.String("mode", "pull", "split assignment: pull (reader requests) or push (enumerator assigns on registration)")
	failAt := fs.Int64("fail-at", 80, "record at which the map fails once (fail mode)")
	par := fs.Int("parallelism", 2, "parallelism of the job")
	splits := fs.Int("splits", 4, "number of splits")
	perSplit := fs.Int("records-per-split", 40, "records in each split")
	interval := fs.Duration("checkpoint-interval", time.Second, "checkpoint interval")
	delay := fs.Duration("record-delay", 60*time.Millisecond, "time between two records of a reader")
	_ = fs.Parse(os.Args[2:])
	if *mode != "pull" && *mode != "push" {
		fmt.Fprintf(os.Stderr, "sourcesink: --mode must be pull or push, not %q\n", *mode)
		os.Exit(2)
	}

	start := time.Now()
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("[%7.3fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	src, err := newRangeSource(*splits, *perSplit, *mode == "push", *delay, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sourcesink: %v\n", err)
		os.Exit(2)
	}
	st := &store{committed: map[string]bool{}}
	var failed atomic.Bool
	inject := os.Args[1] == "fail"

	env := runtime.NewEnvironment(
		runtime.WithParallelism(*par),
		runtime.WithCheckpointInterval(*interval),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 200*time.Millisecond)),
		runtime.WithLogger(slog.New(slog.NewTextHandler(logWriter(logf), &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))),
	)
	records := runtime.FromSource(env, src, "range").UID("range")
	mapped := runtime.Map(records, func(v int64) (int64, error) {
		if inject && v == *failAt && failed.CompareAndSwap(false, true) {
			logf("MAP !!! injected failure at record %d", v)
			return 0, fmt.Errorf("injected failure at record %d", v)
		}
		return v, nil
	}).UID("map")
	runtime.SinkTo(mapped, &txnSink{store: st, log: logf}).UID("sink")

	logf("JOB start: %s mode, %d splits x %d records, parallelism %d, checkpoint every %v", *mode, *splits, *perSplit, *par, *interval)
	if err := env.Execute(context.Background(), "sourcesink"); err != nil {
		logf("JOB failed: %v", err)
		os.Exit(1)
	}
	got := st.all()
	seen := map[int64]int{}
	for _, v := range got {
		seen[v]++
	}
	expected := *splits * *perSplit
	missing := 0
	for v := range int64(expected) {
		if seen[v] == 0 {
			missing++
		}
	}
	dups := len(got) - len(seen)
	logf("JOB finished")
	fmt.Printf("committed records: total=%d distinct=%d expected=%d duplicates=%d\n", len(got), len(seen), expected, dups)
	if missing > 0 || dups > 0 || len(got) != expected {
		keys := make([]int64, 0)
		for v := range int64(expected) {
			if seen[v] != 1 {
				keys = append(keys, v)
			}
		}
		slices.Sort(keys)
		fmt.Printf("not exactly once: %d missing, records off: %v\n", missing, keys)
		os.Exit(1)
	}
}
