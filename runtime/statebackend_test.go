package runtime

import (
	"testing"

	"github.com/splitflow/splitflow/runtime/state"
)

// stateBackends are the backends every keyed-state test runs against.
var stateBackends = []backendKind{kindHeap, kindPebble}

// forEachStateBackend runs f once per backend, with the option that
// chooses it (and, for pebble, a working directory of the test's own with
// a small write buffer, so that tests reach the DB and not only the
// buffer).
// withBackend is the option that chooses backend kind k, with its
// defaults.
func withBackend(k backendKind) Option {
	if k == kindPebble {
		return WithStateBackend(state.Pebble(""))
	}
	return WithStateBackend(state.Heap())
}

func forEachStateBackend(t *testing.T, f func(t *testing.T, backend Option)) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			opt := withBackend(b)
			if b == kindPebble {
				dir := t.TempDir()
				opt = optionFunc(func(c *config) {
					c.state.backend = b
					c.state.dir, c.state.dirSet = dir, true
					c.state.bufferEntries = 8
				})
			}
			f(t, opt)
		})
	}
}
