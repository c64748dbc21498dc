package runtime

import (
	"errors"
	"fmt"
)

// StateBackend says where a job's keyed state lives (Flink's
// state.backend.type).
type StateBackend string

const (
	// HeapStateBackend keeps keyed state in Go maps: the fastest for state
	// that fits in memory with room to spare. Snapshots are asynchronous
	// (copy-on-write) and full: every checkpoint writes all of it.
	HeapStateBackend StateBackend = "heap"
	// PebbleStateBackend keeps keyed state in one Pebble DB per keyed
	// subtask in a local working directory (WithStateDir), with a bounded
	// block cache (WithStateBlockCacheSize): state may be larger than
	// memory. Checkpoints are incremental: a checkpoint uploads only the
	// files written since the last one.
	PebbleStateBackend StateBackend = "pebble"
)

// ParseStateBackend reads a backend name as flags give it: "heap" or
// "pebble".
func ParseStateBackend(s string) (StateBackend, error) {
	switch b := StateBackend(s); b {
	case HeapStateBackend, PebbleStateBackend:
		return b, nil
	}
	return "", fmt.Errorf("unknown state backend %q; use %q or %q", s, HeapStateBackend, PebbleStateBackend)
}

// Defaults of the state options.
const (
	// DefaultStateBlockCacheSize is the pebble backend's block cache, shared
	// by every keyed subtask of the job.
	DefaultStateBlockCacheSize = 64 << 20
)

type stateConfig struct {
	backend   StateBackend
	dir       string
	dirSet    bool
	cacheSize int64
	cacheSet  bool
	// memTable and bufferEntries are the pebble DB's memtable size and
	// write buffer bound (0: the state package's defaults); set by tests.
	memTable      uint64
	bufferEntries int
}

func defaultStateConfig() stateConfig {
	return stateConfig{backend: HeapStateBackend, cacheSize: DefaultStateBlockCacheSize}
}

func (c *stateConfig) validate() error {
	var errs []error
	if _, err := ParseStateBackend(string(c.backend)); err != nil {
		errs = append(errs, invalidGraph("%v", err))
	} else if c.backend != PebbleStateBackend && (c.dirSet || c.cacheSet) {
		errs = append(errs, invalidGraph("WithStateDir and WithStateBlockCacheSize apply to the pebble state backend; add WithStateBackend(PebbleStateBackend) or drop them"))
	}
	if c.dirSet && c.dir == "" {
		errs = append(errs, invalidGraph("state directory is empty; give a local directory or drop WithStateDir"))
	}
	if c.cacheSize <= 0 {
		errs = append(errs, invalidGraph("state block cache size must be > 0 bytes, got %d", c.cacheSize))
	}
	return errors.Join(errs...)
}

// workDir is where the pebble backend's DBs live.
func (c *stateConfig) workDir() string {
	if c.dirSet {
		return c.dir
	}
	return defaultStateDir()
}

// WithStateBackend chooses where keyed state lives. Default
// HeapStateBackend. A checkpoint taken with the heap backend restores into
// the pebble backend (the state is loaded into the DB as each state is
// declared); one taken with pebble restores only into pebble.
func WithStateBackend(b StateBackend) Option {
	return optionFunc(func(c *config) { c.state.backend = b })
}

// WithStateDir sets the local working directory of the pebble backend
// (Flink's state.backend.rocksdb.localdir). Each run of a job makes a
// directory of its own inside it and removes it when it ends; one left by
// a process that was killed is removed by the next job that starts with
// the same directory. Checkpoints never read it: a restore makes the DBs
// anew from checkpoint storage. Default: splitflow-state-<uid> in the OS
// temp directory, one per user; a job refuses it when it is a link or
// another user's directory, and closes it to group and others.
func WithStateDir(dir string) Option {
	return optionFunc(func(c *config) { c.state.dir, c.state.dirSet = dir, true })
}

// WithStateBlockCacheSize sets the size in bytes of the pebble backend's
// block cache, shared by all the job's keyed subtasks (Flink's
// state.backend.rocksdb.block.cache-size, shared as with managed memory).
// With the memtables (16 MiB each, at most two per subtask) and the write
// buffers it bounds the backend's memory whatever the size of the state.
// Default DefaultStateBlockCacheSize (64 MiB).
func WithStateBlockCacheSize(bytes int64) Option {
	return optionFunc(func(c *config) { c.state.cacheSize, c.state.cacheSet = bytes, true })
}
