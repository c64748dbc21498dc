package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/window"
)

// The processes of one distributed job run the same job: a process whose
// graph (here a window of another size under the same uids) or max
// parallelism differs from the processes in the job's group is refused
// before it gets a slot, with ErrDifferentJob naming what differs, and
// the running processes keep every slot. It holds for a fresh job whose
// two processes start together (whichever joins first runs the job) and
// for a job that runs and checkpoints when the other process arrives.
// Before, the group took any process of the job's name: two processes
// with 1- and 2-minute windows shared the slots, and each wrote its own
// window size into the output; the graphs were compared only when one
// process restored another's checkpoint.
func TestProcessesOfADistributedJobMustRunTheSameJob(t *testing.T) {
	seeds, _ := distributedCluster(t, "events", "totals")
	type proc struct {
		env  *runtime.Environment
		errs chan error
	}
	start := func(ctx context.Context, job, dir string, size time.Duration, maxPar int) proc {
		t.Helper()
		// One connection for the sources, the sinks, the shuffle and the
		// membership.
		conn := Connect(WithBrokers(seeds...), WithLogger(quietLogger()))
		dist, err := Distributed(job, conn, WithSlots(3), WithSessionTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		env := runtime.NewEnvironment(runtime.WithCheckpointDir(dir), runtime.WithLogger(quietLogger()),
			runtime.WithCheckpointInterval(100*time.Millisecond), runtime.WithMaxParallelism(maxPar), dist)
		src, err := NewSource(StringValues(), WithConnection(conn), WithTopics("events"))
		if err != nil {
			t.Fatal(err)
		}
		events := runtime.FromSource(env, src, "events").UID("events")
		totals := runtime.WindowCount(runtime.Window(runtime.KeyBy(events, func(e string) string { return e }),
			window.Tumbling(size).ProcessingTime())).UID("totals")
		sink, err := NewSink(KeyValueSerializer("totals", func(r window.Result[string, int64]) ([]byte, []byte, error) {
			return []byte(r.Key), fmt.Appendf(nil, "%v %d", r.Window, r.Value), nil
		}), WithConnection(conn), WithExactlyOnce(job+".totals"))
		if err != nil {
			t.Fatal(err)
		}
		runtime.SinkTo(totals, connector.Sink[window.Result[string, int64]](sink)).UID("out")
		p := proc{env: env, errs: make(chan error, 1)}
		go func() { p.errs <- env.Execute(ctx, job) }()
		return p
	}
	running := func(p proc) []int {
		d := p.env.Status().Distributed
		if d == nil {
			return nil
		}
		var out []int
		for _, s := range d.Slots {
			if s.Running {
				out = append(out, s.Slot)
			}
		}
		slices.Sort(out)
		return out
	}
	// refused waits for one of ps to end refused, while the others come to
	// run every slot, and returns its error and index.
	refused := func(ps ...proc) (error, int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		var err error
		who := -1
		for {
			for i, p := range ps {
				select {
				case e := <-p.errs:
					if who >= 0 {
						t.Fatalf("processes %d and %d both ended: %v; %v", who, i, err, e)
					}
					err, who = e, i
				default:
				}
			}
			all := 0
			for i, p := range ps {
				if i == who {
					continue
				}
				if rs := running(p); len(rs) > 0 && who < 0 {
					for j, q := range ps {
						if j != i && len(running(q)) > 0 {
							t.Fatalf("process %d runs slots %v and process %d of another job runs slots %v", i, rs, j, running(q))
						}
					}
				}
				all += len(running(p))
			}
			if who >= 0 && all == 3 {
				return err, who
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a minute: process %d ended with %v; slots running: %v", who, err, func() (r [][]int) {
					for _, p := range ps {
						r = append(r, running(p))
					}
					return r
				}())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("fresh job, processes started together", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dir := t.TempDir()
		sizes := []time.Duration{time.Minute, 2 * time.Minute}
		ps := []proc{start(ctx, "windows", dir, sizes[0], 128), start(ctx, "windows", dir, sizes[1], 128)}
		err, who := refused(ps...)
		mine, theirs := fmt.Sprintf("tumbling %dms", sizes[who].Milliseconds()), fmt.Sprintf("tumbling %dms", sizes[1-who].Milliseconds())
		if !errors.Is(err, runtime.ErrDifferentJob) || !strings.Contains(err.Error(), `"totals"`) ||
			!strings.Contains(err.Error(), mine) || !strings.Contains(err.Error(), theirs) {
			t.Fatalf("the process with %v windows: %v; want ErrDifferentJob naming uid \"totals\", %q and %q", sizes[who], err, mine, theirs)
		}
		cancel()
		if err := <-ps[1-who].errs; err != nil {
			t.Fatalf("the running process: %v", err)
		}
	})

	t.Run("running job, process of another max parallelism", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dir := t.TempDir()
		first := start(ctx, "windows-max", dir, time.Minute, 128)
		deadline := time.Now().Add(time.Minute)
		for len(running(first)) < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("the first process runs %v after a minute", running(first))
			}
			time.Sleep(20 * time.Millisecond)
		}
		second := start(ctx, "windows-max", dir, time.Minute, 256)
		err, who := refused(first, second)
		if who != 1 || !errors.Is(err, runtime.ErrDifferentJob) || !strings.Contains(err.Error(), "max parallelism 256 here, 128 in the running job") {
			t.Fatalf("process %d ended: %v; want the second refused with ErrDifferentJob naming both max parallelisms", who, err)
		}
		cancel()
		if err := <-first.errs; err != nil {
			t.Fatalf("the running process: %v", err)
		}
	})
}
