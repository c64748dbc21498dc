package pebblestate

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// Rule: the block cache holds blocks up to its size however many stores
// share it. Pebble counts each DB's memtables against its cache; two
// stores whose memtables have grown to full size would otherwise leave a
// cache of four memtables' size no room at all, and every read would go
// to the files.
func TestTheBlockCacheHoldsItsSizeBesideTheMemtables(t *testing.T) {
	const (
		memTable  = 1 << 20
		cacheSize = 4 * memTable
		keys      = 30_000
		hot       = 5_000 // keys read twice: their blocks fit the cache
	)
	cache := pebble.NewCache(cacheSize)
	defer cache.Unref()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%08d", i) }
	val := make([]byte, 100)
	var stores []*Store
	for n := range 2 {
		s, err := Open(Config{Dir: filepath.Join(t.TempDir(), fmt.Sprint("db", n)), Cache: cache, MemTableSize: memTable, BufferEntries: 1000})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Several memtables' worth of writes: each DB's memtables grow to
		// their full size, one in use and one kept for reuse.
		for i := range keys {
			if err := s.Put(key(i), val); err != nil {
				t.Fatal(err)
			}
			if err := s.maybeSpill(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	if m := stores[0].db.Metrics().MemTable; m.Size+m.ZombieSize < memTable {
		t.Fatalf("the first store's memtables hold %d bytes of the cache; want at least a full memtable's %d for the rule to be tested", m.Size+m.ZombieSize, memTable)
	}
	read := func(n int) {
		for _, s := range stores {
			for i := range n {
				if _, ok, err := s.dbGet(key(i)); err != nil || !ok {
					t.Fatalf("get %s: %v, %v", key(i), ok, err)
				}
			}
		}
	}
	read(hot)
	before := cache.Metrics()
	read(hot)
	after := cache.Metrics()
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	if hits < 9*misses {
		t.Fatalf("reading the same %d keys of each store again: %d block cache hits, %d misses (cache %d bytes, holding %d); want nearly all hits",
			hot, hits, misses, cacheSize, after.Size)
	}
	// Every key of both stores, far more blocks than the cache holds:
	// it fills to at least its size.
	read(keys)
	if held := cache.Metrics().Size; held < cacheSize*9/10 {
		t.Fatalf("after reading every key, the cache holds %d bytes of blocks; want about its size, %d", held, cacheSize)
	}
}
