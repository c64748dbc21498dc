package runtime

import (
	"bytes"
	"errors"
	"fmt"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"
)

// The cancellation watchdog (Flink's task.cancellation.timeout). A restart
// waits for every cancelled task to exit, and Execute returns only when no
// task is live; a task whose code ignores cancellation would hold either
// forever. The master notes when it cancels each task; a task still live
// WithTaskCancellationTimeout later is abandoned: the job fails with a
// *TaskCancellationError carrying the goroutine's stack, and the master no
// longer waits for it. Its goroutine cannot be stopped from outside and is
// left running; when it ends at last, its exit is ignored.

// cancelled notes that t was cancelled now, unless it was already or has
// exited, and arms the watchdog. Master goroutine.
func (ex *execution) cancelled(t *task) {
	if ex.cfg.cancelTimeout <= 0 || t.exited || !t.cancelledAt.IsZero() {
		return
	}
	t.cancelledAt = time.Now()
	ex.cancelling = append(ex.cancelling, t)
	ex.armWatchdog()
}

// armWatchdog sets the watchdog for the earliest deadline of the tasks
// being cancelled, if it is not set already.
func (ex *execution) armWatchdog() {
	if ex.watchdogC != nil || len(ex.cancelling) == 0 {
		return
	}
	first := ex.cancelling[0].cancelledAt
	for _, t := range ex.cancelling[1:] {
		if t.cancelledAt.Before(first) {
			first = t.cancelledAt
		}
	}
	d := time.Until(first.Add(ex.cfg.cancelTimeout))
	if ex.watchdog == nil {
		ex.watchdog = time.NewTimer(d)
	} else {
		ex.watchdog.Reset(d)
	}
	ex.watchdogC = ex.watchdog.C
}

// exitedAfterCancel drops t from the tasks being cancelled.
func (ex *execution) exitedAfterCancel(t *task) {
	for i, c := range ex.cancelling {
		if c == t {
			ex.cancelling = append(ex.cancelling[:i], ex.cancelling[i+1:]...)
			return
		}
	}
}

// watchdogFired abandons every task whose cancellation is older than the
// timeout and fails the job with the first one's error (all of them
// joined).
func (ex *execution) watchdogFired(now time.Time) {
	ex.watchdogC = nil
	var stuck []*task
	keep := ex.cancelling[:0]
	for _, t := range ex.cancelling {
		if now.Sub(t.cancelledAt) >= ex.cfg.cancelTimeout {
			stuck = append(stuck, t)
		} else {
			keep = append(keep, t)
		}
	}
	ex.cancelling = keep
	var errs []error
	for _, t := range stuck {
		t.abandoned = true
		ex.live--
		if !ex.current(t) {
			ex.waitingExit--
		}
		err := &TaskCancellationError{Operator: t.name, UID: t.head.UID, Subtask: t.subtask,
			Timeout: ex.cfg.cancelTimeout, Stack: goroutineStack(t.goroutine.Load())}
		ex.log.Error("splitflow: a cancelled task did not exit in time; abandoning it and failing the job",
			"task", t.name, "subtask", t.subtask, "timeout", ex.cfg.cancelTimeout, "stack", err.Stack)
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		ex.abandon(errs)
	}
	ex.armWatchdog()
}

// abandon fails the job with the errors of abandoned tasks, also when it
// was already stopping for another reason (that one comes first).
func (ex *execution) abandon(errs []error) {
	err := errs[0]
	if len(errs) > 1 {
		err = errors.Join(errs...)
	}
	if ex.stopped {
		ex.err = errors.Join(ex.err, err)
	}
	failedWith(ex.obs, nil, err)
	ex.stop(err)
}

// currentGoroutineID is the id of the calling goroutine, from the first
// line of its stack ("goroutine 42 [running]:").
func currentGoroutineID() int64 {
	var buf [64]byte
	b := buf[:goruntime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		id, _ := strconv.ParseInt(string(b[:i]), 10, 64)
		return id
	}
	return 0
}

// stackExcerptLines is how many lines of a stuck goroutine's stack go into
// its error: the header and the innermost frames, where it waits.
const stackExcerptLines = 41

// goroutineStack returns the stack of goroutine id, cut to its innermost
// frames, from a dump of every goroutine.
func goroutineStack(id int64) string {
	if id == 0 {
		return "(stack unknown)"
	}
	buf := make([]byte, 64<<10)
	for {
		n := goruntime.Stack(buf, true)
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
