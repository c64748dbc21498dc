package runtime

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
)

// savepointJob is rangeJob's graph, optionally with one more (stateless)
// operator and its sink under another UID.
func savepointJob(j *rangeJob, extra bool, sinkUID string) *Environment {
	if j.sink == nil {
		j.sink = &txnSink2PC{store: newTxnStore()}
	}
	j.src = &rangeSrc{splits: j.splits, perSplit: j.perSplit, delay: j.delay, readerFailAt: -1}
	opts := append([]Option{
		WithParallelism(j.par),
		WithFlushTimeout(time.Millisecond),
		WithRestartStrategy(restart.None()),
		WithLogger(discardLogger()),
		WithDrainTimeout(5 * time.Second),
	}, j.opts...)
	env := NewEnvironment(opts...)
	ds := Map(FromSource(env, j.src, "range").UID("src"), func(v int64) (int64, error) { return v, nil }).UID("map")
	if extra {
		ds = Map(ds, func(v int64) (int64, error) { return v, nil }).UID("extra")
	}
	SinkTo(ds, twoPhase(j.sink)).UID(sinkUID)
	return env
}

// committedOnce returns the committed records, failing on one committed
// twice.
func committedOnce(t *testing.T, store *txnStore) map[int64]bool {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]bool{}
	for _, rs := range store.committed {
		for _, r := range rs {
			if seen[r] {
				t.Fatalf("record %d committed twice", r)
			}
			seen[r] = true
		}
	}
	return seen
}

// stopAfter runs env, stops it with a savepoint into target once
// checkpoint 2 completed, and returns the savepoint.
func stopAfter(t *testing.T, env *Environment, src *rangeSrc, target string) status.Savepoint {
	t.Helper()
	// The readers stop half-way through their first split until the stop
	// has returned: on a loaded machine the job could otherwise read all
	// of its input before the second checkpoint, and end before the stop.
	release := make(chan struct{})
	defer close(release)
	src.hold = func(v int64) bool { return v%int64(src.perSplit) >= int64(src.perSplit/2) }
	src.release = release
	second := make(chan struct{})
	var once sync.Once
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		if id >= 2 {
			once.Do(func() { close(second) })
		}
	}}
	var sp status.Savepoint
	var spErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		<-second
		sp, spErr = env.StopWithSavepoint(context.Background(), target)
	})
	if err := env.Execute(testCtx(t), "first"); !errors.Is(err, ErrStopped) {
		t.Fatalf("Execute of a job stopped with a savepoint: %v, want ErrStopped", err)
	}
	wg.Wait()
	if spErr != nil {
		t.Fatal(spErr)
	}
	return sp
}

// Rule (stop with savepoint, restore after code changes): a job stopped
// with a savepoint commits up to it and ends; its checkpoint directory
// deleted, a changed job (one more operator, another parallelism) started
// from the savepoint commits the rest: every record exactly once.
func TestStopWithSavepointRestoresChangedJobExactlyOnce(t *testing.T) {
	store := newTxnStore()
	const splits, perSplit = 4, 300
	dir1, target := t.TempDir(), t.TempDir()
	j1 := &rangeJob{par: 2, splits: splits, perSplit: perSplit, delay: time.Millisecond, sink: &txnSink2PC{store: store}}
	j1.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir1)}
	env1 := savepointJob(j1, false, "sink")
	sp := stopAfter(t, env1, j1.src, target)
	if !strings.HasPrefix(sp.Path, target) || sp.Checkpoint < 2 {
		t.Fatalf("savepoint %+v, want one under %s of checkpoint >= 2", sp, target)
	}
	before := len(committedOnce(t, store))
	if before == 0 || before == splits*perSplit {
		t.Fatalf("first job committed %d of %d records; the test needs a stop half-way", before, splits*perSplit)
	}
	if err := os.RemoveAll(dir1); err != nil {
		t.Fatal(err)
	}
	var restored status.Restore
	j2 := &rangeJob{par: 3, splits: splits, perSplit: perSplit, sink: &txnSink2PC{store: store}}
	j2.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(t.TempDir()), WithRestoreFrom(sp.Path),
		WithJobListener(JobListener{Restored: func(r status.Restore) { restored = r }})}
	if err := savepointJob(j2, true, "sink").Execute(testCtx(t), "second"); err != nil {
		t.Fatal(err)
	}
	if restored.Checkpoint != sp.Checkpoint || restored.Path != sp.Path {
		t.Fatalf("second job restored %+v, want checkpoint %d at %s", restored, sp.Checkpoint, sp.Path)
	}
	if got := len(committedOnce(t, store)); got != splits*perSplit {
		t.Fatalf("committed %d distinct records over both jobs, want %d", got, splits*perSplit)
	}
}

