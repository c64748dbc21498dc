package runtime

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/state"
)

// putCounting counts the shared files put into a storage, and fails puts
// while failPuts is above 0.
type putCounting struct {
	checkpoint.Storage
	mu       sync.Mutex
	puts     map[string]int
	failPuts atomic.Int64
}

func newPutCounting(s checkpoint.Storage) *putCounting {
	return &putCounting{Storage: s, puts: map[string]int{}}
}

func (s *putCounting) PutFile(name, path string) (checkpoint.FileHandle, error) {
	if s.failPuts.Add(-1) >= 0 {
		return checkpoint.FileHandle{}, fmt.Errorf("put %s: no space left on device (injected)", name)
	}
	s.mu.Lock()
	s.puts[name]++
	s.mu.Unlock()
	return s.Storage.PutFile(name, path)
}

func (s *putCounting) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.puts {
		n += c
	}
	return n
}

func pebbleStateConfig(t testing.TB) stateConfig {
	sc := defaultStateConfig()
	sc.backend, sc.dir, sc.dirSet, sc.bufferEntries = kindPebble, t.TempDir(), true, 16
	return sc
}

// snapshotNow takes an asynchronous snapshot of p as a task does: the
// freeze, the encoder, the thaw.
func snapshotNow[K comparable](t *testing.T, p *keyedProcessOperator[K, K, string], id int64) ([]byte, []checkpoint.FileHandle) {
	t.Helper()
	enc, err := p.FreezeState(id)
	if err != nil {
		t.Fatal(err)
	}
	blob, files, err := enc(func() bool { return false })
	p.ThawState()
	if err != nil {
		t.Fatal(err)
	}
	return blob, files
}

// Incremental checkpoints (invariant 11): a file the storage has is never
// written again. A snapshot with nothing changed since the previous one
// stores nothing; after a few writes it stores only the files those made,
// and no file name is ever put twice.
func TestPebbleSnapshotStoresEachFileOnce(t *testing.T) {
	var count state.ValueState[int64]
	p, stop, err := openKeyedOn(t, pebbleStateConfig(t), nil, 1, 0, benchCount(&count))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	store := newPutCounting(mem)
	p.state.Pebble.Storage = store
	for i := range 5000 {
		p.state.SetKey(fmt.Sprint("word-", i))
		count.Update(int64(i))
	}
	_, files1 := snapshotNow(t, p, 1)
	first := store.total()
	if first == 0 || len(files1) == 0 {
		t.Fatalf("the first snapshot of 5000 keys stored %d files, uses %d", first, len(files1))
	}
	_, files2 := snapshotNow(t, p, 2)
	if n := store.total() - first; n != 0 {
		t.Fatalf("a snapshot with nothing changed stored %d files", n)
	}
	if !slices.Equal(files1, files2) {
		t.Fatalf("a snapshot with nothing changed uses other files: %v, then %v", files1, files2)
	}
	for i := range 10 {
		p.state.SetKey(fmt.Sprint("word-", i))
		count.Update(-1)
	}
	_, files3 := snapshotNow(t, p, 3)
	for name, n := range store.puts {
		if n != 1 {
			t.Fatalf("file %s stored %d times", name, n)
		}
	}
	old := map[string]bool{}
	for _, f := range files2 {
		old[f.Name] = true
	}
	added := 0
	for _, f := range files3 {
		if !old[f.Name] {
			added++
		}
	}
	if added != store.total()-first {
		t.Fatalf("snapshot 3 uses %d files snapshot 2 did not, and stored %d", added, store.total()-first)
	}
	if p.state.Err != nil {
		t.Fatal(p.state.Err)
	}
}

