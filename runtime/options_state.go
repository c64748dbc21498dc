package runtime

import (
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
)

// StateBackend is where a job's keyed state lives (Flink's
// state.backend.type), with its settings: HeapState or PebbleState, given
// to WithStateBackend. The zero StateBackend is HeapState.
type StateBackend struct {
	kind      backendKind
	dir       string
	cacheSize int64
}

// backendKind names a backend as flags, test names and errors give it.
type backendKind string

const (
	kindHeap   backendKind = "heap"
	kindPebble backendKind = "pebble"
)

// defaultPebbleBlockCacheSize is the pebble backend's block cache unless
// PebbleBlockCacheSize says otherwise.
const defaultPebbleBlockCacheSize = 64 << 20

// HeapState keeps keyed state in Go maps: the fastest for state that fits
// in memory with room to spare. Snapshots are asynchronous (copy-on-write)
// and full: every checkpoint writes all of it. It is the default.
func HeapState() StateBackend { return StateBackend{kind: kindHeap} }

// PebbleState keeps keyed state in one Pebble DB per keyed subtask in the
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
func PebbleState(dir string, opts ...PebbleOption) StateBackend {
	b := StateBackend{kind: kindPebble, dir: dir, cacheSize: defaultPebbleBlockCacheSize}
	for _, o := range opts {
		o(&b)
	}
	return b
}

// PebbleOption is a setting of PebbleState.
type PebbleOption func(*StateBackend)

// PebbleBlockCacheSize sets the size in bytes of the pebble backend's
// block cache, shared by all the job's keyed subtasks (Flink's
// state.backend.rocksdb.block.cache-size, shared as with managed memory).
// With the memtables (16 MiB each, at most two per subtask) and the write
// buffers it bounds the backend's memory whatever the size of the state.
// Default 64 MiB.
func PebbleBlockCacheSize(bytes int64) PebbleOption {
	return func(b *StateBackend) { b.cacheSize = bytes }
}

// String is the backend's name, as ParseStateBackend reads it.
func (b StateBackend) String() string { return string(b.backendKind()) }

func (b StateBackend) backendKind() backendKind {
	if b.kind == "" {
		return kindHeap
	}
	return b.kind
}

// ParseStateBackend reads a backend name as flags give it, "heap" or
// "pebble", into HeapState or PebbleState(dir, opts...). dir and opts
// apply to pebble: given with "heap" they are refused, so a flag for
// them is never silently ignored.
func ParseStateBackend(name, dir string, opts ...PebbleOption) (StateBackend, error) {
	switch backendKind(name) {
	case kindHeap:
		if dir != "" || len(opts) > 0 {
			return StateBackend{}, fmt.Errorf("a state directory and block cache size apply to the pebble state backend, not to %q; choose pebble or drop them", name)
		}
		return HeapState(), nil
	case kindPebble:
		return PebbleState(dir, opts...), nil
	}
	return StateBackend{}, fmt.Errorf("unknown state backend %q; use %q or %q", name, kindHeap, kindPebble)
}

type stateConfig struct {
	backend   backendKind
	dir       string
	dirSet    bool
	cacheSize int64
	// memTable and bufferEntries are the pebble DB's memtable size and
	// write buffer bound (0: the state package's defaults); set by tests.
	memTable      uint64
	bufferEntries int
}

func defaultStateConfig() stateConfig {
	return stateConfig{backend: kindHeap, cacheSize: defaultPebbleBlockCacheSize}
}

func (c *stateConfig) validate() error {
	var errs []error
	switch c.backend {
	case kindHeap:
	case kindPebble:
		if c.cacheSize <= 0 {
			errs = append(errs, invalidGraph("state block cache size must be > 0 bytes, got %d (PebbleBlockCacheSize)", c.cacheSize))
		}
	default:
		errs = append(errs, invalidGraph("unknown state backend %q; use HeapState or PebbleState", c.backend))
	}
	return errors.Join(errs...)
}

// workDir is where the pebble backend's DBs live.
func (c *stateConfig) workDir() string {
	if c.dirSet {
		return c.dir
	}
	return pebblestate.DefaultDir()
}

// WithStateBackend chooses where keyed state lives, and its settings.
// Default HeapState(). A checkpoint taken with the heap backend restores
// into the pebble backend (the state is loaded into the DB as each state
// is declared); one taken with pebble restores only into pebble.
func WithStateBackend(b StateBackend) Option {
	return optionFunc(func(c *config) {
		c.state.backend, c.state.dir, c.state.dirSet, c.state.cacheSize = b.backendKind(), b.dir, b.dir != "", b.cacheSize
		if b.backendKind() == kindHeap {
			c.state.cacheSize = defaultPebbleBlockCacheSize
		}
	})
}
