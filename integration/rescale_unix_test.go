//go:build unix

package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
)

// A run ends right after a checkpoint completed, before its sinks commit,
// so that checkpoint holds a prepared transaction of every sink subtask;
// the next run restores it at a lower parallelism. Old subtask i's
// committables go to new subtask i % p while the cleanup of old subtasks'
// lingering transactions runs concurrently on another subtask: every
// restored transaction must still commit, and the output hold every id
// once.
func TestScaleDownCommitsEveryRestoredTransaction(t *testing.T) {
	t.Parallel() // its runs mostly wait on checkpoints and their lease, on topics of their own
	b := kafkatest.Get(t)
	bin := buildIDJob(t)
	for _, pars := range [][]int{{4, 2}, {4, 3, 1}} {
		var names []string
		for _, p := range pars {
			names = append(names, strconv.Itoa(p))
		}
		name := strings.Join(names, "-to-")
		t.Run(name, func(t *testing.T) {
			const n = 30000
			input := b.CreateTopic(t, "rescale-in-"+name, 4, nil)
			output := b.CreateTopic(t, "rescale-out-"+name, 4, nil)
			ids := idRange(0, n)
			writeIDs(t, b, input, ids, modulo(4))
			dir := t.TempDir()
			for i, p := range pars {
				args := childArgs(b, input, output, output+"-txn", dir,
					"--checkpoint-interval", "100ms", "--pace", "5", "--parallelism", strconv.Itoa(p))
				if i == len(pars)-1 {
					c := startChild(t, bin, args...)
					c.wait(3 * time.Minute)
					t.Logf("run %d at parallelism %d: finished after %s", i+1, p, time.Since(c.began).Round(time.Millisecond))
					break
				}
				c := startChild(t, bin, append(args, "--exit-after-checkpoints", "3")...)
				c.waitStatus(4, 2*time.Minute)
				t.Logf("run %d at parallelism %d: ended after its third checkpoint, its transactions prepared, after %s",
					i+1, p, time.Since(c.began).Round(time.Millisecond))
			}
			report(t, fmt.Sprintf("rescale %s with prepared transactions", name), len(pars), n, countIDs(t, b, output, ids), 0)
		})
	}
}