// A running count on the pebble backend restores from every retained
// checkpoint, not only the newest: retention and the collection of shared
// files keep every file a retained checkpoint uses. Each checkpoint's
// counts are a consistent prefix: at most the final ones, and never less
// than an older checkpoint's.
func TestPebbleRestoresFromEveryRetainedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	src := &rangeSrc{splits: 4, perSplit: 100, delay: 500 * time.Microsecond, readerFailAt: -1}
	sink := &txnSink2PC{store: newTxnStore()}
	env := countingJob(2, src, func(v int64) (int64, error) { return v, nil }, sink,
		WithCheckpointInterval(5*time.Millisecond), WithCheckpointDir(dir), WithCheckpointsRetained(4),
		optionFunc(func(c *config) { c.state = pebbleStateConfig(t) }))
	if err := env.Execute(testCtx(t), "retained"); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, sink.store, 400, 7)
	storage, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := storage.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 2 {
		t.Fatalf("retained checkpoints %v, want several", ids)
	}
	prev := map[int64]int64{}
	for _, id := range ids {
		chk, err := storage.Load(id)
		if err != nil {
			t.Fatalf("load checkpoint %d: %v", id, err)
		}
		counts := restoredCounts(t, chk)
		for k, n := range counts {
			if n > 400/7+1 || n < prev[k] {
				t.Fatalf("checkpoint %d: key %d count %d (previous checkpoint %d)", id, k, n, prev[k])
			}
		}
		prev = counts
	}
}

// restoredCounts opens operator "counts" of countingJob at parallelism 1
// from chk (every old subtask's state merged) and reads each key's count.
func restoredCounts(t *testing.T, chk *checkpoint.Checkpoint) map[int64]int64 {
	t.Helper()
	tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 16, state: pebbleStateConfig(t)}, mb: engine.NewMailbox(),
		restored: &engine.RestoredState{Chk: chk}}
	var count state.ValueState[int64]
	p := &keyedProcessOperator[int64, int64, string]{info: engine.OpInfo{Name: "counts", UID: "counts"}, keyFn: func(k int64) int64 { return k },
		hash: keygroup.HashInt64, par: 1, out: engine.Output[string](&recorder[string]{}),
		newFn: func() KeyedProcessFunction[int64, int64, string] {
			return KeyedProcessFuncs[int64, int64, string]{
				Setup: func(ctx *KeyedContext[int64, string]) (err error) {
					count, err = state.NewValueState[int64]("count").Handle(ctx)
					return err
				},
				Element: func(*KeyedContext[int64, string], int64) error { return nil },
			}
		}}
	err := openOp(p, tk)
	defer func() { _ = tk.shutdown(); _ = p.Close() }()
	if err != nil {
		t.Fatalf("restore from checkpoint %d: %v", chk.ID, err)
	}
	out := map[int64]int64{}
	for k := range int64(7) {
		p.state.SetKey(k)
		if n, ok := count.Value(); ok {
			out[k] = n
		}
	}
	if p.state.Err != nil {
		t.Fatal(p.state.Err)
	}
	return out
}

// A state directory that cannot be used fails the job at start, naming
// it, instead of failing every task after every restart.
func TestPebbleStateDirNotUsableFailsAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, "state")
	src := &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}
	env := countingJob(1, src, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(5*time.Millisecond), WithStateBackend(state.Pebble(bad)),
		WithRestartStrategy(restart.FixedDelay(1000, time.Millisecond)))
	err := env.Execute(testCtx(t), "bad state dir")
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Execute: %v; want an error naming %s", err, bad)
	}
	if n := env.Status().Restarts; n != 0 {
		t.Fatalf("the job restarted %d times", n)
	}
}

