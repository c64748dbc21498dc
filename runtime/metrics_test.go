package runtime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/splitflow/splitflow/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/observe"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// The records counters of every operator equal the records that flowed
// through it, summed over its subtasks, in Prometheus and in Status, once
// the job has finished.
func TestMetricsCountRecordsThatFlowed(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := NewEnvironment(WithParallelism(2), WithMaxParallelism(16), WithLogger(discardLogger()), WithMetricsRegistry(reg))
	src := FromSource(env, &rangeSrc{splits: 4, perSplit: 250, readerFailAt: -1}, "range").UID("src")
	even := Filter(src, func(v int64) (bool, error) { return v%2 == 0, nil }).UID("even")
	half := Map(even, func(v int64) (int64, error) { return v / 2, nil }).UID("half")
	counted := KeyedProcessPerSubtask(KeyBy(half, func(v int64) int64 { return v % 5 }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} }).UID("counts")
	sink := newCollectSink[int64]()
	SinkTo(counted, sink).UID("sink")
	if err := env.Execute(testCtx(t), "records"); err != nil {
		t.Fatal(err)
	}
	if sink.Count() != 500 {
		t.Fatalf("sink got %d records, want 500", sink.Count())
	}
	for _, c := range []struct {
		uid     string
		in, out float64
	}{
		{"src", 1000, 1000},
		{"even", 1000, 500},
		{"half", 500, 500},
		{"counts", 500, 500},
		{"sink", 500, 500},
	} {
		in, _ := metricstest.Sum(t, reg, "splitflow_operator_records_in_total", map[string]string{"uid": c.uid})
		out, _ := metricstest.Sum(t, reg, "splitflow_operator_records_out_total", map[string]string{"uid": c.uid})
		if in != c.in || out != c.out {
			t.Errorf("operator %s: records in %v out %v, want %v and %v", c.uid, in, out, c.in, c.out)
		}
	}

	st := env.Status()
	if st.State != "finished" {
		t.Errorf("state %q, want finished", st.State)
	}
	if len(st.Graph.Vertices) != 2 || len(st.Graph.Edges) != 1 || st.Graph.Edges[0].Partitioning != "hash" {
		t.Errorf("graph %+v, want two vertices joined by a hash edge", st.Graph)
	}
	if len(st.Tasks) != 4 {
		t.Fatalf("%d tasks, want 4", len(st.Tasks))
	}
	var srcIn, srcOut, sinkIn, sinkOut int64
	for _, ts := range st.Tasks {
		if ts.State != "finished" {
			t.Errorf("task %s/%d state %q, want finished", ts.Name, ts.Subtask, ts.State)
		}
		if ts.BusyMillis+ts.IdleMillis+ts.BackpressuredMillis < 0 {
			t.Errorf("task %s/%d has negative times", ts.Name, ts.Subtask)
		}
		if ts.Vertex == 0 {
			srcIn, srcOut = srcIn+ts.RecordsIn, srcOut+ts.RecordsOut
		} else {
			sinkIn, sinkOut = sinkIn+ts.RecordsIn, sinkOut+ts.RecordsOut
		}
	}
	// The source chain reads 1000 and sends 500 over the network; the
	// keyed chain takes those 500 and writes them.
	if srcIn != 1000 || srcOut != 500 || sinkIn != 500 || sinkOut != 500 {
		t.Errorf("task records: source chain %d/%d, sink chain %d/%d; want 1000/500 and 500/500", srcIn, srcOut, sinkIn, sinkOut)
	}
	if st.Checkpoints.Enabled {
		t.Errorf("checkpoints enabled in a job without them")
	}
}