// Rule: a savepoint taken while the job runs leaves it running, and the
// job's retention (one checkpoint kept) never removes it.
func TestTriggerSavepointIsNeverRetained(t *testing.T) {
	dir, target := t.TempDir(), t.TempDir()
	j := &rangeJob{par: 2, splits: 2, perSplit: 2000, delay: time.Millisecond}
	j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir), WithCheckpointsRetained(1), WithSavepointDir(target)}
	env := savepointJob(j, false, "sink")
	// The readers stop half-way until two checkpoints have completed
	// after the savepoint: on a loaded machine the job could otherwise
	// end before the savepoint is taken, or before retention runs again.
	sp, last := runWithSavepointMidFlow(t, j, env)
	if last <= sp.Checkpoint+1 {
		t.Fatalf("the job completed checkpoints up to %d, savepoint of %d: retention had nothing to remove after it", last, sp.Checkpoint)
	}
	c, err := checkpoint.OpenRestorePoint(sp.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Savepoint || c.ID != sp.Checkpoint {
		t.Fatalf("savepoint at %s: id %d savepoint %v", sp.Path, c.ID, c.Savepoint)
	}
	if got := env.Status().Savepoints; len(got) != 1 || got[0] != sp {
		t.Fatalf("status savepoints %+v, want [%+v]", got, sp)
	}
	if got := len(committedOnce(t, j.sink.store)); got != 2*2000 {
		t.Fatalf("committed %d records, want %d", got, 2*2000)
	}
}

// Rule: state of an operator the new job does not have is refused without
// WithAllowNonRestoredState (naming the UID), dropped with it.
func TestRestoreFromSavepointRefusesRemovedOperator(t *testing.T) {
	j1 := &rangeJob{par: 2, splits: 2, perSplit: 2000, delay: time.Millisecond}
	j1.opts = []Option{WithCheckpointInterval(5 * time.Millisecond)}
	env1 := savepointJob(j1, false, "sink")
	sp := stopAfter(t, env1, j1.src, t.TempDir())
	j2 := &rangeJob{par: 2, splits: 2, perSplit: 2000}
	j2.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithRestoreFrom(sp.Path)}
	err := savepointJob(j2, false, "other-sink").Execute(testCtx(t), "refused")
	if err == nil || !strings.Contains(err.Error(), `"sink"`) || !strings.Contains(err.Error(), sp.Path) {
		t.Fatalf("restore with the sink's UID gone: %v, want a refusal naming uid sink and %s", err, sp.Path)
	}
	j3 := &rangeJob{par: 2, splits: 2, perSplit: 2000}
	j3.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithRestoreFrom(sp.Path), WithAllowNonRestoredState()}
	if err := savepointJob(j3, false, "other-sink").Execute(testCtx(t), "allowed"); err != nil {
		t.Fatal(err)
	}
}

// Rule: a missing savepoint fails the job naming the path; it never
// starts fresh.
func TestRestoreFromMissingSavepointFails(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "savepoint-9-x")
	j := &rangeJob{par: 1, splits: 1, perSplit: 10}
	j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithRestoreFrom(missing)}
	err := savepointJob(j, false, "sink").Execute(testCtx(t), "missing")
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing savepoint: %v, want an error naming %s", err, missing)
	}
	if n := len(committedOnce(t, j.sink.store)); n != 0 {
		t.Fatalf("a job refused at start committed %d records", n)
	}
}

// Rule: a savepoint needs checkpoints and a target; TriggerSavepoint with
// no job running says so.
func TestSavepointRefusals(t *testing.T) {
	env := NewEnvironment()
	if _, err := env.TriggerSavepoint(context.Background(), t.TempDir()); !errors.Is(err, status.ErrNoRunningJob) {
		t.Fatalf("no job: %v", err)
	}
	dir := t.TempDir()
	j := &rangeJob{par: 1, splits: 1, perSplit: 2000, delay: time.Millisecond}
	j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(dir)}
	env = savepointJob(j, false, "sink")
	errs := make(chan error, 2)
	started := make(chan struct{})
	var once sync.Once
	env.hooks = &testHooks{checkpointCompleted: func(int64, checkpoint.Storage) { once.Do(func() { close(started) }) }}
	ctx, cancel := context.WithCancel(testCtx(t))
	go func() {
		<-started
		_, err := env.TriggerSavepoint(context.Background(), "")
		errs <- err
		_, err = env.TriggerSavepoint(context.Background(), filepath.Join(dir, "inside"))
		errs <- err
		cancel()
	}()
	if err := env.Execute(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no target", "inside the job's checkpoint storage"} {
		if err := <-errs; !errors.Is(err, status.ErrSavepointRefused) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v, want a refusal saying %q", err, want)
		}
	}
}

