package keyed

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
)

// failingPuts fails every PutFile while fail is set.
type failingPuts struct {
	checkpoint.Storage
	fail atomic.Bool
}

func (s *failingPuts) PutFile(name, path string) (checkpoint.FileHandle, error) {
	if s.fail.Load() {
		return checkpoint.FileHandle{}, errors.New("storage refused the file (injected)")
	}
	return s.Storage.PutFile(name, path)
}

// deltaState is the model of the test's state: value keys, and map
// entries under a few prefixes, as DB keys (key group first).
type deltaState struct {
	flat map[string]string
	maps map[string]map[string]string
}

func (m deltaState) clone() deltaState {
	c := deltaState{flat: maps.Clone(m.flat), maps: map[string]map[string]string{}}
	for p, es := range m.maps {
		c.maps[p] = maps.Clone(es)
	}
	return c
}

func valueKey(kg, i int) []byte {
	return fmt.Appendf(pebblestate.AppendKeyPrefix(nil, kg, 1), "v%04d", i)
}
func mapPrefix(kg, i int) []byte {
	return fmt.Appendf(pebblestate.AppendKeyPrefix(nil, kg, 2), "m%02d|", i)
}

// openPebbleTest opens subtask sub of par of operator "op" (max
// parallelism 8) on be, restored from olds of chk when there are any.
func openPebbleTest(t *testing.T, be *pebblestate.Backend, storage checkpoint.Storage, sub, par int, olds []pebblestate.Blob, chk *checkpoint.Checkpoint, buffer int) *Pebble {
	t.Helper()
	id := int64(-1)
	if chk != nil {
		id = chk.ID
	}
	pk := NewPebble(be, false, storage, "op", sub, par, 8, id)
	err := pk.Open(func(dir string) pebblestate.Config {
		return pebblestate.Config{Dir: dir, Cache: be.Cache(), BufferEntries: buffer}
	}, olds, chk, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pk.Close() })
	return pk
}

// checkDeltaState compares pk's state in key groups [lo, hi] with m's
// (keys of the universe: kgs x n value keys, kgs x np map prefixes).
func checkDeltaState(t *testing.T, pk *Pebble, m deltaState, lo, hi, n, np int, what string) {
	t.Helper()
	for kg := lo; kg <= hi; kg++ {
		for i := range n {
			k := valueKey(kg, i)
			got, ok, err := pk.Store.Get(k)
			want, in := m.flat[string(k)]
			if err != nil || ok != in || string(got) != want {
				t.Fatalf("%s: Get(%q) = %q, %v, %v; want %q, %v", what, k, got, ok, err, want, in)
			}
		}
		for i := range np {
			p := mapPrefix(kg, i)
			got := map[string]string{}
			if err := pk.Store.MapScan(p, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
				t.Fatal(err)
			}
			if want := m.maps[string(p)]; !maps.Equal(got, want) && len(got)+len(want) > 0 {
				t.Fatalf("%s: map %q = %v; want %v", what, p, got, want)
			}
		}
	}
}