// A state directory without write permission fails the job at start,
// naming it. Root writes into it anyway, so as root the test runs itself
// again as user nobody, where the permission holds.
func TestPebbleStateDirNotWritableFailsAtStart(t *testing.T) {
	if os.Geteuid() == 0 && os.Getenv("SPLITFLOW_TEST_AS_NOBODY") == "" {
		runAsNobody(t)
		return
	}
	dir := filepath.Join(t.TempDir(), "read-only")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	if f, err := os.CreateTemp(dir, "probe-"); err == nil {
		_ = f.Close()
		t.Fatalf("%s has no write permission and is writable all the same (uid %d)", dir, os.Geteuid())
	}
	src := &rangeSrc{splits: 2, perSplit: 10, readerFailAt: -1}
	env := countingJob(1, src, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(5*time.Millisecond), WithStateBackend(state.Pebble(dir)),
		WithRestartStrategy(restart.FixedDelay(1000, time.Millisecond)))
	err := env.Execute(testCtx(t), "read-only state dir")
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("Execute: %v; want an error saying %s is not writable", err, dir)
	}
	if n := env.Status().Restarts; n != 0 {
		t.Fatalf("the job restarted %d times", n)
	}
}

// A storage that cannot take the state's files (a full disk) fails the
// checkpoints it cannot complete, logging why with the local file it could
// not store, and loses nothing: the job goes on and every count is emitted
// exactly once.
func TestPebbleStoreFailureDeclinesCheckpointLosesNothing(t *testing.T) {
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	store := newPutCounting(mem)
	store.failPuts.Store(5)
	src := &rangeSrc{splits: 4, perSplit: 60, delay: 300 * time.Microsecond, readerFailAt: -1}
	sink := &txnSink2PC{store: newTxnStore()}
	sc := pebbleStateConfig(t)
	var logs statustest.LockedBuffer
	env := countingJob(2, src, failOnce(150), sink,
		WithCheckpointInterval(3*time.Millisecond), WithCheckpointStorage(store), WithTolerableCheckpointFailures(100),
		WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)), WithLogger(slogText(&logs)),
		optionFunc(func(c *config) { c.state = sc }))
	if err := env.Execute(testCtx(t), "full disk"); err != nil {
		t.Fatal(err)
	}
	if store.failPuts.Load() >= 0 {
		t.Fatal("not every injected failure happened")
	}
	if env.Status().Checkpoints.Failed == 0 {
		t.Fatal("no checkpoint failed")
	}
	var named bool
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "checkpoint aborted") && strings.Contains(line, "no space left on device (injected)") {
			named = strings.Contains(line, "store "+sc.dir+string(filepath.Separator)) && strings.Contains(line, ".sst")
			if !named {
				t.Fatalf("the failed put is logged without the file it could not store (under %s): %s", sc.dir, line)
			}
		}
	}
	if !named {
		t.Fatalf("no checkpoint aborted by the failed puts was logged:\n%s", logs.String())
	}
	checkCounts(t, sink.store, 240, 7)
}

// A checkpoint whose shared file is gone is never passed over for an
// older one or a fresh start: the job fails naming the file.
func TestPebbleCheckpointMissingAFileIsNeverPassedOver(t *testing.T) {
	dir := t.TempDir()
	src := &rangeSrc{splits: 2, perSplit: 50, delay: 300 * time.Microsecond, readerFailAt: -1}
	env := countingJob(1, src, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: newTxnStore()},
		WithCheckpointInterval(5*time.Millisecond), WithCheckpointDir(dir),
		optionFunc(func(c *config) { c.state = pebbleStateConfig(t) }))
	if err := env.Execute(testCtx(t), "first"); err != nil {
		t.Fatal(err)
	}
	storage, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := storage.Files()
	if err != nil || len(files) == 0 {
		t.Fatalf("shared files: %v, %v", files, err)
	}
	chk, err := storage.Latest()
	if err != nil {
		t.Fatal(err)
	}
	used := chk.Files()
	if len(used) == 0 {
		t.Fatal("the newest checkpoint uses no shared file")
	}
	gone := used[0].Name
	matches, _ := filepath.Glob(filepath.Join(dir, "*", gone))
	if len(matches) != 1 {
		t.Fatalf("shared file %s found at %v", gone, matches)
	}
	if err := os.Remove(matches[0]); err != nil {
		t.Fatal(err)
	}
	store := newTxnStore()
	env2 := countingJob(1, &rangeSrc{splits: 2, perSplit: 50, readerFailAt: -1}, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: store},
		WithCheckpointInterval(5*time.Millisecond), WithCheckpointDir(dir),
		optionFunc(func(c *config) { c.state = pebbleStateConfig(t) }))
	err = env2.Execute(testCtx(t), "first")
	if err == nil || !strings.Contains(err.Error(), gone) {
		t.Fatalf("Execute: %v; want an error naming %s", err, gone)
	}
	var damaged *checkpoint.DamagedCheckpointError
	if !errors.As(err, &damaged) {
		t.Fatalf("Execute: %v (%T); want a *DamagedCheckpointError", err, err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.committed) != 0 {
		t.Fatalf("the job wrote output: %v", store.committed)
	}
}