// Rule (savepoint copy off the master): while a savepoint's copy is held
// (its uploads to S3 wait), the master keeps serving: the job's
// checkpoints go on completing with one retained, whose retention leaves
// the copied checkpoint alone, and a stop with a savepoint is taken. Once
// the uploads go on, both savepoints complete whole and the job ends.
func TestSavepointCopyKeepsTheMasterServing(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	srv := s3test.NewWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/checkpoints/savepoints/") {
				heldOnce.Do(func() { close(held) })
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	srv.Env(t)
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the server's Close, which waits for held requests

	completed := make(chan int64, 10000)
	j := &rangeJob{par: 2, splits: 2, perSplit: 1_000_000, delay: time.Millisecond}
	j.opts = []Option{WithCheckpointInterval(50 * time.Millisecond), WithCheckpointDir(srv.URLOf("jobs/held")), WithCheckpointsRetained(1)}
	env := savepointJob(j, false, "sink")
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		select {
		case completed <- id:
		default:
		}
	}}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	execErr := make(chan error, 1)
	go func() { execErr <- env.Execute(ctx, "job") }()
	defer func() {
		letGo()
		cancel()
		<-execErr
	}()
	waitCheckpoint := func(after int64, why string) int64 {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case id := <-completed:
				if id > after {
					return id
				}
			case <-timeout:
				t.Fatalf("no checkpoint after %d completed within 60s %s", after, why)
			}
		}
	}
	waitCheckpoint(0, "of the job's start")

	type result struct {
		sp  status.Savepoint
		err error
	}
	triggered := make(chan result, 1)
	go func() {
		sp, err := env.TriggerSavepoint(context.Background(), srv.URLOf("savepoints"))
		triggered <- result{sp, err}
	}()
	select {
	case <-held:
	case r := <-triggered:
		t.Fatalf("the savepoint returned before its copy reached S3: %+v, %v", r.sp, r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the savepoint's copy never reached S3")
	}
	last := waitCheckpoint(0, "")
	last = waitCheckpoint(last+2, "while a savepoint copy was held: the master stopped serving")

	stopTarget := t.TempDir()
	stopped := make(chan result, 1)
	go func() {
		sp, err := env.StopWithSavepoint(context.Background(), stopTarget)
		stopped <- result{sp, err}
	}()
	waitCheckpoint(last, "after a stop was asked while a savepoint copy was held")
	letGo()

	tr := <-triggered
	if tr.err != nil {
		t.Fatalf("the held savepoint: %v", tr.err)
	}
	st := <-stopped
	if st.err != nil {
		t.Fatalf("stop with savepoint: %v", st.err)
	}
	if err := <-execErr; !errors.Is(err, ErrStopped) {
		t.Fatalf("Execute after a stop with savepoint: %v, want ErrStopped", err)
	}
	execErr <- nil // for the deferred wait
	for _, sp := range []status.Savepoint{tr.sp, st.sp} {
		c, err := checkpoint.OpenRestorePoint(sp.Path)
		if err != nil {
			t.Fatalf("savepoint %s: %v", sp.Path, err)
		}
		if !c.Savepoint || c.ID != sp.Checkpoint {
			t.Fatalf("savepoint at %s: id %d savepoint %v, want %d", sp.Path, c.ID, c.Savepoint, sp.Checkpoint)
		}
	}
	if tr.sp.Checkpoint >= st.sp.Checkpoint {
		t.Fatalf("held savepoint of checkpoint %d, stop's of %d: want the stop's later", tr.sp.Checkpoint, st.sp.Checkpoint)
	}
	committedOnce(t, j.sink.store)
}

