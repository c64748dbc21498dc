package state

import "fmt"

// Backend is where a job's keyed state lives (Flink's
// state.backend.type), with its settings: Heap or Pebble, given to
// runtime.WithStateBackend. The zero Backend is Heap.
type Backend struct {
	kind      string
	dir       string
	cacheSize int64
}

// The backends' names, as flags, test names and errors give them.
const (
	heapName   = "heap"
	pebbleName = "pebble"
)

// defaultPebbleBlockCacheSize is the pebble backend's block cache unless
// PebbleBlockCacheSize says otherwise.
const defaultPebbleBlockCacheSize = 64 << 20

// Heap keeps keyed state in Go maps: the fastest for state that fits in
// memory with room to spare. Snapshots are asynchronous (copy-on-write)
// and full: every checkpoint writes all of it. It is the default.
func Heap() Backend { return Backend{kind: heapName} }

// Pebble keeps keyed state in one Pebble DB per keyed subtask in the
// local working directory dir (Flink's state.backend.rocksdb.localdir),
// with a bounded block cache: state may be larger than memory.
// Checkpoints are incremental: a checkpoint uploads only the files written
// since the last one.
//
// Each run of a job makes a directory of its own inside dir and removes
// it when it ends; one left by a process that was killed is removed by
// the next job that starts with the same directory. Checkpoints never
// read it: a restore makes the DBs anew from checkpoint storage. An empty
// dir is the default: splitflow-state-<uid> in the OS temp directory, one
// per user; a job refuses it when it is a link or another user's
// directory, and closes it to group and others.
func Pebble(dir string, opts ...PebbleOption) Backend {
	b := Backend{kind: pebbleName, dir: dir, cacheSize: defaultPebbleBlockCacheSize}
	for _, o := range opts {
		o(&b)
	}
	return b
}

// PebbleOption is a setting of Pebble.
type PebbleOption func(*Backend)

// PebbleBlockCacheSize sets the size in bytes of the pebble backend's
// block cache, shared by all the job's keyed subtasks (Flink's
// state.backend.rocksdb.block.cache-size, shared as with managed memory).
// The memtables (16 MiB each, three per subtask in steady state) come on
// top of it; with them and the write buffers it bounds the backend's memory
// whatever the size of the state. Default 64 MiB.
func PebbleBlockCacheSize(bytes int64) PebbleOption {
	return func(b *Backend) { b.cacheSize = bytes }
}

// String is the backend's name, "heap" or "pebble", as ParseBackend reads
// it.
func (b Backend) String() string {
	if b.kind == "" {
		return heapName
	}
	return b.kind
}

// Dir is the pebble backend's working directory, "" for the default.
func (b Backend) Dir() string { return b.dir }

// BlockCacheSize is the pebble backend's block cache in bytes: 64 MiB
// unless PebbleBlockCacheSize says otherwise, 0 for Heap.
func (b Backend) BlockCacheSize() int64 { return b.cacheSize }

// ParseBackend reads a backend name as flags give it, "heap" or
// "pebble", into Heap or Pebble(dir, opts...). dir and opts apply to
// pebble: given with "heap" they are refused, so a flag for them is never
// silently ignored.
func ParseBackend(name, dir string, opts ...PebbleOption) (Backend, error) {
	switch name {
	case heapName:
		if dir != "" || len(opts) > 0 {
			return Backend{}, fmt.Errorf("a state directory and block cache size apply to the pebble state backend, not to %q; choose pebble or drop them", name)
		}
		return Heap(), nil
	case pebbleName:
		return Pebble(dir, opts...), nil
	}
	return Backend{}, fmt.Errorf("unknown state backend %q; use %q or %q", name, heapName, pebbleName)
}