// Backends switch one way: a heap checkpoint restores into pebble (each
// state is loaded into the DB as it is declared, timers with it), and a
// pebble checkpoint refused by the heap backend with an error that says
// so.
func TestHeapCheckpointRestoresIntoPebble(t *testing.T) {
	fn := func(count *state.ValueState[int64], seen *state.MapState[string, int64]) KeyedProcessFuncs[string, string, string] {
		return KeyedProcessFuncs[string, string, string]{
			Setup: func(ctx *KeyedContext[string, string]) (err error) {
				if *count, err = state.NewValueState[int64]("count").Handle(ctx); err != nil {
					return err
				}
				*seen, err = state.NewMapState[string, int64]("seen").Handle(ctx)
				return err
			},
			Element: func(*KeyedContext[string, string], string) error { return nil },
		}
	}
	var count state.ValueState[int64]
	var seen state.MapState[string, int64]
	heap, stopHeap := openKeyed(t, nil, 1, 0, fn(&count, &seen))
	for i := range 300 {
		k := fmt.Sprint("k", i)
		heap.state.SetKey(k)
		count.Update(int64(i))
		seen.Put("a", int64(i))
		seen.Put("b", int64(-i))
	}
	heap.timers.event.Add("k7", 42)
	blob, err := heap.SnapshotState(1)
	stopHeap()
	if err != nil {
		t.Fatal(err)
	}
	for _, par := range []int{1, 2} {
		got := map[string]int64{}
		timers := 0
		for sub := range par {
			p, stop, err := openKeyedOn(t, pebbleStateConfig(t), [][]byte{blob}, par, sub, fn(&count, &seen))
			if err != nil {
				t.Fatal(err)
			}
			timers += len(allTimers(&p.timers.event))
			lo, hi := keygroup.Range(sub, par, 128)
			for i := range 300 {
				k := fmt.Sprint("k", i)
				if g := keygroup.ForHash(keygroup.HashString(k), 128); g < lo || g > hi {
					continue
				}
				p.state.SetKey(k)
				n, ok := count.Value()
				if !ok {
					t.Fatalf("par %d: %s lost", par, k)
				}
				m := maps.Collect(seen.All())
				if !maps.Equal(m, map[string]int64{"a": int64(i), "b": int64(-i)}) || seen.Len() != 2 {
					t.Fatalf("par %d: %s map %v", par, k, m)
				}
				got[k] = n
			}
			if p.state.Err != nil {
				t.Fatal(p.state.Err)
			}
			blob, _ := snapshotWithMemory(t, p)
			stop()
			if _, _, err := openKeyedErr(t, [][]byte{blob}, 1, 0, fn(&count, &seen)); err == nil || !strings.Contains(err.Error(), "pebble state backend") {
				t.Fatalf("heap restore of a pebble checkpoint: %v", err)
			}
		}
		if len(got) != 300 || timers != 1 {
			t.Fatalf("par %d: restored %d keys and %d timers, want 300 and 1", par, len(got), timers)
		}
	}
}