// A savepoint stays restorable after the job that took it went on: that
// job commits the savepoint's transactions, records in the savepoint that
// it did, and reuses their ids, so committing them again would be refused
// (as Kafka answers PRODUCER_FENCED). A job started from the savepoint,
// at another parallelism, commits none of them and reports no loss; its
// output and the savepoint job's output up to the savepoint hold every
// record once. A savepoint without the record still reports the refused
// commit as lost data. Before, every start from such a savepoint failed
// with "its data is lost" though nothing was.
func TestRestoringASavepointNeverReportsLossOfWhatItsJobCommitted(t *testing.T) {
	// The savepoint is taken while input flows, and the job goes on past
	// it. What this test holds needs a transaction in the savepoint: one
	// taken once every source already waited at the middle of its split,
	// after a checkpoint that took all it had read, holds none (a loaded
	// machine makes that happen, about once in 30 runs), so such a run is
	// done again.
	var j *rangeJob
	sp := savepointHolding(t, "a transaction", func() (status.Savepoint, bool) {
		j = &rangeJob{par: 2, splits: 2, perSplit: 2000, delay: time.Millisecond}
		j.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(t.TempDir()), WithSavepointDir(t.TempDir())}
		sp, _ := runWithSavepointMidFlow(t, j, savepointJob(j, false, "sink"))
		j.sink.store.mu.Lock()
		defer j.sink.store.mu.Unlock()
		return sp, slices.Contains(slices.Collect(maps.Values(j.sink.store.checkpointOf)), sp.Checkpoint)
	})

	// The savepoint's job committed its transactions and went on, reusing
	// their ids: a commit of one of them is refused now.
	errFenced := errors.New("PRODUCER_FENCED: the transactional id was used again since")
	restore := func() (*txnStore, error) {
		r := &rangeJob{par: 3, splits: 2, perSplit: 2000}
		r.sink = &txnSink2PC{store: newTxnStore(), onCommit: func(req connector.CommitRequest[tTxn]) bool {
			if req.Committable().Checkpoint <= sp.Checkpoint {
				req.SignalFailedWithKnownReason(errFenced)
				return false
			}
			return true
		}}
		r.opts = []Option{WithCheckpointInterval(5 * time.Millisecond), WithCheckpointDir(t.TempDir()), WithRestoreFrom(sp.Path)}
		return r.sink.store, savepointJob(r, false, "sink").Execute(testCtx(t), "restored")
	}
	restored, err := restore()
	if err != nil {
		t.Fatalf("a job started from the savepoint after its job committed it and went on: %v; want no loss reported", err)
	}
	// The first job's output up to the savepoint, then the restored job's.
	j.sink.store.mu.Lock()
	restored.mu.Lock()
	for id, rs := range j.sink.store.committed {
		if j.sink.store.checkpointOf[id] <= sp.Checkpoint {
			restored.committed["first-"+id] = rs
		}
	}
	restored.mu.Unlock()
	j.sink.store.mu.Unlock()
	if err := restored.verify(2 * 2000); err != nil {
		t.Fatalf("output up to the savepoint and after it: %v", err)
	}

	// Without the savepoint's record that its job committed it, the
	// refused commit is lost data, as before.
	st, err := checkpoint.OpenStorage(sp.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.(checkpoint.RecordStorage).DeleteRecord("committed"); err != nil {
		t.Fatal(err)
	}
	if _, err := restore(); !errors.Is(err, errFenced) || !strings.Contains(err.Error(), "data is lost") {
		t.Fatalf("a job started from a savepoint whose committed transactions are not recorded as such, its commits refused: %v; want the loss reported", err)
	}
}

// runWithSavepointMidFlow runs env (built from j by savepointJob) to its
// end, taking a savepoint once its first checkpoint completed. j's readers
// stop half-way through each split until two checkpoints have completed
// after the savepoint, so the savepoint is taken while input flows and the
// job goes on past it. It returns the savepoint and the newest checkpoint
// the job completed.
func runWithSavepointMidFlow(t *testing.T, j *rangeJob, env *Environment) (status.Savepoint, int64) {
	t.Helper()
	release := make(chan struct{})
	var released sync.Once
	releaseAll := func() { released.Do(func() { close(release) }) }
	j.src.hold = func(v int64) bool { return v%2000 >= 1000 }
	j.src.release = release
	var sp status.Savepoint
	var spErr error
	var last, past atomic.Int64
	started := make(chan struct{})
	var once sync.Once
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		last.Store(id)
		once.Do(func() { close(started) })
		if p := past.Load(); p > 0 && id >= p {
			releaseAll()
		}
	}}
	var wg sync.WaitGroup
	wg.Go(func() {
		<-started
		sp, spErr = env.TriggerSavepoint(context.Background(), "")
		if spErr != nil {
			releaseAll()
			return
		}
		past.Store(sp.Checkpoint + 2)
		if last.Load() >= sp.Checkpoint+2 {
			releaseAll()
		}
	})
	if err := env.Execute(testCtx(t), "job"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if spErr != nil {
		t.Fatal(spErr)
	}
	return sp, last.Load()
}