// Checkpoint counters, the duration histogram, size and restarts move in
// Prometheus and in Status, and the job logs each completed checkpoint and
// each split assignment.
func TestMetricsCheckpointsAndRestarts(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs statustest.LockedBuffer
	store := newTxnStore()
	src := &rangeSrc{splits: 4, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
	env := countingJob(2, src, failOnce(50), &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)),
		WithMetricsRegistry(reg), WithLogger(slogText(&logs)))
	if err := env.Execute(testCtx(t), "checkpoints"); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, store, 160, 7)

	st := env.Status()
	completed, _ := metricstest.Sum(t, reg, "splitflow_checkpoints_total", map[string]string{"result": "completed"})
	if completed == 0 || int64(completed) != st.Checkpoints.Completed {
		t.Errorf("completed checkpoints: metric %v, status %d; want equal and > 0", completed, st.Checkpoints.Completed)
	}
	failed, _ := metricstest.Sum(t, reg, "splitflow_checkpoints_total", map[string]string{"result": "failed"})
	if int64(failed) != st.Checkpoints.Failed {
		t.Errorf("failed checkpoints: metric %v, status %d", failed, st.Checkpoints.Failed)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_checkpoint_duration_seconds", nil); n != completed {
		t.Errorf("duration histogram has %v samples, want one per completed checkpoint (%v)", n, completed)
	}
	if size, _ := metricstest.Sum(t, reg, "splitflow_checkpoint_last_size_bytes", nil); size <= 0 {
		t.Errorf("last checkpoint size %v, want > 0 (keyed state and committables)", size)
	}
	if r, _ := metricstest.Sum(t, reg, "splitflow_job_restarts_total", nil); r != 1 || st.Restarts != 1 {
		t.Errorf("restarts: metric %v, status %d; want 1", r, st.Restarts)
	}
	if st.LastFailure == nil || !strings.Contains(st.LastFailure.Error, "injected failure at record 50") || !strings.Contains(st.LastFailure.Task, "Map (") {
		t.Errorf("last failure %+v, want the injected one in the map's task", st.LastFailure)
	}
	// The final checkpoint at least completed after the restart.
	if c := st.Checkpoints; c.CompletedSinceRestart <= 0 || c.CompletedSinceRestart > c.Completed {
		t.Errorf("%d checkpoints completed since the restart, of %d: want some, and no more than all", c.CompletedSinceRestart, c.Completed)
	}
	if !st.Checkpoints.Enabled || st.Checkpoints.IntervalMillis != 3 {
		t.Errorf("checkpoints %+v, want enabled every 3ms", st.Checkpoints)
	}
	if n := len(st.Checkpoints.Recent); n == 0 || n > 20 {
		t.Fatalf("%d recent checkpoints, want 1..20", n)
	}
	last := st.Checkpoints.Recent[len(st.Checkpoints.Recent)-1]
	if last.Status != "completed" || last.SizeBytes <= 0 || last.TriggerTime.IsZero() {
		t.Errorf("newest checkpoint %+v, want the completed final one with its size", last)
	}
	for _, ts := range st.Tasks {
		if ts.Attempt != 1 || ts.State != "finished" {
			t.Errorf("task %s/%d: attempt %d state %q, want attempt 1 finished", ts.Name, ts.Subtask, ts.Attempt, ts.State)
		}
	}
	// Counters run on across the restart: the sources read at least
	// everything once.
	if in, _ := metricstest.Sum(t, reg, "splitflow_operator_records_in_total", map[string]string{"uid": "src"}); in < 160 {
		t.Errorf("source records %v, want at least 160 across attempts", in)
	}

	out := logs.String()
	for _, want := range []string{"splitflow: checkpoint completed", "duration=", "size=", "splitflow: splits assigned", "subtask=", "splits="} {
		if !strings.Contains(out, want) {
			t.Errorf("job log lacks %q", want)
		}
	}
}

