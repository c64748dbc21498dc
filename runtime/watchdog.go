package runtime

import (
	"errors"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/goroutine"
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
			Timeout: ex.cfg.cancelTimeout, Stack: goroutine.Stack(t.goroutine.Load())}
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