// snapshotAndCommit takes checkpoint id of pk in the engine's order:
// the storage begins the checkpoint before the barrier (the freeze), the
// encoder's blob is written with the files it names, and the checkpoint
// commits. It returns the blob, or the encoder's error (the checkpoint is
// then aborted).
func snapshotAndCommit(t *testing.T, pk *Pebble, storage checkpoint.Storage, id int64) ([]byte, error) {
	t.Helper()
	w, err := storage.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := pk.Freeze(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, files, err := enc(func() bool { return false })
	if err != nil {
		_ = w.Abort()
		return nil, err
	}
	h, err := w.WriteState(checkpoint.OperatorOwner("op", 0), data, files...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: id, States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	pk.Committed(id) // as the engine tells the operator once the output is committed
	return data, nil
}

// Rule (exactly once across retention): a delta checkpoint refers to the
// files of the snapshot before it, which later snapshots may no longer
// use (compacted away). Its blob lists them as the storage's shared files
// like a full checkpoint's, so that the storage's collection keeps them
// while any retained checkpoint refers to them. Thirty checkpoints of
// random writes (some spilling, so some checkpoints are full), with three
// retained: every retained checkpoint, the oldest included, restores to
// the state as of its freeze, whole and rescaled to two subtasks; shared
// files were collected meanwhile, so retention did run.
func TestPebbleDeltaCheckpointsRestoreFromEveryRetained(t *testing.T) {
	const retained, n, np = 3, 150, 4
	mem, err := checkpoint.NewMemoryStorage(checkpoint.WithRetained(retained))
	if err != nil {
		t.Fatal(err)
	}
	be, err := pebblestate.NewBackend(t.TempDir(), false, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	pk := openPebbleTest(t, be, mem, 0, 1, nil, nil, 300)
	m := deltaState{flat: map[string]string{}, maps: map[string]map[string]string{}}
	rng := rand.New(rand.NewPCG(7, 39))
	states := map[int64]deltaState{}
	kinds := map[int64]bool{} // delta or not
	uploaded := map[string]bool{}
	refs := map[int64]map[string]bool{} // the stored files each checkpoint names
	// The risk under test: the oldest retained checkpoint is a delta and
	// names files the newest no longer does (compacted away since), which
	// the storage must keep for it. Checkpoints go on until that holds
	// (Pebble compacts L0 every eight flushes or so, in the background).
	risky := func(last int64) bool {
		oldest := last - retained + 1
		if last < 12 || !kinds[oldest] {
			return false
		}
		for f := range refs[oldest] {
			if !refs[last][f] {
				return true
			}
		}
		return false
	}
	// And retention ran: some file a checkpoint named is gone, since no
	// retained checkpoint names it.
	collected := func() int {
		stored, err := mem.Files()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, h := range stored {
			names[h.Name] = true
		}
		n := 0
		for f := range uploaded {
			if !names[f] {
				n++
			}
		}
		return n
	}
	var last int64
	for id := int64(1); id <= 100 && !(risky(last) && collected() > 0); id++ {
		last = id
		writes := 20 + rng.IntN(200)
		if id%6 == 0 {
			writes = 600 // spills: the next checkpoint is full
		}
		for w := range writes {
			kg := rng.IntN(8)
			v := fmt.Sprint(id, ".", w)
			switch r := rng.IntN(100); {
			case r < 60:
				k := valueKey(kg, rng.IntN(n))
				if err := pk.Store.Put(k, []byte(v)); err != nil {
					t.Fatal(err)
				}
				m.flat[string(k)] = v
			case r < 75:
				k := valueKey(kg, rng.IntN(n))
				if err := pk.Store.Delete(k); err != nil {
					t.Fatal(err)
				}
				delete(m.flat, string(k))
			case r < 97:
				p, uk := mapPrefix(kg, rng.IntN(np)), fmt.Sprint("u", rng.IntN(5))
				if err := pk.Store.MapPut(p, []byte(uk), []byte(v)); err != nil {
					t.Fatal(err)
				}
				if m.maps[string(p)] == nil {
					m.maps[string(p)] = map[string]string{}
				}
				m.maps[string(p)][uk] = v
			default:
				p := mapPrefix(kg, rng.IntN(np))
				if err := pk.Store.MapClear(p); err != nil {
					t.Fatal(err)
				}
				delete(m.maps, string(p))
			}
		}
		data, err := snapshotAndCommit(t, pk, mem, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := pebblestate.DecodeBlob(data)
		if err != nil {
			t.Fatal(err)
		}
		states[id], kinds[id] = m.clone(), b.Delta != nil
		refs[id] = map[string]bool{}
		for _, f := range b.Immutable {
			uploaded[f.Handle.Name] = true
			refs[id][f.Handle.Name] = true
		}
	}
	var nd int
	for _, d := range kinds {
		if d {
			nd++
		}
	}
	if nd < len(kinds)/2 || nd == len(kinds) {
		t.Fatalf("%d of %d checkpoints are deltas; the test wants most but not all", nd, len(kinds))
	}
	ids, err := mem.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != retained {
		t.Fatalf("storage holds checkpoints %v, want %d", ids, retained)
	}
	if collected() == 0 {
		t.Fatalf("none of the %d shared files checkpoints named was collected: retention did not run", len(uploaded))
	}
	t.Logf("%d of %d checkpoints deltas; retained %v (delta: %v %v %v); %d of %d files named collected", nd, len(kinds), ids, kinds[ids[0]], kinds[ids[1]], kinds[ids[2]], collected(), len(uploaded))
	for _, id := range slices.Backward(ids) { // the oldest last, after the others' restores
		chk, err := mem.Load(id)
		if err != nil {
			t.Fatal(err)
		}
		data, ok, err := chk.State(checkpoint.OperatorOwner("op", 0))
		if err != nil || !ok {
			t.Fatalf("checkpoint %d: %v, %v", id, ok, err)
		}
		b, err := pebblestate.DecodeBlob(data)
		if err != nil {
			t.Fatal(err)
		}
		r := openPebbleTest(t, be, mem, 0, 1, []pebblestate.Blob{b}, chk, 300)
		checkDeltaState(t, r, states[id], 0, 7, n, np, fmt.Sprintf("checkpoint %d (delta %v)", id, kinds[id]))
		for sub := range 2 {
			r := openPebbleTest(t, be, mem, sub, 2, []pebblestate.Blob{b}, chk, 300)
			lo, hi := keygroup.Range(sub, 2, 8)
			what := fmt.Sprintf("checkpoint %d (delta %v) at subtask %d of 2", id, kinds[id], sub)
			checkDeltaState(t, r, states[id], lo, hi, n, np, what)
			other := deltaState{flat: map[string]string{}, maps: map[string]map[string]string{}}
			olo, ohi := keygroup.Range(1-sub, 2, 8)
			checkDeltaState(t, r, other, olo, ohi, n, np, what+", other subtask's key groups")
		}
	}
}

// smallDelta is a subtask of max parallelism 8 on its own backend, with
// its model: each put(id) writes 20 value keys over every key group.
type smallDelta struct {
	mem *checkpoint.MemoryStorage
	be  *pebblestate.Backend
	pk  *Pebble
	m   deltaState
}

// newSmallDelta opens it on the memory storage wrapped by wrap.
func newSmallDelta(t *testing.T, wrap func(*checkpoint.MemoryStorage) checkpoint.Storage) *smallDelta {
	t.Helper()
	mem, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	be, err := pebblestate.NewBackend(t.TempDir(), false, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	d := &smallDelta{mem: mem, be: be, m: deltaState{flat: map[string]string{}, maps: map[string]map[string]string{}}}
	d.pk = openPebbleTest(t, be, wrap(mem), 0, 1, nil, nil, 1000)
	return d
}

func (d *smallDelta) put(t *testing.T, id int) {
	t.Helper()
	for i := range 20 {
		k := valueKey(i%8, i)
		v := fmt.Sprint(id, ".", i)
		if err := d.pk.Store.Put(k, []byte(v)); err != nil {
			t.Fatal(err)
		}
		d.m.flat[string(k)] = v
	}
}

// restoresTo checks that checkpoint id, whose blob is data, restores to
// the model.
func (d *smallDelta) restoresTo(t *testing.T, id int64, data []byte) {
	t.Helper()
	b, err := pebblestate.DecodeBlob(data)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := d.mem.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	r := openPebbleTest(t, d.be, d.mem, 0, 1, []pebblestate.Blob{b}, chk, 1000)
	checkDeltaState(t, r, d.m, 0, 7, 20, 0, fmt.Sprint("checkpoint ", id))
}

// Rule: a failure of a snapshot's background materialization is not
// lost: the next checkpoint's encoder returns it (the checkpoint is
// declined, as when its own snapshot fails), and the state is not: a
// later checkpoint holds every write, the failed interval's included.
func TestPebbleBackgroundFailureDeclinesTheNextCheckpoint(t *testing.T) {
	var st *failingPuts
	d := newSmallDelta(t, func(mem *checkpoint.MemoryStorage) checkpoint.Storage {
		st = &failingPuts{Storage: mem}
		return st
	})
	pk, put := d.pk, func(id int) { d.put(t, id) }
	put(1)
	if _, err := snapshotAndCommit(t, pk, st, 1); err != nil {
		t.Fatal(err) // full: its own files
	}
	put(2)
	st.fail.Store(true)
	// A delta over checkpoint 1's files: nothing to store, so it does not
	// see the failure of its own snapshot's files, in the background.
	data, err := snapshotAndCommit(t, pk, st, 2)
	if err != nil {
		t.Fatalf("the delta checkpoint failed: %v", err)
	}
	if b, _ := pebblestate.DecodeBlob(data); b.Delta == nil {
		t.Fatal("checkpoint 2 is not a delta")
	}
	<-pk.mat.done
	st.fail.Store(false)
	put(3)
	_, err = snapshotAndCommit(t, pk, st, 3)
	if err == nil || !strings.Contains(err.Error(), "previous snapshot") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("checkpoint 3 after a failed background store: %v", err)
	}
	put(4)
	data, err = snapshotAndCommit(t, pk, st, 4)
	if err != nil {
		t.Fatal(err)
	}
	d.restoresTo(t, 4, data)
}

// countingPuts counts the files stored.
type countingPuts struct {
	checkpoint.Storage
	n atomic.Int64
}

func (s *countingPuts) PutFile(name, path string) (checkpoint.FileHandle, error) {
	s.n.Add(1)
	return s.Storage.PutFile(name, path)
}

// Rule (the commit path first): a delta checkpoint's own snapshot is
// materialized (its buffer applied, the DB flushed, the new file stored)
// only once the checkpoint's output is committed (Committed), so that it
// does not run while the checkpoint completes and the sinks commit; the
// next freeze begins it sooner when no such word came. A full
// checkpoint's, which its own encoder waits for, begins with the encoder.
func TestADeltaCheckpointIsMaterializedOnceItsOutputIsCommitted(t *testing.T) {
	var st *countingPuts
	d := newSmallDelta(t, func(mem *checkpoint.MemoryStorage) checkpoint.Storage {
		st = &countingPuts{Storage: mem}
		return st
	})
	pk, put := d.pk, func(id int) { d.put(t, id) }
	// checkpointOnly takes checkpoint id up to its storage's commit, without
	// telling pk that its output is committed.
	checkpointOnly := func(id int64) (pebblestate.Blob, []byte) {
		t.Helper()
		w, err := st.Begin(id)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := pk.Freeze(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, files, err := enc(func() bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("op", 0), data, files...)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, States: []checkpoint.StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
		b, err := pebblestate.DecodeBlob(data)
		if err != nil {
			t.Fatal(err)
		}
		return b, data
	}
	begun := func(job *matJob) bool {
		select {
		case <-job.start:
			return true
		default:
			return false
		}
	}

	put(1)
	if b, _ := checkpointOnly(1); b.Delta != nil {
		t.Fatal("checkpoint 1, the first, is a delta") // and so it did not wait for a commit
	}
	stored := st.n.Load()
	if stored == 0 {
		t.Fatal("checkpoint 1 stored no file")
	}
	put(2)
	if b, _ := checkpointOnly(2); b.Delta == nil {
		t.Fatal("checkpoint 2 is not a delta")
	}
	job2 := pk.mat
	pk.Committed(1) // an older checkpoint's word begins nothing newer
	time.Sleep(100 * time.Millisecond)
	if begun(job2) || st.n.Load() != stored {
		t.Fatalf("checkpoint 2's materialization began before its output was committed (files stored: %d, then %d)", stored, st.n.Load())
	}
	pk.Committed(2)
	<-job2.done
	if job2.err != nil {
		t.Fatal(job2.err)
	}
	if st.n.Load() == stored {
		t.Fatal("checkpoint 2's materialization stored no file once its output was committed")
	}

	// No word of checkpoint 3's commit: checkpoint 4's freeze begins its
	// materialization, which 4, a delta over it, waits for.
	put(3)
	if b, _ := checkpointOnly(3); b.Delta == nil {
		t.Fatal("checkpoint 3 is not a delta")
	}
	put(4)
	b, data := checkpointOnly(4)
	if b.Delta == nil {
		t.Fatal("checkpoint 4 is not a delta")
	}
	d.restoresTo(t, 4, data)
}

// heldPuts blocks every PutFile while hold is set, until released.
type heldPuts struct {
	checkpoint.Storage
	mu      sync.Mutex
	release chan struct{} // nil: puts go through
}

func (s *heldPuts) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release = make(chan struct{})
}

func (s *heldPuts) let() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.release)
	s.release = nil
}

func (s *heldPuts) PutFile(name, path string) (checkpoint.FileHandle, error) {
	s.mu.Lock()
	r := s.release
	s.mu.Unlock()
	if r != nil {
		<-r
	}
	return s.Storage.PutFile(name, path)
}

// Rule: a snapshot whose encoder is told to stop gives up itself only. The
// subtask goes on (the engine stops an encoder when its task ends, a test
// harness at any time), and its next checkpoint stores its files and
// restores exactly: the stop does not reach the materializations that
// later checkpoints are built on.
func TestAnAbandonedSnapshotLeavesTheNextCheckpointWhole(t *testing.T) {
	var st *heldPuts
	d := newSmallDelta(t, func(mem *checkpoint.MemoryStorage) checkpoint.Storage {
		st = &heldPuts{Storage: mem}
		return st
	})
	pk, put := d.pk, func(id int) { d.put(t, id) }
	put(1)
	if _, err := snapshotAndCommit(t, pk, st, 1); err != nil {
		t.Fatal(err)
	}
	// Checkpoint 2, a delta, is taken but its output never committed:
	// its materialization waits, to begin at the next freeze.
	put(2)
	enc, err := pk.Freeze(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := enc(func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	// Snapshot 3's freeze begins 2's materialization, whose store is
	// held, so 3's encoder waits for it and is told to stop.
	put(3)
	st.hold()
	enc, err = pk.Freeze(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(50 * time.Millisecond); st.let() }()
	if _, _, err := enc(func() bool { return true }); !errors.Is(err, ErrSnapshotAbandoned) {
		t.Fatalf("snapshot 3, told to stop: %v", err)
	}
	put(4)
	data, err := snapshotAndCommit(t, pk, st, 4)
	if err != nil {
		t.Fatalf("checkpoint 4, after snapshot 3 was given up: %v", err)
	}
	d.restoresTo(t, 4, data)
}