// Status and /metrics are safe from other goroutines while the job runs,
// and show it moving: records, held splits, watermarks, checkpoints; after
// a cancellation the job is cancelled and its tasks finished.
func TestStatusWhileRunning(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := NewEnvironment(WithParallelism(2), WithLogger(discardLogger()), WithMetricsRegistry(reg),
		WithCheckpointInterval(20*time.Millisecond), WithAutoWatermarkInterval(5*time.Millisecond))
	before := env.Status()
	if before.State != "created" || len(before.Tasks) != 0 {
		t.Errorf("before Execute: %+v, want created and no tasks", before)
	}
	wm := watermark.ForMonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return v })
	src := FromSource(env, &rangeSrc{splits: 2, perSplit: 1 << 40, delay: 20 * time.Microsecond, readerFailAt: -1}, "range", WithWatermarks(wm)).UID("src")
	SinkTo(Rebalance(Map(src, func(v int64) (int64, error) { return v, nil })), newCollectSink[int64]()).UID("sink")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "live") }()

	// Readers hammer Status and the registry meanwhile (-race).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = env.Status()
				if _, err := reg.Gather(); err != nil {
					t.Errorf("gather: %v", err)
					return
				}
			}
		})
	}

	deadline := time.Now().Add(10 * time.Second)
	var st status.Job
	for {
		st = env.Status()
		if st.State == "running" && st.Checkpoints.Completed > 0 && liveTasks(st) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the job moving: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// The watermark is exported for the source tasks (their reader's mux)
	// and for the tasks behind the network (their valve), in seconds.
	for _, vertex := range []string{"0", "1"} {
		for _, sub := range []string{"0", "1"} {
			wmMetric, n := metricstest.Sum(t, reg, "splitflow_task_watermark_seconds", map[string]string{"subtask": sub, "vertex": vertex})
			if n != 1 || wmMetric <= 0 {
				t.Errorf("watermark metric of task %s/%s: %v over %d series, want one, in seconds", vertex, sub, wmMetric, n)
			}
		}
	}
	for _, ts := range st.Tasks {
		if ts.Watermark == nil {
			t.Errorf("task %s/%d has no watermark in Status", ts.Name, ts.Subtask)
		}
	}
	if busy, _ := metricstest.Sum(t, reg, "splitflow_task_busy_seconds_total", nil); busy <= 0 {
		t.Errorf("busy time %v, want > 0", busy)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := env.Status()
	if after.State != "cancelled" {
		t.Errorf("after cancel: state %q, want cancelled", after.State)
	}
	// A cancelled source stops without a final watermark, so the ones
	// above remain; maxWatermark is never exported (see
	// TestEndedInputExportsNoWatermark).
	for _, ts := range after.Tasks {
		if ts.State != "finished" {
			t.Errorf("task %s/%d: state %q after draining, want finished", ts.Name, ts.Subtask, ts.State)
		}
	}
}

// liveTasks reports that every task moved records, and that each source
// task holds its split and has a watermark.
func liveTasks(st status.Job) bool {
	if len(st.Tasks) != 4 {
		return false
	}
	for _, ts := range st.Tasks {
		if ts.RecordsIn == 0 || ts.State != "running" {
			return false
		}
		if ts.Watermark == nil || *ts.Watermark <= 0 {
			return false
		}
		if ts.Vertex == 0 && (len(ts.Splits) != 1 || ts.BusyMillis+ts.IdleMillis+ts.BackpressuredMillis == 0) {
			return false
		}
	}
	return true
}

// Two Environments with their default (private) registries run side by
// side in one process.
func TestMetricsRegistriesPerEnvironment(t *testing.T) {
	a := NewEnvironment(WithLogger(discardLogger()))
	b := NewEnvironment(WithLogger(discardLogger()))
	errs := make(chan error, 2)
	go func() { errs <- runTwin(testCtx(t), a, nil) }()
	go func() { errs <- runTwin(testCtx(t), b, nil) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, env := range []*Environment{a, b} {
		if n, _ := metricstest.Sum(t, env.gatherer(), "splitflow_operator_records_in_total", map[string]string{"uid": "sink"}); n != 20 {
			t.Errorf("sink records %v in its own registry, want 20", n)
		}
		if n, _ := metricstest.Sum(t, env.gatherer(), "go_goroutines", nil); n == 0 {
			t.Errorf("the default registry lacks the Go collector")
		}
	}
}

// runTwin runs on env a job of src (10 records of each of two splits
// when nil) into a sink, until it ends or ctx is cancelled.
func runTwin(ctx context.Context, env *Environment, src *rangeSrc) error {
	if src == nil {
		src = &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}
	}
	SinkTo(FromSource(env, src, "range").UID("src"), newCollectSink[int64]()).UID("sink")
	return env.Execute(ctx, "twin")
}

// One registry given to several Environments serves them one after
// another: each job's series replace the previous one's, and every job
// runs. While a job runs on it, another is refused with an error, never a
// panic, and the running job's series are untouched.
func TestMetricsRegistrySharedInTurn(t *testing.T) {
	shared := prometheus.NewRegistry()
	for i := range 3 {
		env := NewEnvironment(WithLogger(discardLogger()), WithMetricsRegistry(shared))
		if err := runTwin(testCtx(t), env, nil); err != nil {
			t.Fatalf("job %d on the shared registry: %v", i+1, err)
		}
		// The job that ended leaves its final values until the next one
		// starts; they are its own, not a sum over the jobs.
		if n, series := metricstest.Sum(t, shared, "splitflow_operator_records_in_total", map[string]string{"uid": "sink"}); n != 20 || series != 1 {
			t.Errorf("after job %d: sink records %v over %d series, want that job's 20", i+1, n, series)
		}
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	running := NewEnvironment(WithLogger(discardLogger()), WithMetricsRegistry(shared))
	done := make(chan error, 1)
	go func() {
		done <- runTwin(ctx, running, &rangeSrc{splits: 1, perSplit: 1 << 40, delay: 100 * time.Microsecond, readerFailAt: -1})
	}()
	for deadline := time.Now().Add(10 * time.Second); running.Status().State != "running"; {
		if time.Now().After(deadline) {
			t.Fatalf("job never ran: %+v", running.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// "running" comes before the tasks have opened and published their
	// series: wait for the sink's, so that the check below sees what the
	// refused job may have touched, not a task still starting.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, series := metricstest.Sum(t, shared, "splitflow_operator_records_in_total", map[string]string{"uid": "sink"}); series == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running job's sink series never appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	refused := NewEnvironment(WithLogger(discardLogger()), WithMetricsRegistry(shared))
	err := runTwin(testCtx(t), refused, nil)
	if err == nil || !strings.Contains(err.Error(), "WithMetricsRegistry") || !strings.Contains(err.Error(), `job "twin", which is still running`) {
		t.Errorf("second job on a registry in use: %v, want an error naming the running job and WithMetricsRegistry", err)
	}
	if st := refused.Status().State; st != "created" {
		t.Errorf("refused job state %q, want created (nothing ran)", st)
	}
	if _, series := metricstest.Sum(t, shared, "splitflow_operator_records_in_total", map[string]string{"uid": "sink"}); series != 1 {
		t.Errorf("%d sink series while one job runs, want its one", series)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Free again once that job has returned.
	if err := runTwin(testCtx(t), NewEnvironment(WithLogger(discardLogger()), WithMetricsRegistry(shared)), nil); err != nil {
		t.Errorf("job after the refused one: %v", err)
	}
	if n, _ := metricstest.Sum(t, shared, "splitflow_operator_records_in_total", map[string]string{"uid": "sink"}); n != 20 {
		t.Errorf("sink records %v after the last job, want its 20", n)
	}
}

// Operator and chain names become label values, which must be valid
// UTF-8: a name that is not is repaired (U+FFFD) instead of panicking in
// the operator or inside Gather, and every other metric is still served.
func TestMetricsInvalidUTF8Names(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := NewEnvironment(WithLogger(discardLogger()), WithMetricsRegistry(reg))
	src := FromSource(env, &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1}, "range\xff").UID("src\xfe")
	m := Map(src, func(v int64) (int64, error) { return v, nil }).Name("bad\xffname").UID("m")
	SinkTo(Rebalance(m), newCollectSink[int64]()).Name("sink\xc3").UID("sink")
	if err := env.Execute(testCtx(t), "utf8"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_operator_records_in_total", map[string]string{"operator": "bad\uFFFDname"}); n != 10 {
		t.Errorf("records into the map under its repaired name: %v, want 10", n)
	}
	if n, _ := metricstest.Sum(t, reg, "splitflow_operator_records_in_total", map[string]string{"uid": "src\uFFFD"}); n != 10 {
		t.Errorf("records of the source under its repaired uid: %v, want 10", n)
	}
	if _, series := metricstest.Sum(t, reg, "splitflow_task_busy_seconds_total", nil); series != 2 {
		t.Errorf("%d task series, want both tasks'", series)
	}
}

func slogText(w *statustest.LockedBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// idleInput never has input: its task only waits.
type idleInput struct{ never chan struct{} }

func (idleInput) Step() (engine.InputStatus, error) { return engine.InputNothing, nil }
func (i idleInput) Ready() <-chan struct{}          { return i.never }
func (idleInput) Stop()                             {}
func (idleInput) Stopped() bool                     { return false }

// A wait that the task's context cuts short is idle time, not busy time:
// a task that did nothing but wait reports no busy time at all, however
// long after its last publication it was stopped.
func TestWaitCutShortIsNotBusy(t *testing.T) {
	const publishInterval = observe.PublishInterval
	synctest.Test(t, func(t *testing.T) {
		tk := &task{name: "idle", head: &engine.OpInfo{Name: "idle"}, cfg: &config{}, mb: engine.NewMailbox(),
			input: idleInput{never: make(chan struct{})}}
		tk.meter.stats = observe.NewTaskStats(0, "idle", 0, 1, 0, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tk.run(ctx) }()
		// Stopped halfway between two publications, so a wait that was
		// not booked would show as 100ms of busy time.
		time.Sleep(10*publishInterval + publishInterval/2)
		cancel()
		if err := <-done; !errors.Is(err, errTaskCancelled) {
			t.Fatalf("run: %v, want errTaskCancelled", err)
		}
		busy, idle, _ := tk.meter.stats.Times()
		if busy != 0 || time.Duration(idle) != 10*publishInterval+publishInterval/2 {
			t.Errorf("busy %v idle %v, want 0 and all of the %v waited", time.Duration(busy), time.Duration(idle), 10*publishInterval+publishInterval/2)
		}
	})
}
