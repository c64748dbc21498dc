package file

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// runtime.SinkTo runs an exactly-once file sink with its committer: a job
// that fails after a checkpoint published files, and restarts from it,
// publishes every input line once.
func TestSinkToExactlyOnceFileSinkPublishesEveryLineOnce(t *testing.T) {
	input := make([]string, 400)
	for i := range input {
		input[i] = fmt.Sprintf("line %03d", i)
	}
	// run is one job into a fresh directory; it checks the output and says
	// whether a restart read lines again, which the job's timing does not
	// guarantee (a failure on the first line after a completed
	// checkpoint's barrier replays nothing), so a run without one is
	// repeated, up to three times.
	run := func(t *testing.T) (replayed bool) {
		src := suiteSource(t, input)
		dir := t.TempDir()
		sink, err := NewLineSink(dir, WithMaxFileBytes(512), WithoutSync())
		if err != nil {
			t.Fatal(err)
		}
		var checkpoints, seen, processed atomic.Int64
		var failed atomic.Bool
		env := runtime.NewEnvironment(runtime.WithParallelism(2),
			runtime.WithCheckpointInterval(5*time.Millisecond),
			runtime.WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)),
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
		if !failed.Load() {
			t.Fatalf("no failure injected (%d records processed)", processed.Load())
		}
		got, err := readCommitted(dir)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, input) {
			t.Fatalf("published %d lines, want each of the %d input lines once", len(got), len(input))
		}
		return processed.Load() > int64(len(input))
	}
	for attempt := 1; !run(t); attempt++ {
		if attempt == 3 {
			t.Fatalf("%d runs with a failure injected and no line read again after a restart", attempt)
		}
		t.Logf("run %d: no line was read again after its restart; running again", attempt)
	}
}

// countingSink is a user's wrapper around a sink that counts the writers
// it creates and passes on nothing but connector.Sink: it hides that the
// sink commits in two phases.
type countingSink struct {
	inner   connector.Sink[string]
	writers atomic.Int64
}

func (s *countingSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[string], error) {
	s.writers.Add(1)
	return s.inner.CreateWriter(ctx)
}

// An exactly-once file sink publishes only through its committer. A
// wrapper that hides connector.TwoPhaseCapable makes runtime.SinkTo run it
// as a plain sink, without one: the job must fail, naming the cause and
// wrapping connector.ErrInvalidConfiguration, rather than succeed having
// published nothing.
func TestExactlyOnceFileSinkRefusesToRunWithoutItsCommitter(t *testing.T) {
	input := []string{"a", "b", "c", "d"}
	dir := t.TempDir()
	sink, err := NewLineSink(dir, WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointInterval(5*time.Millisecond))
	runtime.SinkTo(runtime.FromSource(env, suiteSource(t, input), "lines").UID("lines"), connector.Sink[string](&countingSink{inner: sink})).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = env.Execute(ctx, "hidden")
	got, rerr := readCommitted(dir)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, connector.ErrInvalidConfiguration) || !strings.Contains(err.Error(), "TwoPhaseCapable") {
		t.Fatalf("Execute: %v (%d of %d lines published), want an error wrapping connector.ErrInvalidConfiguration naming connector.TwoPhaseCapable", err, len(got), len(input))
	}
}
