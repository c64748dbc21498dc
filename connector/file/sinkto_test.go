package file

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
)

// runtime.SinkTo runs an exactly-once file sink with its committer: a job
// that fails after a checkpoint published files, and restarts from it,
// publishes every input line once.
func TestSinkToExactlyOnceFileSinkPublishesEveryLineOnce(t *testing.T) {
	input := make([]string, 400)
	for i := range input {
		input[i] = fmt.Sprintf("line %03d", i)
	}
	src := suiteSource(t, input)
	dir := t.TempDir()
	sink, err := NewLineSink(dir, WithMaxFileBytes(512), WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	var checkpoints, seen, processed atomic.Int64
	var failed atomic.Bool
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithCheckpointInterval(5*time.Millisecond),
		runtime.WithRestartStrategy(runtime.FixedDelayRestart(5, time.Millisecond)),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(int64) { checkpoints.Add(1) }}))
	lines := runtime.FromSource(env, src, "lines").UID("lines")
	checked := runtime.Map(lines, func(l string) (string, error) {
		if seen.Add(1) >= 200 && checkpoints.Load() > 0 && failed.CompareAndSwap(false, true) {
			return "", fmt.Errorf("injected failure at %q", l)
		}
		processed.Add(1)
		time.Sleep(50 * time.Microsecond)
		return l, nil
	}).UID("map")
	runtime.SinkTo(checked, connector.Sink[string](sink)).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := env.Execute(ctx, "file sinkto"); err != nil {
		t.Fatal(err)
	}
	if !failed.Load() || processed.Load() <= int64(len(input)) {
		t.Fatalf("failure injected: %v, %d records processed: no line was read again after a restart", failed.Load(), processed.Load())
	}
	got, err := readCommitted(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, input) {
		t.Fatalf("published %d lines, want each of the %d input lines once", len(got), len(input))
	}
}
