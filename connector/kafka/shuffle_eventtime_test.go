package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/slotinspect"
	"github.com/splitflow/splitflow/runtime/watermark"
	"github.com/splitflow/splitflow/runtime/window"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Event time crosses the keyed edge of a distributed job: tumbling
// event-time windows downstream of the cut fire on the watermark markers
// every upstream slot writes (the minimum over slots and partitions), not
// only at an end of input (the input is unbounded). Two processes (two
// Executes sharing kfake and a checkpoint directory) run a job of 4 slots
// over an input of 3 partitions, so one slot's source has no partition
// and says so with idleness. The first half of the input goes to every
// partition; then the second process joins, slots are handed over and
// restored, the reading side's event time with them; the second half
// goes to one partition, of a slot the second process took, and ends
// with an event an hour later. Only that slot has input then, the others
// are idle, so no record can be late whatever the order in which slots
// resume (with idleness, a slot that resumes after others moved event
// time on may find its records late, in one process as in many). A
// read_committed consumer sees every window once with its count, and
// not the window the last event keeps open.
func TestDistributedEventTimeWindowsFireOnMarkersExactly(t *testing.T) {
	// The input's partitions belong to slots 1, 2 and 3 (the partition
	// rule on "views"): slot 0, idle, stays with the first process (the
	// group's sticky assignment keeps slots 0 and 1 there) and writes its
	// idle marker once, before the handover; the reading side of slots 2
	// and 3 restored in the second process must keep it from its state.
	const in, out, job = "views", "windows", "viewtime"
	seeds, cl := distributedCluster(t, in, out)

	// Per partition, timestamps rise (monotonous watermarks), 50 ms
	// apart: 10 one-second windows of 10 users on every partition, then
	// 10 on partition 1 (slot 2) alone.
	const base, perHalf = int64(1_700_000_000_000), 200
	var first, second []*kgo.Record
	want := map[string]int64{} // "user start" -> count
	event := func(p, i int) *kgo.Record {
		ts := base + int64(i)*50 + int64(p)
		user := fmt.Sprintf("u%d", (i*7+p)%10)
		want[fmt.Sprintf("%s %d", user, ts-ts%1000)]++
		return &kgo.Record{Topic: in, Partition: int32(p), Value: []byte(user), Timestamp: time.UnixMilli(ts)}
	}
	for i := range perHalf {
		for p := range 3 {
			first = append(first, event(p, i))
		}
	}
	for i := perHalf; i < 2*perHalf; i++ {
		second = append(second, event(1, i))
	}
	second = append(second, &kgo.Record{Topic: in, Partition: 1, Value: []byte("closer"), Timestamp: time.UnixMilli(base + time.Hour.Milliseconds())})
	produce := func(rs []*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	var envs sync.Map // process name -> *runtime.Environment
	run := func(ctx context.Context, name string) error {
		sh, err := NewShuffle(WithShuffleSinkOptions(WithBrokers(seeds...), WithLogger(quietLogger())),
			WithShuffleSourceOptions(WithBrokers(seeds...), WithLogger(quietLogger())))
		if err != nil {
			return err
		}
		env := runtime.NewEnvironment(
			runtime.WithCheckpointInterval(100*time.Millisecond),
			runtime.WithCheckpointDir(dir),
			runtime.WithLogger(quietLogger()),
			runtime.WithDistributed(runtime.Distributed{Job: job, Slots: 4, Shuffle: sh,
				Cluster: Connect(WithBrokers(seeds...), WithClientOpts(kgo.ClientID(name))), SessionTimeout: 2 * time.Second}))
		src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(in), WithLogger(quietLogger()))
		if err != nil {
			return err
		}
		clicks := runtime.FromSource(env, src, "clicks", runtime.WithWatermarks(watermark.ForMonotonousTimestamps[string]().WithIdleness(300*time.Millisecond))).UID("clicks")
		byUser := runtime.KeyBy(clicks, func(u string) string { return u })
		counts := runtime.WindowCount(runtime.Window(byUser, window.Tumbling(time.Second))).UID("per-second")
		sink, err := NewSink(KeyValueSerializer(out, func(r window.Result[string, int64]) ([]byte, []byte, error) {
			return nil, fmt.Appendf(nil, "%s %d %d", r.Key, r.Window.Start, r.Value), nil
		}), WithBrokers(seeds...), WithExactlyOnce(out), WithLogger(quietLogger()))
		if err != nil {
			return err
		}
		runtime.SinkTo(counts, connector.Sink[window.Result[string, int64]](sink)).UID("out")
		envs.Store(name, env)
		return env.Execute(ctx, job)
	}
	visible := func() int {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recs, err := committed.Visible(rctx, seeds, out, 20*time.Millisecond)
		if err != nil {
			t.Logf("read %s while the job runs: %v", out, err)
			return -1
		}
		return len(recs)
	}
	waitFor := func(what string, done func() bool, errs ...chan error) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !done() {
			for _, e := range errs {
				select {
				case err := <-e:
					t.Fatalf("waiting for %s: a process ended: %v", what, err)
				default:
				}
			}
			if time.Now().After(deadline) {
				envs.Range(func(k, v any) bool {
					st, _ := json.MarshalIndent(v.(*runtime.Environment).Status(), "", " ")
					t.Logf("process %s: %s", k, st)
					return true
				})
				t.Fatalf("waiting for %s: not within 90s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	var running sync.WaitGroup
	start := func(ctx context.Context, name string, done chan error) {
		running.Add(1)
		go func() {
			defer running.Done()
			done <- run(ctx, name)
		}()
	}
	// Registered after TempDir, so run before its removal: a failed test
	// stops both processes before their checkpoints are removed.
	t.Cleanup(func() {
		cancelA()
		cancelB()
		running.Wait()
	})
	produce(first)
	start(ctxA, "first", doneA)
	// Windows fire while the input goes on: on markers, not at an end.
	waitFor("the first windows", func() bool { return visible() > 0 }, doneA)
	start(ctxB, "second", doneB)
	// The rest is written once both processes run slots they claimed,
	// some of them handed over from the first: restored, event time
	// included.
	adm := kadm.NewClient(cl)
	waitFor("the second process's claims", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := slotinspect.ReadStatus(ctx, adm, job, dir)
		if err != nil || len(st.Members) != 2 {
			return false
		}
		for _, m := range st.Members {
			if len(m.Slots) == 0 {
				return false
			}
		}
		for _, sl := range st.Slots {
			if sl.Log == nil || sl.Log.Claim == nil || sl.Log.Claim.Member != sl.Owner {
				return false
			}
		}
		return true
	}, doneA, doneB)
	produce(second)
	waitFor("every window", func() bool { return visible() >= len(want) }, doneA, doneB)
	cancelA()
	cancelB()
	for _, d := range []chan error{doneA, doneB} {
		if err := <-d; err != nil {
			t.Fatalf("a process ended with %v", err)
		}
	}

	got := map[string][]int64{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, out, 30*time.Second) {
		var user string
		var start, n int64
		if _, err := fmt.Sscanf(string(r.Value), "%s %d %d", &user, &start, &n); err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		k := fmt.Sprintf("%s %d", user, start)
		got[k] = append(got[k], n)
	}
	var bad []string
	for k, n := range want {
		if c := got[k]; len(c) != 1 || c[0] != n {
			bad = append(bad, fmt.Sprintf("%s: %v, want [%d]", k, c, n))
		}
	}
	for k, c := range got {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: %v, a window that must not fire", k, c))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("%d of %d windows wrong (read_committed):\n%s", len(bad), len(want), strings.Join(bad[:min(len(bad), 20)], "\n"))
	}
}
