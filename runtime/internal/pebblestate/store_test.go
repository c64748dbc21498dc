package pebblestate

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// model is what the store must read back: value keys and maps by prefix.
type model struct {
	flat map[string]string
	maps map[string]map[string]string
}

// writeOp is a kind of write the model tests make at random.
type writeOp int

const (
	opPut writeOp = iota
	opDelete
	opMapPut
	opMapDelete
	opMapClear
)

// write makes op on s and on the model: k is the value entry's key, p and
// uk the map entry's prefix and user key, v the value written.
func (m *model) write(s *Store, op writeOp, k, p, uk, v string) error {
	switch op {
	case opPut:
		m.flat[k] = v
		return s.Put([]byte(k), []byte(v))
	case opDelete:
		delete(m.flat, k)
		return s.Delete([]byte(k))
	case opMapPut:
		if m.maps[p] == nil {
			m.maps[p] = map[string]string{}
		}
		m.maps[p][uk] = v
		return s.MapPut([]byte(p), []byte(uk), []byte(v))
	case opMapDelete:
		delete(m.maps[p], uk)
		return s.MapDelete([]byte(p), []byte(uk))
	default:
		m.maps[p] = map[string]string{}
		return s.MapClear([]byte(p))
	}
}

func openTest(t *testing.T, bufferEntries int) *Store {
	t.Helper()
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "db"), BufferEntries: bufferEntries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func check(t *testing.T, s *Store, m *model, step int) {
	t.Helper()
	for k, want := range m.flat {
		got, ok, err := s.Get([]byte(k))
		if err != nil || !ok || string(got) != want {
			t.Fatalf("step %d: Get(%q) = %q, %v, %v; want %q", step, k, got, ok, err, want)
		}
	}
	for p, want := range m.maps {
		got := map[string]string{}
		if err := s.MapScan([]byte(p), func(k, v []byte) bool {
			got[string(k)] = string(v)
			return true
		}); err != nil {
			t.Fatalf("step %d: MapScan(%q): %v", step, p, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("step %d: MapScan(%q) = %v, want %v", step, p, got, want)
		}
		for k, v := range want {
			g, ok, err := s.MapGet([]byte(p), []byte(k))
			if err != nil || !ok || string(g) != v {
				t.Fatalf("step %d: MapGet(%q, %q) = %q, %v, %v; want %q", step, p, k, g, ok, err, v)
			}
		}
	}
}

// Every read sees the latest write, whichever of the active buffer, the
// frozen one or the DB holds it: random writes, deletes and clears with
// snapshots frozen and materialized at random points (the package's first
// invariant), against a model; the buffer is small so that it spills into
// the DB, also while a snapshot is frozen.
func TestReadsSeeLatestWriteAcrossBufferFreezeAndDB(t *testing.T) {
	for _, bufferEntries := range []int{3, 50} {
		t.Run(fmt.Sprint(bufferEntries), func(t *testing.T) {
			s := openTest(t, bufferEntries)
			m := &model{flat: map[string]string{}, maps: map[string]map[string]string{}}
			rng := rand.New(rand.NewPCG(1, uint64(bufferEntries)))
			// A frozen snapshot materializes on a goroutine of its own, as
			// the engine's encoder does it; a spill while it runs waits
			// for it.
			var snap *Snapshot
			var materialized chan error
			dirs := 0
			for step := range 1000 {
				k := fmt.Sprintf("\x00\x01v%03d", rng.IntN(60))
				p := fmt.Sprintf("\x00\x02m%02d|", rng.IntN(10))
				uk := fmt.Sprintf("u%02d", rng.IntN(8))
				v := fmt.Sprint(step)
				var err error
				switch r := rng.IntN(100); {
				case r < 30:
					err = m.write(s, opPut, k, p, uk, v)
				case r < 40:
					err = m.write(s, opDelete, k, p, uk, v)
				case r < 70:
					err = m.write(s, opMapPut, k, p, uk, v)
				case r < 80:
					err = m.write(s, opMapDelete, k, p, uk, v)
				case r < 84:
					err = m.write(s, opMapClear, k, p, uk, v)
				case r < 85 && snap == nil:
					dirs++
					snap, err = s.Freeze(filepath.Join(t.TempDir(), fmt.Sprint("chk", dirs)))
					if err == nil {
						materialized = make(chan error, 1)
						go func(sn *Snapshot) {
							_, err := sn.Materialize()
							materialized <- err
						}(snap)
					}
				case snap != nil && r >= 98:
					if materialized != nil {
						err = <-materialized
						materialized = nil
					}
					if err == nil {
						err = s.Thaw(snap)
					}
					snap = nil
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for k := range m.flat {
					if _, ok, _ := s.Get([]byte(k)); !ok {
						t.Fatalf("step %d: %q lost", step, k)
					}
				}
				// Every few steps, every key of the key space: a deleted or
				// overwritten value must not come back from any layer.
				if step%7 == 0 {
					for i := range 60 {
						k := fmt.Sprintf("\x00\x01v%03d", i)
						got, ok, err := s.Get([]byte(k))
						if want, in := m.flat[k]; err != nil || ok != in || string(got) != want {
							t.Fatalf("step %d: Get(%q) = %q, %v, %v; want %q, %v", step, k, got, ok, err, want, in)
						}
					}
					for i := range 10 {
						p := fmt.Sprintf("\x00\x02m%02d|", i)
						for j := range 8 {
							uk := fmt.Sprintf("u%02d", j)
							got, ok, err := s.MapGet([]byte(p), []byte(uk))
							if want, in := m.maps[p][uk]; err != nil || ok != in || string(got) != want {
								t.Fatalf("step %d: MapGet(%q, %q) = %q, %v, %v; want %q, %v", step, p, uk, got, ok, err, want, in)
							}
						}
					}
				}
				if step%97 == 0 {
					check(t, s, m, step)
				}
			}
			check(t, s, m, -1)
		})
	}
}

// A materialized snapshot is the state as of Freeze: writes made after
// it, while it materializes, are not in its files.
func TestSnapshotHoldsStateAsOfFreeze(t *testing.T) {
	s := openTest(t, 4)
	for i := range 20 {
		if err := s.Put(fmt.Appendf(nil, "k%02d", i), []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "chk")
	snap, err := s.Freeze(dir)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		files []File
		err   error
	}
	materialized := make(chan result, 1)
	go func() {
		fs, err := snap.Materialize()
		materialized <- result{fs, err}
	}()
	for snap.phase.Load() == phaseFrozen {
		runtime.Gosched() // the writes below are to wait for it, not supersede it
	}
	for i := range 20 {
		if err := s.Put(fmt.Appendf(nil, "k%02d", i), []byte("after")); err != nil {
			t.Fatal(err)
		}
	}
	res := <-materialized
	files, err := res.files, res.err
	if err != nil {
		t.Fatal(err)
	}
	r := layTest(t, files)
	if err := s.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		v, ok, err := r.Get(fmt.Appendf(nil, "k%02d", i))
		if err != nil || !ok || string(v) != "before" {
			t.Fatalf("restored k%02d = %q, %v, %v; want before", i, v, ok, err)
		}
		v, _, _ = s.Get(fmt.Appendf(nil, "k%02d", i))
		if string(v) != "after" {
			t.Fatalf("live k%02d = %q, want after", i, v)
		}
	}
}

// Open refuses a directory that exists: a DB is made anew for every run
// and never picked up from a previous one's leftovers.
func TestOpenRefusesAnExistingDirectory(t *testing.T) {
	if _, err := Open(Config{Dir: t.TempDir()}); err == nil {
		t.Fatal("Open of an existing directory succeeded")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// A snapshot that never materialized (its encoder was abandoned before it
// began) loses nothing: Thaw applies its buffer. One whose store filled
// its buffer before Materialize began is materialized by the store there
// and then, as of its Freeze, rather than hold the task waiting for an
// encoder; Materialize returns those files.
func TestThawWithoutMaterializeKeepsWrites(t *testing.T) {
	s := openTest(t, 100)
	if err := s.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Freeze(filepath.Join(t.TempDir(), "chk"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	check(t, s, &model{flat: map[string]string{"a": "1", "b": "2"}}, 0)
	if err := s.apply(s.active); err != nil {
		t.Fatal(err)
	}
	s.active = newBuffer()
	check(t, s, &model{flat: map[string]string{"a": "1", "b": "2"}}, 1)

	small := openTest(t, 2)
	if err := small.Put([]byte("base"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	snap, err = small.Freeze(filepath.Join(t.TempDir(), "chk2"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := small.Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	files, err := snap.Materialize()
	if err != nil {
		t.Fatal(err)
	}
	restored := layTest(t, files)
	if err := small.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := restored.Get([]byte("k0")); ok {
		t.Fatal("a write after Freeze is in the snapshot")
	}
	if v, ok, _ := restored.Get([]byte("base")); !ok || string(v) != "x" {
		t.Fatalf("the snapshot lost a write before Freeze: %q, %v", v, ok)
	}
	check(t, small, &model{flat: map[string]string{"base": "x", "k0": "v", "k1": "v", "k2": "v", "k3": "v", "k4": "v"}}, 2)
}

// layTest opens a copy of a materialized snapshot's files as a store.
func layTest(t *testing.T, files []File) *Store {
	t.Helper()
	small := map[string][]byte{}
	var immutable []string
	paths := map[string]string{}
	for _, f := range files {
		paths[f.Name] = f.Path
		if f.Immutable {
			immutable = append(immutable, f.Name)
			continue
		}
		small[f.Name] = mustRead(t, f.Path)
	}
	if len(immutable) == 0 {
		t.Fatal("a snapshot of a flushed DB with keys has no SST")
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if err := Lay(dir, small, immutable, func(name, dst string) error {
		return copyFile(paths[name], dst)
	}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRestored(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// A read that fails is an error, never a short answer: a map scan whose
// DB cannot read its files returns the error instead of the entries it
// got to (a function writing back on what it was given would drop the
// rest).
func TestMapScanReportsReadErrors(t *testing.T) {
	inject := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt || op.Kind == errorfs.OpFileRead {
			return errorfs.ErrInjected
		}
		return nil
	})}
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "db"), BufferEntries: 4, FS: errorfs.Wrap(vfs.Default, inject)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prefix := []byte("\x00\x01\x00\x02m|")
	for i := range 1000 {
		if err := s.MapPut(prefix, fmt.Appendf(nil, "u%04d", i), bytes.Repeat([]byte{'v'}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Freeze(filepath.Join(t.TempDir(), "chk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Materialize(); err != nil {
		t.Fatal(err)
	}
	if err := s.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	inject.On()
	n := 0
	err = s.MapScan(prefix, func(k, v []byte) bool { n++; return true })
	inject.Off()
	if err == nil {
		t.Fatalf("a scan whose reads failed returned no error (%d of 1000 entries)", n)
	}
}

// A snapshot's buffer that could not be applied at Thaw is kept, not
// dropped: reads still see its writes, and the next Freeze applies it
// before it sets the new buffer aside, so no later snapshot misses them.
func TestFailedThawKeepsTheFrozenWrites(t *testing.T) {
	s := openTest(t, 100)
	if err := s.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Freeze(filepath.Join(t.TempDir(), "chk1"))
	if err != nil {
		t.Fatal(err)
	}
	s.failApply = errors.New("disk full (injected)")
	if err := s.Thaw(snap); err == nil {
		t.Fatal("Thaw applied the buffer despite the injected failure")
	}
	s.failApply = nil
	check(t, s, &model{flat: map[string]string{"a": "1"}}, 0)
	next, err := s.Freeze(filepath.Join(t.TempDir(), "chk2"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := next.Materialize()
	if err != nil {
		t.Fatal(err)
	}
	restored := layTest(t, files)
	if v, ok, _ := restored.Get([]byte("a")); !ok || string(v) != "1" {
		t.Fatalf("the next snapshot lost a write its predecessor could not apply: %q, %v", v, ok)
	}
	if err := s.Thaw(next); err != nil {
		t.Fatal(err)
	}
}