// savepointHolding runs take, which runs a job with a savepoint taken
// mid-flow (runWithSavepointMidFlow), until the savepoint it returns holds
// what, up to five times, and returns that savepoint.
func savepointHolding(t *testing.T, what string, take func() (status.Savepoint, bool)) status.Savepoint {
	t.Helper()
	for attempt := 1; ; attempt++ {
		sp, held := take()
		if held {
			return sp
		}
		if attempt == 5 {
			t.Fatalf("%d savepoints taken mid-flow, none holding %s", attempt, what)
		}
		t.Logf("savepoint of checkpoint %d holds no %s; again", sp.Checkpoint, strings.TrimPrefix(what, "a "))
	}
}

// The same holds for the file sink, whose committer reports a committed
// file lost when neither its pending nor its published name exists
// (file.ErrCommittedFileLost). A consumer may move published files away
// as soon as they appear; a savepoint taken while input flows, whose job
// committed its files and went on, still restores: the job started from
// it publishes the records after the savepoint, and with the files the
// consumer took up to the savepoint, every record is there once. A
// savepoint without the record that its job committed it fails the start
// as before, naming the lost file.
func TestRestoringASavepointOfTheFileSinkNeverReportsLossOfFilesItsJobPublished(t *testing.T) {
	var out string
	consumed := t.TempDir()
	fileJob := func(j *rangeJob, opts ...Option) *Environment {
		sink, err := file.NewLineSink(out, file.WithMaxFileBytes(2048), file.WithoutSync())
		if err != nil {
			t.Fatal(err)
		}
		j.src = &rangeSrc{splits: j.splits, perSplit: j.perSplit, delay: j.delay, readerFailAt: -1}
		env := NewEnvironment(append([]Option{
			WithParallelism(j.par), WithFlushTimeout(time.Millisecond), WithRestartStrategy(restart.None()),
			WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second), WithCheckpointInterval(5 * time.Millisecond),
			WithCheckpointDir(t.TempDir()),
		}, opts...)...)
		lines := Map(FromSource(env, j.src, "range").UID("src"), func(v int64) (string, error) { return strconv.FormatInt(v, 10), nil }).UID("map")
		SinkTo(lines, connector.Sink[string](sink)).UID("sink")
		return env
	}
	// What this test holds needs a file in the savepoint, as the test
	// above needs a transaction: a savepoint taken once every source
	// already waited at the middle of its split holds none, and such a
	// run is done again.
	var j *rangeJob
	sp := savepointHolding(t, "a file", func() (status.Savepoint, bool) {
		out = t.TempDir()
		j = &rangeJob{par: 2, splits: 2, perSplit: 2000, delay: time.Millisecond}
		sp, last := runWithSavepointMidFlow(t, j, fileJob(j, WithSavepointDir(t.TempDir())))
		if last <= sp.Checkpoint {
			t.Fatalf("the job completed no checkpoint after its savepoint %d; the test proves nothing", sp.Checkpoint)
		}
		published, err := file.CommittedFiles(out)
		if err != nil {
			t.Fatal(err)
		}
		return sp, slices.ContainsFunc(published, func(f string) bool {
			return strings.Split(filepath.Base(f), "-")[2] == strconv.FormatInt(sp.Checkpoint, 10)
		})
	})

	// The consumer takes every published file; it keeps the lines of the
	// files published up to the savepoint (part-<subtask>-<checkpoint>-...).
	published, err := file.CommittedFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	var upToSavepoint []string
	for _, f := range published {
		dst := filepath.Join(consumed, filepath.Base(f))
		if err := os.Rename(f, dst); err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(filepath.Base(f), "-")
		id, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			t.Fatalf("published file %s: no checkpoint id in its name: %v", f, err)
		}
		if id <= sp.Checkpoint {
			upToSavepoint = append(upToSavepoint, linesIn(t, dst)...)
		}
	}
	if len(upToSavepoint) == 0 || len(upToSavepoint) >= j.records() {
		t.Fatalf("%d lines published up to the savepoint, of %d: the savepoint was not taken while input flowed", len(upToSavepoint), j.records())
	}

	restore := func() error {
		r := &rangeJob{par: 3, splits: 2, perSplit: 2000}
		return fileJob(r, WithRestoreFrom(sp.Path)).Execute(testCtx(t), "restored")
	}
	if err := restore(); err != nil {
		t.Fatalf("a job started from the savepoint after its job published the files and a consumer moved them: %v; want no loss reported", err)
	}
	restoredFiles, err := file.CommittedFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range upToSavepoint {
		seen[l]++
	}
	for _, f := range restoredFiles {
		for _, l := range linesIn(t, f) {
			seen[l]++
		}
	}
	for v := range int64(j.records()) {
		if n := seen[strconv.FormatInt(v, 10)]; n != 1 {
			t.Errorf("record %d published %d times up to the savepoint and by the job started from it, want once", v, n)
		}
	}
	if len(seen) != j.records() {
		t.Errorf("%d distinct lines published, want %d", len(seen), j.records())
	}

	// Without the record that its job committed it, the savepoint's files
	// that are gone are lost data, as before.
	st, err := checkpoint.OpenStorage(sp.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.(checkpoint.RecordStorage).DeleteRecord("committed"); err != nil {
		t.Fatal(err)
	}
	if err := restore(); !errors.Is(err, file.ErrCommittedFileLost) {
		t.Fatalf("a job started from a savepoint whose published files are gone and not recorded as committed: %v; want file.ErrCommittedFileLost", err)
	}
}

