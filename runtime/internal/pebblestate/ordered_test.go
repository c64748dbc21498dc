package pebblestate

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

// MapScanAfter reads an ordered map's entries after a user key in byte
// order, whichever of the active buffer, the frozen one or the DB holds
// them: random puts and deletes, snapshots frozen and materialized at
// random points and a buffer small enough to spill, against a model.
func TestOrderedScanSeesLatestWritesInOrder(t *testing.T) {
	for _, bufferEntries := range []int{3, 40} {
		t.Run(fmt.Sprint(bufferEntries), func(t *testing.T) {
			s := openTest(t, bufferEntries)
			model := map[string]map[string]bool{}
			rng := rand.New(rand.NewPCG(3, uint64(bufferEntries)))
			var snap *Snapshot
			var materialized chan error
			dirs := 0
			scan := func(step int, p, after string) {
				t.Helper()
				var want []string
				for k := range model[p] {
					if k > after {
						want = append(want, k)
					}
				}
				slices.Sort(want)
				limit := rng.IntN(len(want) + 2)
				var got []string
				err := s.MapScanAfter([]byte(p), []byte(after), func(k, v []byte) bool {
					if len(v) != 0 {
						t.Fatalf("step %d: entry %q has value %q", step, k, v)
					}
					got = append(got, string(k))
					return len(got) < limit
				})
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if limit < len(want) {
					want = want[:max(limit, 1)]
				}
				if len(want) == 0 && len(got) == 0 {
					return
				}
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: MapScanAfter(%q, %q) = %q, want %q", step, p, after, got, want)
				}
			}
			for step := range 2000 {
				p := fmt.Sprintf("\x00\x03\x00\x00%c", 'a'+rng.IntN(3))
				uk := fmt.Sprintf("%03d", rng.IntN(80))
				var err error
				switch r := rng.IntN(100); {
				case r < 50:
					err = s.OrderedPut([]byte(p), []byte(uk))
					if model[p] == nil {
						model[p] = map[string]bool{}
					}
					model[p][uk] = true
				case r < 80:
					err = s.OrderedDelete([]byte(p), []byte(uk))
					delete(model[p], uk)
				case r < 82 && snap == nil:
					dirs++
					snap, err = s.Freeze(filepath.Join(t.TempDir(), fmt.Sprint("chk", dirs)))
					if err == nil {
						materialized = make(chan error, 1)
						go func(sn *Snapshot) {
							_, err := sn.Materialize()
							materialized <- err
						}(snap)
					}
				case snap != nil && r >= 97:
					if err = <-materialized; err == nil {
						err = s.Thaw(snap)
					}
					snap = nil
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				scan(step, p, "")
				scan(step, p, fmt.Sprintf("%03d", rng.IntN(80)))
			}
			if snap != nil {
				if err := <-materialized; err != nil {
					t.Fatal(err)
				}
				if err := s.Thaw(snap); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
