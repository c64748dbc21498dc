package pebblestate

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// incrementKey is key i laid out as the engine lays out a value state's
// key: key group (of the key's hash, so that keys spread over all key
// groups as a keyed job's do), state id 1, the key.
func incrementKey(dst []byte, i int) []byte {
	w := fmt.Appendf(nil, "word-%d", i)
	h := fnv.New32a()
	h.Write(w)
	dst = binary.BigEndian.AppendUint16(dst[:0], uint16(h.Sum32()%128))
	dst = binary.BigEndian.AppendUint16(dst, 1)
	return append(dst, w...)
}

// quiesce waits for the DB's compactions to end, so that what a
// checkpoint stores does not depend on how fast they ran.
func quiesce(t *testing.T, s *Store) {
	t.Helper()
	for i := 0; s.db.Metrics().Compact.NumInProgress > 0; i++ {
		if i > 60_000 {
			t.Fatal("compactions did not end")
		}
		time.Sleep(time.Millisecond)
	}
}

// checkpointIncrements fills a store with keys keys, checkpoints it, then
// checkpoints rounds times, each after changing frac of the keys (a read
// and a write each, as a keyed count does), and returns what each of those
// checkpoints stored anew (the immutable files not in an earlier one, as
// the engine uploads them) and the size of all its immutable files.
func checkpointIncrements(t *testing.T, cfg Config, keys, rounds int, frac float64) (newBytes, full []int64) {
	t.Helper()
	cfg.Dir = filepath.Join(t.TempDir(), "db")
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var k []byte
	val := make([]byte, 8)
	for i := range keys {
		k = incrementKey(k, i)
		if err := s.Put(k, binary.BigEndian.AppendUint64(val[:0], 1)); err != nil {
			t.Fatal(err)
		}
	}
	stored := map[string]bool{}
	snap := func(n int) (fresh, all int64) {
		sn, err := s.Freeze(filepath.Join(filepath.Dir(cfg.Dir), fmt.Sprintf("chk-%d", n)))
		if err != nil {
			t.Fatal(err)
		}
		files, err := sn.Materialize()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !f.Immutable {
				continue
			}
			all += f.Size
			if !stored[f.Name] {
				stored[f.Name] = true
				fresh += f.Size
			}
		}
		if err := s.Thaw(sn); err != nil {
			t.Fatal(err)
		}
		quiesce(t, s)
		return fresh, all
	}
	snap(0)
	changed := int(float64(keys) * frac)
	next := 0
	for r := 1; r <= rounds; r++ {
		for range changed {
			// A stride through the keys, so that every round touches
			// other keys, spread over the key space.
			next = (next + 7919) % keys
			k = incrementKey(k, next)
			v, ok, err := s.Get(k)
			if err != nil || !ok {
				t.Fatalf("key %d: %v, %v", next, ok, err)
			}
			if err := s.Put(k, binary.BigEndian.AppendUint64(val[:0], binary.BigEndian.Uint64(v)+1)); err != nil {
				t.Fatal(err)
			}
		}
		fresh, all := snap(r)
		newBytes, full = append(newBytes, fresh), append(full, all)
		if testing.Verbose() {
			m := s.db.Metrics()
			var lv []string
			for i, l := range m.Levels {
				if l.TablesCount > 0 {
					lv = append(lv, fmt.Sprintf("L%d %d files %d KB (in %d KB, compacted %d)", i, l.TablesCount, l.TablesSize>>10, l.TableBytesIn>>10, l.TableBytesCompacted>>10))
				}
			}
			t.Logf("checkpoint %d: new %d KB of %d KB; compactions %d (default %d, read %d, multilevel %d), %s", r, fresh>>10, all>>10,
				m.Compact.Count, m.Compact.DefaultCount, m.Compact.ReadCount, m.Compact.MultiLevelCount, lv)
		}
	}
	return newBytes, full
}

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// A checkpoint stores about what changed since the last one, not the
// state: 30k keys, 1% of them changed (read and written) between
// checkpoints, 24 checkpoints (100k gave the same ratios, in a minute
// under -race). The median checkpoint stores under 10% of
// the files it uses, and the checkpoints together under 30% of what
// storing every file every time would. Before the LSM's shape was set
// (dbOptions), every other checkpoint stored all its files again (an L0
// compaction after two flushes rewrote the one level below, which held
// all the state in one file): median 94%, mean 50%.
func TestCheckpointStoresAboutWhatChanged(t *testing.T) {
	newBytes, full := checkpointIncrements(t, Config{}, 30_000, 24, 0.01)
	var sumNew, sumFull int64
	for i := range newBytes {
		sumNew += newBytes[i]
		sumFull += full[i]
	}
	med, medFull := median(newBytes), median(full)
	t.Logf("stored per checkpoint: median %d B of %d B (%.3f), max %d B, in all %.3f of the files used",
		med, medFull, float64(med)/float64(medFull), slices.Max(newBytes), float64(sumNew)/float64(sumFull))
	if float64(med) > 0.10*float64(medFull) {
		t.Errorf("the median checkpoint stored %d B of the %d B of files it uses; want under 10%%", med, medFull)
	}
	if float64(sumNew) > 0.30*float64(sumFull) {
		t.Errorf("the checkpoints stored %d B of the %d B of files they used; want under 30%%", sumNew, sumFull)
	}
}