// snapshotWithMemory snapshots a pebble operator into a memory storage.
func snapshotWithMemory[K comparable](t *testing.T, p *keyedProcessOperator[K, K, string]) ([]byte, []checkpoint.FileHandle) {
	t.Helper()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	p.state.Pebble.Storage = mem
	return snapshotNow(t, p, 1)
}

// Exactly-once over keyed state, randomized, on both backends: random
// parallelism, checkpoint intervals and failures; every running count is
// emitted exactly once.
func TestRandomizedKeyedFailoverExactlyOnce(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for seed := range 8 {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), 11))
				par := 1 + rng.IntN(3)
				splits, perSplit := 1+rng.IntN(5), 20+rng.IntN(60)
				n := splits * perSplit
				var fails []int64
				for range 1 + rng.IntN(3) {
					fails = append(fails, int64(rng.IntN(n)))
				}
				src := &rangeSrc{splits: splits, perSplit: perSplit, delay: time.Duration(rng.IntN(300)) * time.Microsecond, readerFailAt: -1}
				store := newTxnStore()
				env := countingJob(par, src, failOnce(fails...), &txnSink2PC{store: store},
					WithCheckpointInterval(time.Duration(2+rng.IntN(8))*time.Millisecond),
					WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), backend)
				if err := env.Execute(testCtx(t), "randomized keyed"); err != nil {
					t.Fatalf("par=%d splits=%d perSplit=%d fails=%v: %v", par, splits, perSplit, fails, err)
				}
				checkCounts(t, store, n, 7)
			})
		}
	})
}

// pointKey is a struct key with no binary encoding of its own: gob would
// encode it, with type ids that depend on what else the process encoded
// first.
type pointKey struct{ X, Y int }

// binKey is a struct key that encodes itself.
type binKey struct{ A, B uint16 }

func (k binKey) MarshalBinary() ([]byte, error) {
	return []byte{byte(k.A >> 8), byte(k.A), byte(k.B >> 8), byte(k.B)}, nil
}
func (k *binKey) UnmarshalBinary(b []byte) error {
	if len(b) != 4 {
		return fmt.Errorf("binKey: %d bytes", len(b))
	}
	k.A, k.B = uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3])
	return nil
}

// The pebble backend finds a key by its bytes, so a key's encoding must be
// the same in every process: keys and map keys of types gob would encode
// (whose bytes carry type ids that differ between processes, so a restored
// key is not found again) are refused at declaration, naming the type; a
// type that marshals itself is encoded with its own MarshalBinary, and a
// float key's -0 is +0, as for Go's map keys.
func TestPebbleKeysHaveTheSameBytesInEveryProcess(t *testing.T) {
	declare := func(valueKey bool) KeyedProcessFuncs[pointKey, pointKey, string] {
		return KeyedProcessFuncs[pointKey, pointKey, string]{
			Setup: func(ctx *KeyedContext[pointKey, string]) error {
				var err error
				if valueKey {
					_, err = state.NewValueState[int64]("v").Handle(ctx)
				} else {
					_, err = state.NewMapState[string, int64]("m").Handle(ctx)
				}
				return err
			},
			Element: func(*KeyedContext[pointKey, string], pointKey) error { return nil },
		}
	}
	for _, valueKey := range []bool{true, false} {
		tk := &task{name: "p", head: &engine.OpInfo{Name: "p"}, cfg: &config{maxParallelism: 16, state: pebbleStateConfig(t)}, mb: engine.NewMailbox()}
		fn := declare(valueKey)
		p := &keyedProcessOperator[pointKey, pointKey, string]{info: engine.OpInfo{Name: "p", UID: "op"}, keyFn: func(k pointKey) pointKey { return k },
			hash: func(k pointKey) uint32 { return uint32(k.X) }, par: 1, out: engine.Output[string](&recorder[string]{}),
			newFn: func() KeyedProcessFunction[pointKey, pointKey, string] { return fn }}
		err := openOp(p, tk)
		_ = tk.shutdown()
		_ = p.Close()
		var ue *unrecoverableError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "pointKey") {
			t.Fatalf("a gob-encoded key type was declared on pebble: %v", err)
		}
	}
	mapKeyed := KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) error {
			_, err := state.NewMapState[pointKey, int64]("m").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	}
	_, stop, err := openKeyedOn(t, pebbleStateConfig(t), nil, 1, 0, mapKeyed)
	stop()
	if err == nil || !strings.Contains(err.Error(), "pointKey") {
		t.Fatalf("a gob-encoded map key type was declared on pebble: %v", err)
	}

	var bins state.MapState[binKey, int64]
	var floats state.MapState[float64, int64]
	p, stop, err := openKeyedOn(t, pebbleStateConfig(t), nil, 1, 0, KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) (err error) {
			if bins, err = state.NewMapState[binKey, int64]("bins").Handle(ctx); err != nil {
				return err
			}
			floats, err = state.NewMapState[float64, int64]("floats").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p.state.SetKey("k")
	bins.Put(binKey{1, 2}, 12)
	floats.Put(0, 1)
	negZero := math.Copysign(0, -1)
	floats.Put(negZero, 2)
	if v, ok := bins.Get(binKey{1, 2}); !ok || v != 12 {
		t.Fatalf("binKey map entry: %d, %v", v, ok)
	}
	if got := maps.Collect(bins.All()); !maps.Equal(got, map[binKey]int64{{1, 2}: 12}) {
		t.Fatalf("binKey map: %v", got)
	}
	if n, v := floats.Len(), maps.Collect(floats.All()); n != 1 || v[0] != 2 {
		t.Fatalf("+0 and -0 keys: %d entries %v, want one entry 2", n, v)
	}
	if p.state.Err != nil {
		t.Fatal(p.state.Err)
	}
}

