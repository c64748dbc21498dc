package pebblestate

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// deltaChk is a checkpoint as the engine stores one: the small files and
// the names of the immutable files (copied to a shared directory once,
// under their DB names, which a DB never reuses) of a materialized
// snapshot, and for a delta checkpoint the entries of the buffer frozen
// after that snapshot. want is the model's state at its freeze.
type deltaChk struct {
	small     map[string][]byte
	immutable []string
	delta     []byte
	want      map[string]string
}

// matResult is a snapshot's materialization done in the background.
type matResult struct {
	seq       uint64
	small     map[string][]byte
	immutable []string
	err       error
	done      chan struct{}
}

// materializeTo materializes sn, copies its immutable files to shared
// (those not there yet) and reads its small files, then removes its
// directory, as the engine's background materialization does.
func materializeTo(sn *Snapshot, shared string, prev *matResult, gate <-chan struct{}) *matResult {
	r := &matResult{seq: sn.Seq(), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer os.RemoveAll(sn.dir)
		if gate != nil {
			<-gate
		}
		files, err := sn.Materialize()
		if prev != nil {
			<-prev.done
		}
		if err != nil {
			r.err = err
			return
		}
		r.small = map[string][]byte{}
		for _, f := range files {
			if !f.Immutable {
				b, err := os.ReadFile(f.Path)
				if err != nil {
					r.err = err
					return
				}
				r.small[f.Name] = b
				continue
			}
			dst := filepath.Join(shared, f.Name)
			if _, err := os.Stat(dst); err != nil {
				if err := copyFile(f.Path, dst); err != nil {
					r.err = err
					return
				}
			}
			r.immutable = append(r.immutable, f.Name)
		}
	}()
	return r
}

// flatten is the model as DB keys and values.
func (m *model) flatten() map[string]string {
	out := maps.Clone(m.flat)
	for p, es := range m.maps {
		for k, v := range es {
			out[p+k] = v
		}
	}
	return out
}

