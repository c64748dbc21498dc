package datagen_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/restart"
)

// collectSink keeps every record written, duplicates included.
type collectSink struct {
	mu  sync.Mutex
	got []int64
}

func (s *collectSink) CreateWriter(connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	return s, nil
}
func (s *collectSink) Write(v int64, _ connector.WriteContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, v)
	return nil
}
func (s *collectSink) Flush(bool) error { return nil }
func (s *collectSink) Close() error     { return nil }

// givenBack counts the splits an enumerator is given back.
type givenBack struct {
	*datagen.Source[int64]
	n *atomic.Int64
}

type countingEnum struct {
	connector.SplitEnumerator[datagen.Split, datagen.EnumeratorState]
	n *atomic.Int64
}

func (e countingEnum) AddSplitsBack(splits []datagen.Split, sub int) error {
	e.n.Add(int64(len(splits)))
	return e.SplitEnumerator.AddSplitsBack(splits, sub)
}

func (s givenBack) CreateEnumerator(ctx connector.SplitEnumeratorContext[datagen.Split]) (connector.SplitEnumerator[datagen.Split, datagen.EnumeratorState], error) {
	e, err := s.Source.CreateEnumerator(ctx)
	if err != nil {
		return nil, err
	}
	return countingEnum{e, s.n}, nil
}

// In push mode the splits of a failed reader go back to its subtask and
// reach its restarted reader. A job without checkpoints keeps every
// assignment booked, so a failure hands back all the failed subtask's
// splits, assigned before it read anything: with them dropped instead,
// the restarted subtask would read nothing and its indexes would be
// missing from the output.
func TestFailedReadersSplitsGoBackInPushMode(t *testing.T) {
	const count = 2000
	src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
		datagen.WithCount(count), datagen.WithSplits(4), datagen.WithBatchSize(10))
	if err != nil {
		t.Fatal(err)
	}
	var back atomic.Int64
	var failed atomic.Bool
	env := runtime.NewEnvironment(runtime.WithParallelism(2),
		runtime.WithRestartStrategy(restart.FixedDelay(3, 10*time.Millisecond)),
		runtime.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	in := runtime.FromSource(env, givenBack{src, &back}, "gen").UID("gen")
	mapped := runtime.Map(in, func(v int64) (int64, error) {
		// Index 700 is in split 1, read by subtask 1.
		if v == 700 && failed.CompareAndSwap(false, true) {
			return 0, errors.New("injected failure at index 700")
		}
		return v, nil
	}).UID("map")
	sink := &collectSink{}
	runtime.SinkTo(mapped, connector.Sink[int64](sink)).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Execute(ctx, "failover"); err != nil {
		t.Fatal(err)
	}
	if !failed.Load() {
		t.Fatal("the failure was never injected")
	}
	if back.Load() == 0 {
		t.Fatal("no split was given back to the enumerator")
	}
	seen := map[int64]bool{}
	for _, v := range sink.got {
		seen[v] = true
	}
	var missing []int64
	for i := range int64(count) {
		if !seen[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d indexes missing after the failover (first %v); %d splits were given back", len(missing), missing[:min(10, len(missing))], back.Load())
	}
	t.Logf("%d records for %d indexes, %d splits given back", len(sink.got), count, back.Load())
}

// A job restored at a lower parallelism with the readers' splits handed to
// the enumerator (runtime.WithRescaledSplitsToEnumerator) reads every split:
// those of old subtasks beyond the new parallelism go to the readers there
// are. Before, they waited in the enumerator for readers that never came,
// and the restored job ended without them.
func TestRescaledSplitsToEnumeratorAreReadAtALowerParallelism(t *testing.T) {
	const count = 3000
	dir := t.TempDir()
	newSrc := func() *datagen.Source[int64] {
		src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
			datagen.WithCount(count), datagen.WithSplits(6), datagen.WithBatchSize(10))
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	quiet := runtime.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

	// The first run, at parallelism 3, dies after a checkpoint that holds
	// progress: one triggered after another completed once 30 records had
	// gone through the map (one checkpoint at a time). Its map is slow
	// until then, so it dies with most of the input unread.
	var seen, armed atomic.Int64
	var killed atomic.Bool
	env1 := runtime.NewEnvironment(runtime.WithParallelism(3), quiet,
		runtime.WithCheckpointInterval(5*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithRestartStrategy(restart.None()),
		runtime.WithJobListener(runtime.JobListener{CheckpointCompleted: func(id int64) {
			switch a := armed.Load(); {
			case a == 0 && seen.Load() >= 30:
				armed.Store(id)
			case a > 0 && id > a:
				killed.Store(true)
			}
		}}))
	in1 := runtime.FromSource(env1, newSrc(), "gen").UID("gen")
	mapped1 := runtime.Map(in1, func(v int64) (int64, error) {
		if killed.Load() {
			return 0, errors.New("killed")
		}
		seen.Add(1)
		time.Sleep(time.Millisecond)
		return v, nil
	}).UID("map")
	first := &collectSink{}
	runtime.SinkTo(mapped1, connector.Sink[int64](first)).UID("out")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env1.Execute(ctx, "rescaled"); err == nil {
		t.Fatal("the first run ended before it was killed; the test proves nothing")
	}

	// The second run, at parallelism 1, restores the last checkpoint.
	env2 := runtime.NewEnvironment(runtime.WithParallelism(1), quiet,
		runtime.WithCheckpointInterval(5*time.Millisecond), runtime.WithCheckpointDir(dir),
		runtime.WithRescaledSplitsToEnumerator())
	in2 := runtime.FromSource(env2, newSrc(), "gen").UID("gen")
	mapped2 := runtime.Map(in2, func(v int64) (int64, error) { return v, nil }).UID("map")
	second := &collectSink{}
	runtime.SinkTo(mapped2, connector.Sink[int64](second)).UID("out")
	if err := env2.Execute(ctx, "rescaled"); err != nil {
		t.Fatal(err)
	}
	if len(second.got) == count {
		t.Fatal("the second run read the whole input: it did not restore")
	}
	emitted := map[int64]bool{}
	for _, v := range append(first.got, second.got...) {
		emitted[v] = true
	}
	var missing []int64
	for i := range int64(count) {
		if !emitted[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d indexes never emitted (first %v); the first run emitted %d records, the second %d",
			len(missing), count, missing[:min(10, len(missing))], len(first.got), len(second.got))
	}
}
