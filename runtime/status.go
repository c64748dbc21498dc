package runtime

import (
	"github.com/splitflow/splitflow/runtime/status"
)

// Status returns a snapshot of the job; safe from any goroutine, before,
// during and after Execute. Task counters are published by the tasks
// every 200ms (observe.PublishInterval) and when they exit, so a running task's
// may lag by that much; after Execute returns they are exact.
func (env *Environment) Status() status.Job {
	return env.observer().Status()
}
