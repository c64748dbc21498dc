package goroutine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Rule: ID tells goroutines apart and stays the same within one.
func TestIDIsTheCallingGoroutines(t *testing.T) {
	id := ID()
	if id == 0 || ID() != id {
		t.Fatalf("ID() = %d then %d; want the same non-zero id twice", id, ID())
	}
	other := make(chan int64)
	go func() { other <- ID() }()
	if o := <-other; o == 0 || o == id {
		t.Fatalf("another goroutine's ID() = %d, this one's %d; want a different non-zero id", o, id)
	}
}

// Rule: Stack finds a waiting goroutine by its id and shows where it
// waits, and says so when the goroutine is gone.
func TestStackShowsWhereAGoroutineWaits(t *testing.T) {
	ids, release := make(chan int64), make(chan struct{})
	go func() {
		ids <- ID()
		waitHere(release)
	}()
	id := <-ids
	defer close(release)
	var s string
	for i := 0; i < 500 && !strings.Contains(s, "waitHere"); i++ {
		s = Stack(id) // the goroutine may not have reached waitHere yet
		time.Sleep(time.Millisecond)
	}
	if !strings.HasPrefix(s, fmt.Sprintf("goroutine %d [", id)) || !strings.Contains(s, "waitHere") {
		t.Fatalf("Stack(%d) = %q; want its header and waitHere", id, s)
	}
	if s := Stack(1 << 40); !strings.Contains(s, "not found") {
		t.Fatalf("Stack of no goroutine = %q; want it not found", s)
	}
	if s := Stack(0); s != "(stack unknown)" {
		t.Fatalf("Stack(0) = %q", s)
	}
}

//go:noinline
func waitHere(c chan struct{}) { <-c }