// dbContents is every key and value in s's DB.
func dbContents(t *testing.T, db *pebble.DB) map[string]string {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// inGroups keeps the keys of key groups [lo, hi] of kv.
func inGroups(kv map[string]string, lo, hi int) map[string]string {
	out := map[string]string{}
	for k, v := range kv {
		if inRange([]byte(k), KeyGroupBound(lo), KeyGroupEnd(hi)) {
			out[k] = v
		}
	}
	return out
}

// layChk lays c's files out in a new directory.
func layChk(t *testing.T, c deltaChk, shared string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db")
	if err := Lay(dir, c.small, c.immutable, func(name, dst string) error {
		return copyFile(filepath.Join(shared, name), dst)
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Rule: a checkpoint is what the DB held at its freeze, whether it holds
// its own snapshot's files or the files of the snapshot before and the
// buffer frozen since (a delta checkpoint, taken when the DB held exactly
// that snapshot's state: no spill since, its materialization done).
// Random puts, deletes, map puts, deletes and clears over four key
// groups, between checkpoints frozen with their materialization in the
// background (sometimes held until after the next freeze, which then
// materializes it itself); the buffer is small enough that some intervals
// spill. Every checkpoint, delta or not, restores to the model's state at
// its freeze: whole, rescaled to key groups 0-1 and 2-3 (DeleteOutside
// after the delta's filtered entries), and merged into an empty DB
// (CopyFrom with the delta).
func TestDeltaCheckpointsRestoreTheStateAsOfTheirFreeze(t *testing.T) {
	shared := t.TempDir()
	s := openTest(t, 120)
	m := &model{flat: map[string]string{}, maps: map[string]map[string]string{}}
	rng := rand.New(rand.NewPCG(3, 9))
	var chks []deltaChk
	var prev *matResult
	deltas, fulls := 0, 0
	pending := make(chan deltaChk, 1)
	var gate chan struct{}
	for round := range 40 {
		// Up to ~200 writes: a round of more than 120 distinct ones spills.
		n := rng.IntN(200)
		if round%5 == 4 {
			n = 2 // a nearly empty buffer
		}
		for i := range n {
			kg := []byte{0, byte(rng.IntN(4))}
			k := string(kg) + fmt.Sprintf("\x00\x01v%03d", rng.IntN(80))
			p := string(kg) + fmt.Sprintf("\x00\x02m%02d|", rng.IntN(6))
			uk := fmt.Sprintf("u%02d", rng.IntN(10))
			v := fmt.Sprint(round, ".", i)
			op := opMapClear
			switch r := rng.IntN(100); {
			case r < 35:
				op = opPut
			case r < 45:
				op = opDelete
			case r < 75:
				op = opMapPut
			case r < 88:
				op = opMapDelete
			}
			if err := m.write(s, op, k, p, uk, v); err != nil {
				t.Fatal(err)
			}
		}
		if prev != nil {
			chks = append(chks, <-pending) // the encoder of the last one
		}
		sn, err := s.FreezeDetached(filepath.Join(t.TempDir(), fmt.Sprint("chk", round)))
		if err != nil {
			t.Fatal(err)
		}
		if gate != nil {
			close(gate) // the freeze above had to materialize it
			gate = nil
		}
		want := m.flatten()
		delta := prev != nil && sn.Base() != 0 && sn.Base() == prev.seq
		if delta {
			deltas++
			if round%3 == 1 {
				// Its materialization waits until after the next
				// freeze (or a spill before it), which then makes it on
				// the writer's goroutine; its encoder does not wait for it.
				gate = make(chan struct{})
			}
		} else {
			fulls++
		}
		job := materializeTo(sn, shared, prev, gate)
		go func(prev, job *matResult) {
			c := deltaChk{want: want}
			base := job
			if delta {
				<-prev.done
				base = prev
				c.delta = sn.AppendDelta(nil)
			} else {
				<-job.done
			}
			if base.err != nil {
				t.Error(base.err)
			}
			c.small, c.immutable = base.small, base.immutable
			pending <- c
		}(prev, job)
		prev = job
		check(t, s, m, round)
	}
	chks = append(chks, <-pending)
	if gate != nil {
		close(gate)
	}
	<-prev.done
	t.Logf("%d delta and %d full checkpoints", deltas, fulls)
	if deltas < 10 || fulls < 5 {
		t.Fatalf("%d delta and %d full checkpoints; the test wants both kinds", deltas, fulls)
	}
	for i, c := range chks {
		dir := layChk(t, c, shared)
		r, err := OpenRestored(Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.ApplyDelta(c.delta, KeyGroupBound(0), nil); err != nil {
			t.Fatal(err)
		}
		if got := dbContents(t, r.db); !maps.Equal(got, c.want) {
			t.Fatalf("checkpoint %d (delta %v) restored %d keys, want %d:\n got %v\nwant %v", i, c.delta != nil, len(got), len(c.want), got, c.want)
		}
		_ = r.Close()
		for _, kgs := range [][2]int{{0, 1}, {2, 3}} {
			lo, hi := KeyGroupBound(kgs[0]), KeyGroupEnd(kgs[1])
			r, err := OpenRestored(Config{Dir: layChk(t, c, shared)})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.ApplyDelta(c.delta, lo, hi); err != nil {
				t.Fatal(err)
			}
			if err := r.DeleteOutside(lo, hi); err != nil {
				t.Fatal(err)
			}
			want := inGroups(c.want, kgs[0], kgs[1])
			if got := dbContents(t, r.db); !maps.Equal(got, want) {
				t.Fatalf("checkpoint %d (delta %v) rescaled to key groups %v: %d keys, want %d", i, c.delta != nil, kgs, len(got), len(want))
			}
			_ = r.Close()
			e := openTest(t, 10)
			if err := e.CopyFrom(layChk(t, c, shared), c.delta, lo, hi, nil); err != nil {
				t.Fatal(err)
			}
			if got := dbContents(t, e.db); !maps.Equal(got, want) {
				t.Fatalf("checkpoint %d (delta %v) merged for key groups %v: %d keys, want %d", i, c.delta != nil, kgs, len(got), len(want))
			}
		}
	}
}

// Rule: a spill between two freezes (the buffer reached the DB, past the
// last snapshot's checkpoint) leaves the next snapshot without a base, so
// its checkpoint takes its own files; so does a failed materialization,
// whose buffer the next freeze applies instead. Without either, the next
// snapshot's base is the last one.
func TestSnapshotBaseIsLostBySpillAndFailure(t *testing.T) {
	s := openTest(t, 10)
	freeze := func(name string) *Snapshot {
		t.Helper()
		sn, err := s.FreezeDetached(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		return sn
	}
	put := func(n int) {
		t.Helper()
		for i := range n {
			if err := s.Put(fmt.Appendf(nil, "\x00\x00k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(3)
	a := freeze("a")
	if a.Base() != 0 {
		t.Fatalf("the first snapshot has base %d", a.Base())
	}
	if _, err := a.Materialize(); err != nil {
		t.Fatal(err)
	}
	put(3)
	b := freeze("b")
	if b.Base() != a.Seq() {
		t.Fatalf("base %d, want the materialized snapshot before, %d", b.Base(), a.Seq())
	}
	if _, err := b.Materialize(); err != nil {
		t.Fatal(err)
	}
	put(12) // spills
	if c := freeze("c"); c.Base() != 0 {
		t.Fatalf("after a spill: base %d, want none", c.Base())
	} else if _, err := c.Materialize(); err != nil {
		t.Fatal(err)
	}
	put(2)
	s.failApply = errors.New("disk full (injected)")
	d := freeze("d")
	if _, err := d.Materialize(); err == nil {
		t.Fatal("materialized despite the injected failure")
	}
	s.failApply = nil
	put(2)
	if e := freeze("e"); e.Base() != 0 {
		t.Fatalf("after a failed materialization: base %d, want none", e.Base())
	}
	check(t, s, &model{flat: map[string]string{"\x00\x00k0": "v", "\x00\x00k11": "v"}}, 0)
}
