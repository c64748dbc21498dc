package runtime

import "testing"

// stateBackends are the backends every keyed-state test runs against.
var stateBackends = []StateBackend{HeapStateBackend, PebbleStateBackend}

// forEachStateBackend runs f once per backend, with the option that
// chooses it (and, for pebble, a working directory of the test's own with
// a small write buffer, so that tests reach the DB and not only the
// buffer).
func forEachStateBackend(t *testing.T, f func(t *testing.T, backend Option)) {
	for _, b := range stateBackends {
		t.Run(string(b), func(t *testing.T) {
			opt := WithStateBackend(b)
			if b == PebbleStateBackend {
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
