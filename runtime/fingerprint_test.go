package runtime

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
	"github.com/splitflow/splitflow/runtime/restart"
)

// killedCountingJob runs countingJob at parallelism 2 on dir until a
// checkpoint completed, then kills it (no restart).
func killedCountingJob(t *testing.T, dir string, store *txnStore) {
	t.Helper()
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
	src := &rangeSrc{splits: 4, perSplit: 100, delay: time.Millisecond, readerFailAt: -1,
		hold: func(v int64) bool { return v%100 >= 50 }, release: died}
	env := countingJob(2, src, kill, &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), WithRestartStrategy(restart.None()))
	env.hooks = &testHooks{checkpointCompleted: func(id int64, _ checkpoint.Storage) {
		if id >= 1 {
			once.Do(func() { close(died) })
		}
	}}
	if err := env.Execute(testCtx(t), "first"); err == nil {
		t.Fatal("the job finished before it could be killed")
	}
}

// A checkpoint whose stateful UID now belongs to another kind of operator
// is refused, naming the checkpoint, the directory, both fingerprints and
// what to do; the same job at another parallelism and with an operator
// added restores it.
func TestRestoreRefusesCheckpointOfAnotherJobGraph(t *testing.T) {
	dir := t.TempDir()
	store := newTxnStore()
	killedCountingJob(t, dir, store)

	// "counts" is now a Map: its keyed state cannot be restored into it.
	env := NewEnvironment(WithParallelism(2), WithMaxParallelism(16), WithLogger(discardLogger()),
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir))
	ds := Map(FromSource(env, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, "range").UID("src"),
		func(v int64) (int64, error) { return v, nil }).UID("map")
	other := Map(ds, func(v int64) (int64, error) { return v, nil }).UID("counts")
	created := false
	SinkTo(other, twoPhase(&txnSink2PC{store: newTxnStore(), writerOf: func(int) { created = true }})).UID("sink")
	err := env.Execute(testCtx(t), "first")
	if err == nil {
		t.Fatal("a checkpoint of another job graph was restored")
	}
	if !errors.Is(err, ErrIncompatibleCheckpoint) {
		t.Errorf("error %v does not wrap ErrIncompatibleCheckpoint", err)
	}
	msg := err.Error()
	t.Logf("refused: %v", err)
	for _, want := range []string{"checkpoint chk-", "in " + dir, "was written by a different job graph",
		`uid "counts"`, "KeyedProcess[key=int64]", "Map (stateless)",
		"start with an empty checkpoint directory or restore the job that wrote it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if created {
		t.Error("tasks ran although the restore was refused")
	}

	// Another key type for the same UID is refused too.
	env = NewEnvironment(WithParallelism(2), WithMaxParallelism(16), WithLogger(discardLogger()),
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir))
	ds = Map(FromSource(env, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, "range").UID("src"),
		func(v int64) (int64, error) { return v, nil }).UID("map")
	strKeyed := KeyedProcess(KeyBy(ds, func(v int64) string { return "k" }), func(*KeyedContext[string, int64], int64) error { return nil }).UID("counts")
	SinkTo(strKeyed, twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
	if err := env.Execute(testCtx(t), "first"); err == nil || !strings.Contains(err.Error(), "KeyedProcess[key=string]") {
		t.Fatalf("restore into another key type: err = %v", err)
	}

	// Parallelism 3 and an operator added: restored, every count once.
	env = NewEnvironment(WithParallelism(3), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir))
	ds = Map(FromSource(env, &rangeSrc{splits: 4, perSplit: 100, readerFailAt: -1}, "range").UID("src"),
		func(v int64) (int64, error) { return v, nil }).UID("map")
	ds = Filter(ds, func(int64) (bool, error) { return true, nil }).UID("added")
	counts := KeyedProcessPerSubtask(KeyBy(ds, func(v int64) int64 { return v % 7 }), func() KeyedProcessFunction[int64, int64, int64] { return &counting{} }).UID("counts")
	SinkTo(counts, twoPhase(&txnSink2PC{store: store})).UID("sink")
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, store, 400, 7)
}

// A fingerprint written before fingerprints were compared (the bare list
// of UIDs) is not compared; one that names a UID without state in the
// checkpoint does not matter either.
func TestFingerprintComparesOnlyStatefulUIDs(t *testing.T) {
	env := NewEnvironment()
	ds := FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range").UID("src")
	SinkTo(ds, twoPhase(&txnSink2PC{store: newTxnStore()})).UID("sink")
	g, err := buildJobGraph(env)
	if err != nil {
		t.Fatal(err)
	}
	owner := checkpoint.OperatorOwner("src", 0)
	for _, fp := range []string{
		"src,sink",
		fingerprintPrefixV2 + `{"src":"Source[split=*runtime.rSplit enum=[]*runtime.rSplit]","gone":"KeyedProcess[key=int64]"}`,
		fingerprintPrefixV2 + `{"sink":"KeyedProcess[key=int64]"}`, // no state for sink in the checkpoint
		fingerprintPrefix + `{"src":{"state":"Source[split=*runtime.rSplit enum=[]*runtime.rSplit]"},"gone":{"state":"KeyedProcess[key=int64]","maxParallelism":4}}`,
	} {
		chk := &checkpoint.Checkpoint{Metadata: checkpoint.Metadata{ID: 7, Fingerprint: fp, States: []checkpoint.StateHandle{{Owner: owner}}}}
		if _, err := g.checkRestore(chk, "dir", false); err != nil {
			t.Errorf("fingerprint %q: %v", fp, err)
		}
	}
	chk := &checkpoint.Checkpoint{Metadata: checkpoint.Metadata{ID: 7, Fingerprint: fingerprintPrefixV2 + `{"src":"Source[split=int enum=int]"}`, States: []checkpoint.StateHandle{{Owner: owner}}}}
	if _, err := g.checkRestore(chk, "dir", false); err == nil || !strings.Contains(err.Error(), "checkpoint chk-7 in dir was written by a different job graph") {
		t.Fatalf("changed split type: err = %v", err)
	}
}

// Keyed state written by the first layout (version 1, before timers were
// checkpointed) still restores.
func TestKeyedStateVersion1Restores(t *testing.T) {
	// version, one entry: name "count", kind value, key group 3, data "x"
	v1 := []byte{1, 1, 5, 'c', 'o', 'u', 'n', 't', stateformat.KindValue, 3, 1, 'x'}
	es, err := keyed.DecodeEntries(v1)
	if err != nil || len(es) != 1 || es[0].Name != "count" || es[0].KeyGroup != 3 || es[0].Format != stateformat.FormatGob || string(es[0].Data) != "x" {
		t.Fatalf("version 1 decoded as %v, %v", es, err)
	}
	if _, err := keyed.DecodeEntries(append([]byte{stateformat.KeyedVersion + 1}, v1[1:]...)); err == nil {
		t.Fatal("an unknown layout version was accepted")
	}
}
