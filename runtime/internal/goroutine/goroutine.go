// Package goroutine reads what Go's runtime tells of goroutines through
// their stacks: the calling goroutine's id, and another's stack by id.
// The engine's watchdog names the goroutine of a task that does not end
// and shows where it waits; threadcheck, a test helper, checks that
// methods meant for one goroutine stay on it.
package goroutine

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// ID is the id of the calling goroutine, from the first line of its stack
// ("goroutine 42 [running]:"); 0 if that line cannot be read.
func ID() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		id, _ := strconv.ParseInt(string(b[:i]), 10, 64)
		return id
	}
	return 0
}

// stackExcerptLines is how many lines of a goroutine's stack Stack
// returns: the header and the innermost frames, where it waits.
const stackExcerptLines = 41

// Stack returns the stack of goroutine id, cut to its innermost frames,
// from a dump of every goroutine.
func Stack(id int64) string {
	if id == 0 {
		return "(stack unknown)"
	}
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	prefix := fmt.Sprintf("goroutine %d [", id)
	for _, block := range strings.Split(string(buf), "\n\n") {
		if !strings.HasPrefix(block, prefix) {
			continue
		}
		lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
		if len(lines) > stackExcerptLines {
			lines = append(lines[:stackExcerptLines], fmt.Sprintf("...(%d more lines)", len(lines)-stackExcerptLines))
		}
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("(goroutine %d not found: it exited meanwhile)", id)
}
