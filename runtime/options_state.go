package runtime

import (
	"errors"

	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/state"
)

// backendKind names a backend as flags, test names and errors give it.
type backendKind string

const (
	kindHeap   backendKind = "heap"
	kindPebble backendKind = "pebble"
)

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
	return stateConfig{backend: kindHeap, cacheSize: defaultBlockCacheSize()}
}

func (c *stateConfig) validate() error {
	var errs []error
	switch c.backend {
	case kindHeap:
	case kindPebble:
		if c.cacheSize <= 0 {
			errs = append(errs, invalidGraph("state block cache size must be > 0 bytes, got %d (state.PebbleBlockCacheSize)", c.cacheSize))
		}
	default:
		errs = append(errs, invalidGraph("unknown state backend %q; use state.Heap or state.Pebble", c.backend))
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
// Default state.Heap(). A checkpoint taken with the heap backend restores
// into the pebble backend (the state is loaded into the DB as each state
// is declared); one taken with pebble restores only into pebble.
func WithStateBackend(b state.Backend) Option {
	return optionFunc(func(c *config) {
		c.state.backend, c.state.dir, c.state.dirSet, c.state.cacheSize = backendKind(b.String()), b.Dir(), b.Dir() != "", b.BlockCacheSize()
		if c.state.backend == kindHeap {
			c.state.cacheSize = defaultBlockCacheSize()
		}
	})
}

// defaultBlockCacheSize is the pebble backend's block cache unless
// state.PebbleBlockCacheSize says otherwise.
func defaultBlockCacheSize() int64 { return state.Pebble("").BlockCacheSize() }
