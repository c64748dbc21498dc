package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/status"
)

func identity(v int64) (int64, error) { return v, nil }

// countsError is checkCounts as an error: nil when every running count of
// keys keys over n records was emitted exactly once.
func countsError(store *txnStore, n, keys int) error {
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]int{}
	for _, rs := range store.committed {
		for _, r := range rs {
			seen[r]++
		}
	}
	var wrong []string
	for k := range int64(keys) {
		total := (int64(n) - k + int64(keys) - 1) / int64(keys)
		for c := int64(1); c <= total+1; c++ {
			want := 1
			if c == total+1 {
				want = 0
			}
			if got := seen[k*100000+c]; got != want {
				wrong = append(wrong, fmt.Sprintf("key %d count %d emitted %d times", k, c, got))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%d running counts wrong, e.g. %s", len(wrong), strings.Join(wrong[:min(3, len(wrong))], "; "))
	}
	return nil
}

// A changed max parallelism must be refused on restore: keyed state is
// placed by key group (hash mod max parallelism), so a checkpoint written
// at max parallelism 16 restored at 32 puts keys' state where the router
// no longer sends them. The refusal names the operator and both values;
// the same max parallelism restores.
func TestRestoreRefusesChangedMaxParallelism(t *testing.T) {
	dir := t.TempDir()
	store := newTxnStore()
	killedCountingJob(t, dir, store)

	created := false
	env := countingJob(2, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, identity,
		&txnSink2PC{store: store, writerOf: func(int) { created = true }},
		WithMaxParallelism(32), WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir))
	err := env.Execute(testCtx(t), "first")
	if err == nil {
		t.Fatalf("a checkpoint written at max parallelism 16 was restored at 32 (%v)", countsError(store, 400, 7))
	}
	if !errors.Is(err, ErrIncompatibleCheckpoint) {
		t.Errorf("error %v does not wrap ErrIncompatibleCheckpoint", err)
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{`"counts"`, "max parallelism 16 in the checkpoint", "32 in this job", "WithMaxParallelism(16)", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if created {
		t.Error("tasks ran although the restore was refused")
	}

	env = countingJob(2, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, identity, &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, store, 400, 7)
}

// A checkpoint written before max parallelism was recorded (fingerprint
// version 2) is restored at the job's max parallelism with a warning,
// unless its keyed state holds a key group the job does not have, which
// proves another max parallelism.
func TestRestoreOfCheckpointWithoutMaxParallelism(t *testing.T) {
	env := NewEnvironment(WithMaxParallelism(16))
	ds := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range").UID("src")
	counts := KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} }).UID("counts")
	SinkTo(counts, newCollectSink[int64]()).UID("sink")
	g, err := buildJobGraph(env)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	for id, kg := range map[int64]int{1: 15, 2: 40} {
		w, err := store.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("counts", 0), keyed.EncodeEntries([]keyed.Entry{{Name: "count", Kind: stateformat.KindValue, Format: stateformat.FormatColumns, KeyGroup: kg, Data: []byte("x")}}))
		if err != nil {
			t.Fatal(err)
		}
		fp := `splitflow-graph/2 {"counts":"KeyedProcess[key=int64]"}`
		if err := w.Commit(checkpoint.Metadata{ID: id, Fingerprint: fp, States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
	}
	chk, err := store.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := g.checkRestore(chk, "dir", false)
	if err != nil {
		t.Fatalf("key groups below 16, no recorded max parallelism: %v", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"counts"`) || !strings.Contains(warnings[0], "max parallelism 16") {
		t.Fatalf("warnings %q; want one naming counts and the max parallelism assumed", warnings)
	}
	chk, err = store.Load(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.checkRestore(chk, "dir", false); !errors.Is(err, ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), "key group 40") {
		t.Fatalf("key group 40 at max parallelism 16: err = %v", err)
	}
}

// A restore must not silently drop state: state in the checkpoint that no
// operator of the job claims (here the keyed operator's UID changed)
// refuses the restore, naming the UIDs, unless WithAllowNonRestoredState
// is given.
func TestRestoreRefusesUnclaimedState(t *testing.T) {
	dir := t.TempDir()
	store := newTxnStore()
	killedCountingJob(t, dir, store)

	job := func(opts ...Option) *Environment {
		env := NewEnvironment(append([]Option{WithParallelism(2), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
			WithCheckpointInterval(3 * time.Millisecond), WithCheckpointDir(dir)}, opts...)...)
		ds := Map(FromSource(env, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, "range").UID("src"), identity).UID("map")
		counts := KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v % 7 }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} }).UID("counts-v2")
		SinkTo(counts, twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
		return env
	}
	err := job().Execute(testCtx(t), "first")
	if err == nil {
		t.Fatal("a restore that drops the keyed state of uid \"counts\" went ahead")
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, ErrIncompatibleCheckpoint) {
		t.Errorf("error %v does not wrap ErrIncompatibleCheckpoint", err)
	}
	for _, want := range []string{`"counts"`, "no operator of this job", "WithAllowNonRestoredState", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var logs statustest.LockedBuffer
	if err := job(WithAllowNonRestoredState(), WithLogger(slogText(&logs))).Execute(testCtx(t), "first"); err != nil {
		t.Fatalf("with WithAllowNonRestoredState: %v", err)
	}
	if !strings.Contains(logs.String(), "not restored") || !strings.Contains(logs.String(), "counts") {
		t.Errorf("the dropped state was not logged:\n%s", logs.String())
	}
}

// defaultUIDJob is countingJob without explicit UIDs; with extra, an
// operator is inserted upstream of the keyed one.
func defaultUIDJob(extra bool, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(2), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()), WithDrainTimeout(5 * time.Second)}, opts...)...)
	ds := Map(FromSource(env, src, "range"), mapFn)
	if extra {
		ds = Filter(ds, func(int64) (bool, error) { return true, nil }).Name("inserted")
		ds = Map(ds, identity)
	}
	counts := KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v % 7 }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} })
	SinkTo(counts, twoPhase(sink))
	return env
}

// The default UID of an operator derives from its name and its position
// among operators of the same name, so inserting an operator elsewhere
// (here a Filter and a second Map upstream) keeps every stateful
// operator's UID, and a job that dies resumes with the inserted operators
// and every running count emitted exactly once. Each stateful operator
// without an explicit UID is named in a warning at start.
func TestDefaultUIDStableUnderInsertion(t *testing.T) {
	uids := func(extra bool) map[string]string {
		g, err := buildJobGraph(defaultUIDJob(extra, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, n := range g.nodes {
			if n.state != "" {
				out[n.kind] = n.uid
			}
		}
		return out
	}
	before, after := uids(false), uids(true)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("default UIDs of the stateful operators changed with an operator inserted: %v, then %v", before, after)
	}

	dir := t.TempDir()
	store := newTxnStore()
	died := make(chan struct{})
	var once sync.Once
	kill := func(v int64) (int64, error) {
		select {
		case <-died:
			return 0, errors.New("process killed")
		default:
			return v, nil
		}
	}
	env := defaultUIDJob(false, &rangeSrc{splits: 4, perSplit: 100, delay: time.Millisecond, readerFailAt: -1,
		hold: func(v int64) bool { return v%100 >= 50 }, release: died}, kill, &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(restart.None()))
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		if id >= 1 {
			once.Do(func() { close(died) })
		}
	}}
	if err := env.Execute(testCtx(t), "first"); err == nil {
		t.Fatal("the job finished before it could be killed")
	}
	var logs statustest.LockedBuffer
	env = defaultUIDJob(true, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, identity, &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithLogger(slogText(&logs)))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatal(err)
	}
	if err := countsError(store, 400, 7); err != nil {
		t.Fatalf("after inserting operators upstream: %v", err)
	}
	for _, uid := range after {
		if !strings.Contains(logs.String(), "no explicit UID") || !strings.Contains(logs.String(), uid) {
			t.Errorf("no warning at start for stateful operator %s without an explicit UID:\n%s", uid, logs.String())
		}
	}
}

// A checkpoint written by an earlier splitflow, whose default UIDs were
// the operator's position in the job ("3-KeyedProcess"), is refused with
// the UIDs it holds and how to keep them, not restored without its state.
func TestRestoreNamesDefaultUIDsOfEarlierVersions(t *testing.T) {
	g, err := buildJobGraph(defaultUIDJob(false, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()}))
	if err != nil {
		t.Fatal(err)
	}
	fp := `splitflow-graph/2 {"0-Source":"Source[split=*runtime.rSplit enum=[]*runtime.rSplit]","3-KeyedProcess":"KeyedProcess[key=int64]"}`
	chk := &checkpoint.Checkpoint{Metadata: checkpoint.Metadata{ID: 7, Fingerprint: fp, States: []checkpoint.StateHandle{
		{Owner: checkpoint.CoordinatorOwner("0-Source")}, {Owner: checkpoint.OperatorOwner("3-KeyedProcess", 0)}}}}
	_, err = g.checkRestore(chk, "dir", false)
	if !errors.Is(err, ErrIncompatibleCheckpoint) {
		t.Fatalf("err = %v, want ErrIncompatibleCheckpoint", err)
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{`"0-Source"`, `"3-KeyedProcess"`, "default UIDs of an earlier splitflow", `.UID("3-KeyedProcess")`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Two processes must not run the same job from one checkpoint directory:
// the directory is locked while a job runs, so a second job on it fails at
// start, naming the directory and the holder's pid, and runs nothing; once
// the first job has ended, the directory is free again (for that job: a
// root is its first job's, see TestSecondJobOnOneDirectoryRefusedByOwnerRecord).
func TestSecondJobOnOneCheckpointDirFailsAtStart(t *testing.T) {
	dir := t.TempDir()
	running := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	block := func(v int64) (int64, error) {
		once.Do(func() { close(running) })
		<-release
		return v, nil
	}
	store := newTxnStore()
	first := make(chan error, 1)
	go func() {
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, block, &txnSink2PC{store: store},
			WithCheckpointInterval(time.Hour), WithCheckpointDir(dir))
		first <- env.Execute(testCtx(t), "first")
	}()
	<-running

	created := false
	env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
		&txnSink2PC{store: newTxnStore(), writerOf: func(int) { created = true }},
		WithCheckpointInterval(time.Hour), WithCheckpointDir(dir))
	err := env.Execute(testCtx(t), "second")
	close(release)
	if err == nil {
		t.Fatal("a second job ran from the checkpoint directory of a running one")
	}
	t.Logf("refused: %v", err)
	var le *checkpoint.LockedError
	if !errors.As(err, &le) {
		t.Errorf("error %v is not a *checkpoint.LockedError", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("process %d", os.Getpid()), "in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if created {
		t.Error("the second job created a sink writer")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	env = countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(time.Hour), WithCheckpointDir(dir))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatalf("the first job restarting after it ended: %v", err)
	}
}

// One running job per checkpoint directory holds also when the jobs share
// one *checkpoint.DirStorage (WithCheckpointStorage): the second Execute on
// it while the first runs fails at start with a *checkpoint.LockedError
// naming the directory and the running job, and runs nothing; the first
// keeps the lock until it ends, and the storage is free again then (for
// that job, the root's owner).
func TestSharedDirStorageRunsOneJobAtATime(t *testing.T) {
	dir := t.TempDir()
	d, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	block := func(v int64) (int64, error) {
		once.Do(func() { close(running) })
		<-release
		return v, nil
	}
	first := make(chan error, 1)
	go func() {
		env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, block, &txnSink2PC{store: newTxnStore()},
			WithCheckpointInterval(time.Hour), WithCheckpointStorage(d))
		first <- env.Execute(testCtx(t), "first")
	}()
	<-running

	created := false
	env := countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity,
		&txnSink2PC{store: newTxnStore(), writerOf: func(int) { created = true }},
		WithCheckpointInterval(time.Hour), WithCheckpointStorage(d))
	err = env.Execute(testCtx(t), "second")
	stillLocked := d.Locked()
	close(release)
	if err == nil {
		t.Fatal("a second job ran on the checkpoint storage of a running one")
	}
	t.Logf("refused: %v", err)
	var le *checkpoint.LockedError
	if !errors.As(err, &le) {
		t.Errorf("error %v is not a *checkpoint.LockedError", err)
	}
	for _, want := range []string{dir, `job "first"`, "in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if created {
		t.Error("the second job created a sink writer")
	}
	if !stillLocked {
		t.Error("the refused job released the running job's lock")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if d.Locked() {
		t.Error("the storage is still locked after its job ended")
	}
	env = countingJob(1, &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}, identity, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(time.Hour), WithCheckpointStorage(d))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatalf("the first job restarting after it ended: %v", err)
	}
}

// gatedStorage holds the state writes of checkpoint 1's subtasks until
// gate closes, and says on entered which ones started.
type gatedStorage struct {
	*checkpoint.MemoryStorage
	entered chan checkpoint.Owner
	gate    chan struct{}
}

func (s *gatedStorage) Begin(id int64) (checkpoint.Writer, error) {
	w, err := s.MemoryStorage.Begin(id)
	if err != nil {
		return nil, err
	}
	return &gatedWriter{Writer: w, s: s}, nil
}

type gatedWriter struct {
	checkpoint.Writer
	s *gatedStorage
}

func (w *gatedWriter) WriteState(o checkpoint.Owner, data []byte, files ...checkpoint.FileHandle) (checkpoint.StateHandle, error) {
	if w.ID() == 1 && !o.IsCoordinator() {
		w.s.entered <- o
		<-w.s.gate
	}
	return w.Writer.WriteState(o, data, files...)
}

// State I/O must not run on the master goroutine: while one subtask's
// state file is being written (held here), the master hands the next
// subtask's acknowledgement to another writer instead of waiting, so two
// files are written at once; the checkpoint completes once both are
// durable, and the output is exact.
func TestStateWritesRunOffTheMasterGoroutine(t *testing.T) {
	mem, err := checkpoint.NewMemoryStorage(checkpoint.WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	st := &gatedStorage{MemoryStorage: mem, entered: make(chan checkpoint.Owner, 16), gate: make(chan struct{})}
	completed := make(chan int64, 100)
	j := &rangeJob{par: 2, splits: 4, perSplit: 50, delay: 200 * time.Microsecond}
	j.opts = []Option{WithCheckpointInterval(2 * time.Millisecond), WithCheckpointStorage(st)}
	env := j.env()
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) { completed <- id }}
	done := make(chan error, 1)
	go func() { done <- env.Execute(testCtx(t), "gated") }()

	first := <-st.entered
	select {
	case second := <-st.entered:
		if second.Subtask == first.Subtask {
			t.Errorf("the two writes under way are both of subtask %d", first.Subtask)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("while %s's state was being written, no other subtask's was started in 10s: state files are written one after another on the master goroutine", first)
	}
	select {
	case id := <-completed:
		t.Errorf("checkpoint %d completed while checkpoint 1's state files were not all written", id)
	default:
	}
	close(st.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := j.sink.store.verify(200); err != nil {
		t.Fatal(err)
	}
}

// Say where a run resumed: a job on a directory without checkpoints logs
// "no checkpoint: fresh start"; the same job started again after it died
// logs "restored from checkpoint N at DIR/chk-N, taken at T" with the
// sources' positions, shows it in Status (and so /api/v1/job), and tells
// the job listener, before any task starts.
func TestRestoreIsReported(t *testing.T) {
	dir := t.TempDir()
	store := newTxnStore()
	var events []status.Restore
	listener := WithJobListener(JobListener{Restored: func(r status.Restore) { events = append(events, r) }})

	died := make(chan struct{})
	var once sync.Once
	kill := func(v int64) (int64, error) {
		select {
		case <-died:
			return 0, errors.New("process killed")
		default:
			return v, nil
		}
	}
	var logs statustest.LockedBuffer
	var last int64
	env := countingJob(2, &rangeSrc{splits: 4, perSplit: 100, delay: time.Millisecond, readerFailAt: -1,
		hold: func(v int64) bool { return v%100 >= 50 }, release: died}, kill, &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(restart.None()), WithLogger(slogText(&logs)), listener)
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		last = id
		once.Do(func() { close(died) })
	}}
	if err := env.Execute(testCtx(t), "first"); err == nil {
		t.Fatal("the job finished before it could be killed")
	}
	if len(events) != 1 || events[0].Checkpoint != 0 || events[0].Message != "no checkpoint: fresh start" {
		t.Fatalf("first start: listener got %+v, want one fresh start", events)
	}
	if !strings.Contains(logs.String(), "no checkpoint: fresh start") {
		t.Errorf("first start not logged as a fresh start:\n%s", logs.String())
	}
	if st := env.Status().Restore; st == nil || st.Checkpoint != 0 || st.Message != "no checkpoint: fresh start" {
		t.Errorf("first start: Status().Restore = %+v", st)
	}

	events = nil
	logs = statustest.LockedBuffer{}
	// The two writers are created on their tasks' goroutines, at once.
	var startedBefore atomic.Bool
	env = countingJob(2, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, identity,
		&txnSink2PC{store: store, writerOf: func(int) {
			if len(events) == 0 {
				startedBefore.Store(true)
			}
		}},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithLogger(slogText(&logs)), listener)
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, store, 400, 7)
	if startedBefore.Load() {
		t.Error("a sink writer was created before the listener heard where the job resumed")
	}
	path := filepath.Join(dir, fmt.Sprintf("chk-%d", last))
	if len(events) != 1 {
		t.Fatalf("second start: listener got %d events, want 1: %+v", len(events), events)
	}
	r := events[0]
	want := fmt.Sprintf("restored from checkpoint %d at %s, taken at %s", last, path, r.TakenAt.Format("2006-01-02T15:04:05.000Z07:00"))
	if r.Checkpoint != last || r.Path != path || r.TakenAt.IsZero() || r.Message != want {
		t.Fatalf("second start: listener got %+v; want checkpoint %d at %s", r, last, path)
	}
	if len(r.Sources) != 1 || r.Sources[0].UID != "src" || len(r.Sources[0].Splits) == 0 || r.Sources[0].Error != "" {
		t.Fatalf("source positions %+v; want the splits of source src", r.Sources)
	}
	for _, sp := range r.Sources[0].Splits {
		if !strings.HasPrefix(sp, "split-") {
			t.Errorf("split %q is not a range split", sp)
		}
	}
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "sources=") || !strings.Contains(logs.String(), r.Sources[0].Splits[0]) {
		t.Errorf("restore not logged as %q with the sources' positions:\n%s", want, logs.String())
	}
	js, err := json.Marshal(env.Status())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), fmt.Sprintf(`"restore":{"checkpoint":%d,"path":%q`, last, path)) {
		t.Errorf("status JSON lacks the restore: %s", js)
	}
}
