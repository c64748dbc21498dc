package runtime_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/state"
)

// totalSerde writes an int64 as its decimal digits under the name
// "total/v1"; unreadable is the same name with a Decode that refuses
// every value, as a serde whose format changed without its name would.
type totalSerde struct{ unreadable bool }

func (totalSerde) Name() string { return "total/v1" }

func (totalSerde) Append(dst []byte, v int64) ([]byte, error) {
	return strconv.AppendInt(dst, v, 10), nil
}

func (s totalSerde) Decode(b []byte) (int64, error) {
	if s.unreadable {
		return 0, errors.New("not a total of this version")
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// Rule (restores): a state value its serde cannot decode fails the job
// without restarts, on both backends: the value comes from the
// checkpoint every restart restores, so no restart reads it, and the
// default restart strategy (unlimited) would restart the job every second
// for ever. The heap backend decodes every value at the restore; the
// pebble backend decodes each when the function first reads it.
func TestUndecodableStateValueFailsTheJobWithoutRestarts(t *testing.T) {
	backends := map[string]func(t *testing.T) state.Backend{
		"heap":   func(*testing.T) state.Backend { return state.Heap() },
		"pebble": func(t *testing.T) state.Backend { return state.Pebble(t.TempDir()) },
	}
	for name, backend := range backends {
		t.Run(name, func(t *testing.T) {
			chk := t.TempDir()
			job := func(serde totalSerde, l runtime.JobListener) *runtime.Environment {
				src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
					datagen.WithCount(100_000), datagen.WithRecordsPerSecond(2000), datagen.WithSplits(2))
				if err != nil {
					t.Fatal(err)
				}
				env := runtime.NewEnvironment(runtime.WithParallelism(2), runtime.WithCheckpointDir(chk),
					runtime.WithCheckpointInterval(50*time.Millisecond), runtime.WithStateBackend(backend(t)),
					runtime.WithJobListener(l), runtime.WithLogger(quiet))
				total := state.NewValueState[int64]("total", state.WithSerde[int64](serde))
				ds := runtime.FromSource(env, src, "numbers").UID("numbers")
				sums := runtime.KeyedProcess(runtime.KeyBy(ds, func(i int64) int64 { return i % 10 }),
					func(ctx *runtime.KeyedContext[int64, string], i int64) error {
						s, _, err := total.Get(ctx)
						if err != nil {
							return err
						}
						if err := total.Set(ctx, s+i); err != nil {
							return err
						}
						ctx.Collect(strconv.FormatInt(s+i, 10))
						return nil
					}).UID("sums")
				runtime.SinkTo[string](sums, &discard[string]{}).UID("lines")
				return env
			}

			// The first job checkpoints every key's total, then stops.
			ctx, cancel := context.WithCancel(context.Background())
			var completed atomic.Int64
			first := job(totalSerde{}, runtime.JobListener{CheckpointCompleted: func(int64) {
				if completed.Add(1) == 3 {
					cancel()
				}
			}})
			if err := first.Execute(ctx, "totals"); err != nil {
				t.Fatalf("first job: %v", err)
			}
			cancel()

			// The second reads them with a serde of the same name that
			// cannot: it must fail, not restart.
			ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var restarts atomic.Int64
			second := job(totalSerde{unreadable: true}, runtime.JobListener{Restarting: func(int, error) {
				restarts.Add(1)
				cancel()
			}})
			err := second.Execute(ctx, "totals")
			if n := restarts.Load(); n > 0 {
				t.Fatalf("the job restarted %d times on a value no restart can decode (then cancelled); err %v", n, err)
			}
			if err == nil || !strings.Contains(err.Error(), `"total"`) || !strings.Contains(err.Error(), "not a total of this version") {
				t.Fatalf("second job: %v; want the decode error, naming the state", err)
			}
		})
	}
}