// linesIn is the lines of a published file.
func linesIn(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// Rule (a savepoint goes ahead of periodic checkpoints): a savepoint
// asked for while a checkpoint is pending is taken by the next checkpoint
// triggered, also when every checkpoint takes longer than the interval,
// as Flink's checkpoint coordinator queues a savepoint ahead of its
// periodic triggers. Asked for after the periodic trigger of each tick, it
// waited for a moment with no checkpoint pending, which checkpoints
// slower than their interval never leave: here every state write takes
// 20ms against an interval of 1ms, and the input is held until the
// savepoint has answered, so the job runs on as long as it waits.
func TestASavepointGoesAheadOfPeriodicCheckpointsSlowerThanTheirInterval(t *testing.T) {
	ds, err := checkpoint.NewDirStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	release := make(chan struct{})
	src := &rangeSrc{splits: 1, perSplit: 100, readerFailAt: -1, hold: func(v int64) bool { return v >= 10 }, release: release}
	env := NewEnvironment(WithParallelism(1), WithFlushTimeout(time.Millisecond), WithRestartStrategy(restart.None()),
		WithLogger(discardLogger()), WithCheckpointInterval(time.Millisecond),
		WithCheckpointStorage(&slowStateStorage{DirStorage: ds, delay: 20 * time.Millisecond}))
	var total int64
	SinkTo(FromSource(env, src, "range").UID("src"), connector.Sink[int64](countingSink[int64]{total: &total})).UID("sink")
	first := make(chan struct{})
	var once sync.Once
	var completed atomic.Int64
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		completed.Store(id)
		once.Do(func() { close(first) })
	}}
	var (
		sp    status.Savepoint
		spErr error
		asked int64
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		defer close(release)
		<-first
		asked = completed.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sp, spErr = env.TriggerSavepoint(ctx, target)
	})
	if err := env.Execute(testCtx(t), "job"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if spErr != nil {
		t.Fatalf("a savepoint asked for after checkpoint %d, every checkpoint slower than its interval, job running: %v (checkpoint %d completed meanwhile); want it taken by the next checkpoint triggered", asked, spErr, completed.Load())
	}
	if _, err := checkpoint.OpenRestorePoint(sp.Path); err != nil {
		t.Fatalf("savepoint %s of checkpoint %d: %v", sp.Path, sp.Checkpoint, err)
	}
}

// slowStateStorage is a directory storage whose every state write takes
// delay, as a loaded disk's fsyncs can make a checkpoint slower than its
// interval.
type slowStateStorage struct {
	*checkpoint.DirStorage
	delay time.Duration
}

func (s *slowStateStorage) Begin(id int64) (checkpoint.Writer, error) {
	w, err := s.DirStorage.Begin(id)
	if err != nil {
		return nil, err
	}
	return slowStateWriter{Writer: w, delay: s.delay}, nil
}

type slowStateWriter struct {
	checkpoint.Writer
	delay time.Duration
}

func (w slowStateWriter) WriteState(owner checkpoint.Owner, data []byte, files ...checkpoint.FileHandle) (checkpoint.StateHandle, error) {
	time.Sleep(w.delay)
	return w.Writer.WriteState(owner, data, files...)
}
