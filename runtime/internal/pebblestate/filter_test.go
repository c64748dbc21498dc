package pebblestate

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// The key filter never calls a key it was given absent, while it grows by
// segments and with adds from two goroutines at once; it says so of most
// keys it was not given; past its memory bound it gives up answering
// rather than answer wrong.
func TestKeyFilterHasNoFalseAbsent(t *testing.T) {
	f := newKeyFilter(defaultFilterBytes, true)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 100_000 {
				f.add(fmt.Appendf(nil, "k%d-%d", w, i))
			}
		})
	}
	wg.Wait()
	if n := len(*f.segs.Load()); n < 3 {
		t.Fatalf("%d segments after 200k keys, want it to have grown", n)
	}
	for w := range 2 {
		for i := range 100_000 {
			if k := fmt.Appendf(nil, "k%d-%d", w, i); f.absent(k) {
				t.Fatalf("%s added, called absent", k)
			}
		}
	}
	absent := 0
	for i := range 10_000 {
		if f.absent(fmt.Appendf(nil, "other-%d", i)) {
			absent++
		}
	}
	if absent < 8_000 {
		t.Fatalf("only %d of 10000 keys never added were called absent", absent)
	}
	small := newKeyFilter(200<<10, true)
	for i := range 300_000 {
		small.add(fmt.Appendf(nil, "k%d", i))
	}
	if !small.disabled.Load() || small.absent([]byte("k299999")) || small.absent([]byte("never")) {
		t.Fatal("a filter past its bound still answers")
	}
}

// A restored store finds every key it holds, before its filter is built
// (lookups go to the DB) and after; then keys it never held are answered
// by the filter alone.
func TestRestoredStoreFindsItsKeysAroundTheFilterBuild(t *testing.T) {
	s := openTest(t, 64)
	for i := range 5000 {
		if err := s.Put(fmt.Appendf(nil, "v%05d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := s.MapPut([]byte("m|"), fmt.Appendf(nil, "u%05d", i), []byte("y")); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Freeze(filepath.Join(t.TempDir(), "chk"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := snap.Materialize()
	if err != nil {
		t.Fatal(err)
	}
	r := layTest(t, files)
	if err := s.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	lookup := func(when string) {
		for i := range 5000 {
			if _, ok, err := r.Get(fmt.Appendf(nil, "v%05d", i)); !ok || err != nil {
				t.Fatalf("%s: v%05d not found (%v)", when, i, err)
			}
			if _, ok, err := r.MapGet([]byte("m|"), fmt.Appendf(nil, "u%05d", i)); !ok || err != nil {
				t.Fatalf("%s: map entry u%05d not found (%v)", when, i, err)
			}
		}
	}
	if r.FilterReady() {
		t.Fatal("a restored store's filter is ready before it was built")
	}
	lookup("before the build")
	r.BuildFilter()
	if err := r.Put([]byte("new"), []byte("z")); err != nil {
		t.Fatal(err)
	}
	<-r.building
	if !r.FilterReady() {
		t.Fatal("the filter is not ready after its build")
	}
	lookup("after the build")
	if _, ok, _ := r.Get([]byte("new")); !ok {
		t.Fatal("a key written during the build is not found")
	}
	if !r.filter.absent([]byte("v99999")) && !r.filter.absent([]byte("v88888")) {
		t.Fatal("the built filter answers for no key the store never held")
	}
}
