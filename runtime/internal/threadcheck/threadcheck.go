// Package threadcheck is a test helper of the engine's packages: a check
// that methods meant for one goroutine (a split enumerator's, which the
// source coordinator runs) neither overlap nor run on different
// goroutines.
package threadcheck

import (
	"fmt"
	"sync"

	"github.com/splitflow/splitflow/runtime/internal/goroutine"
)

// Check records the calls that Enter brackets. The zero value is ready.
type Check struct {
	mu        sync.Mutex
	inside    bool
	goroutine int64
	violation string
	calls     int
}

// Enter marks the start of a call; the returned function marks its end.
func (c *Check) Enter() func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := goroutine.ID()
	c.calls++
	if c.inside && c.violation == "" {
		c.violation = "two enumerator methods overlapped"
	}
	if c.goroutine == 0 {
		c.goroutine = id
	} else if c.goroutine != id && c.violation == "" {
		c.violation = fmt.Sprintf("enumerator method ran on goroutine %d, earlier ones on %d", id, c.goroutine)
	}
	c.inside = true
	return func() {
		c.mu.Lock()
		c.inside = false
		c.mu.Unlock()
	}
}

// Violation is the first violation seen, "" for none.
func (c *Check) Violation() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.violation
}

// Calls is how many calls Enter saw.
func (c *Check) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}