// A restore that cannot lay out its DB (here: a file in the way of the
// directory, as a full or broken local disk would fail it) fails the
// attempt, which the restart strategy retries, not the job; the output is
// exact.
func TestPebbleRestoreThatCannotLayItsFilesRestarts(t *testing.T) {
	sc := pebbleStateConfig(t)
	var blocked atomic.Bool
	block := func() {
		roots, _ := filepath.Glob(filepath.Join(sc.dir, "job-*"))
		for _, root := range roots {
			for sub := range 2 {
				for n := 1; n <= 8; n++ {
					p := filepath.Join(root, fmt.Sprintf("counts-%d-%d", sub, n))
					if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
						_ = os.WriteFile(p, nil, 0o644)
					}
				}
			}
		}
	}
	src := &rangeSrc{splits: 4, perSplit: 60, delay: 300 * time.Microsecond, readerFailAt: -1}
	store := newTxnStore()
	env := countingJob(2, src, failOnce(150), &txnSink2PC{store: store},
		WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(20, time.Millisecond)),
		optionFunc(func(c *config) { c.state = sc }))
	env.hooks = &testHooks{checkpointCompleted: func(int64, checkpoint.Storage) {
		if !blocked.Swap(true) {
			block()
		}
	}}
	if err := env.Execute(testCtx(t), "restore fails once"); err != nil {
		t.Fatal(err)
	}
	if n := env.Status().Restarts; n < 2 {
		t.Fatalf("%d restarts; want the failed restores to have restarted too", n)
	}
	checkCounts(t, store, 240, 7)
}

// runAsNobody runs the calling test alone in this test binary as user
// nobody (65534), in a temporary directory it may write, and fails t
// unless it passed there.
func runAsNobody(t *testing.T) {
	t.Helper()
	// t.TempDir's parent is root's alone: a directory of its own.
	tmp, err := os.MkdirTemp("", "as-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	// The binary's own directory is root's alone: run a copy.
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(tmp, "runtime.test")
	if err := os.WriteFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SPLITFLOW_TEST_AS_NOBODY=1", "TMPDIR="+tmp, "HOME="+tmp)
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as user nobody: %v\n%s", err, out)
	}
}
