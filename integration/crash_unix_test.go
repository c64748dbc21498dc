//go:build unix

package integration

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The job runs as a child process that is SIGKILLed at seeded random moments
// and started again with the same checkpoint directory and flags; a last
// run goes to the end. The committed output holds every id once.
func TestProcessKilledAndRestarted(t *testing.T) {
	t.Parallel() // its runs mostly wait on the broker and their lease, on topics of their own
	b := kafkatest.Get(t)
	bin := buildIDJob(t)
	const n, kills = 60000, 5
	input := b.CreateTopic(t, "crash-in", 3, nil)
	output := b.CreateTopic(t, "crash-out", 3, nil)
	ids := idRange(0, n)
	writeIDs(t, b, input, ids, modulo(3))
	args := childArgs(b, input, output, output+"-txn", t.TempDir(), "--checkpoint-interval", "100ms", "--pace", "5")

	rng := rand.New(rand.NewPCG(7, 11))
	var slowest time.Duration
	for i := 0; i < kills; i++ {
		c := startChild(t, bin, args...)
		after := time.Duration(300+rng.IntN(1500)) * time.Millisecond
		select {
		case <-c.exited:
			t.Fatalf("run %d ended by itself before its kill at %s (%v); give the job more input\n%s", i+1, after, c.err, c.stderrText())
		case <-time.After(after):
		}
		c.kill()
		rec, ok := c.recovery()
		if i > 0 && ok {
			slowest = max(slowest, rec)
		}
		first := "no checkpoint yet"
		if ok {
			first = "first checkpoint after " + rec.Round(time.Millisecond).String()
		}
		t.Logf("run %d: SIGKILL after %s (%s)", i+1, after, first)
	}
	last := startChild(t, bin, args...)
	last.wait(3 * time.Minute)
	rec, _ := last.recovery()
	slowest = max(slowest, rec)
	t.Logf("run %d: finished after %s", kills+1, time.Since(last.began).Round(time.Millisecond))
	report(t, fmt.Sprintf("process SIGKILLed %d times", kills), kills+1, n, countIDs(t, b, output, ids), slowest)
}

// A process killed with its transactions open leaves read_committed
// consumers of the output pinned; the restarted job aborts what it left
// open at start, so consumers move on promptly, and the output stays exact.
func TestLingeringTransactionsAfterKill(t *testing.T) {
	b := kafkatest.Get(t)
	bin := buildIDJob(t)
	const n = 30000
	input := b.CreateTopic(t, "linger-in", 2, nil)
	output := b.CreateTopic(t, "linger-out", 2, nil)
	ids := idRange(0, n)
	writeIDs(t, b, input, ids, modulo(2))
	// Checkpoints far apart: the sink's transactions stay open for seconds.
	args := childArgs(b, input, output, output+"-txn", t.TempDir(), "--checkpoint-interval", "1500ms", "--pace", "5")
	adm := b.Admin(t)

	// Kill once a checkpoint has completed and the next transactions hold
	// records, halfway to the next checkpoint. A commit still on its way
	// when the process dies completes on the broker, so what is left open
	// is measured a second after the kill; should nothing be left, the
	// next run is killed instead.
	var mark map[int32]int64
	runs := 1
	for attempt := 1; mark == nil; attempt++ {
		if attempt > 3 {
			t.Fatalf("%d kills left no transaction open on %s", attempt-1, output)
		}
		c := startChild(t, bin, args...)
		killMidInterval(t, c, adm, output)
		time.Sleep(time.Second)
		if lso, hwm := offsets(t, adm, output); pinned(lso, hwm) {
			mark = hwm
		} else {
			t.Logf("kill %d left nothing open (last stable %v = high watermark); killing the next run", attempt, lso)
		}
		runs++
	}
	// Nothing but the restarted job ends those transactions (the sink's
	// transaction timeout is 15 minutes).
	time.Sleep(time.Second)
	if lso, _ := offsets(t, adm, output); !pinned(lso, mark) {
		t.Fatalf("the open transactions ended without a restart: last stable %v, high watermark after the kill %v", lso, mark)
	}

	restarted := startChild(t, bin, args...)
	var unpinned time.Duration
	for {
		lso, _ := offsets(t, adm, output)
		if !pinned(lso, mark) {
			unpinned = time.Since(restarted.began)
			break
		}
		if time.Since(restarted.began) > 30*time.Second {
			t.Fatalf("read_committed consumers still pinned 30s after the restart: last stable %v, high watermark after the kill %v", lso, mark)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("last stable offsets passed the kill's high watermark %s after the restart began", unpinned.Round(time.Millisecond))
	if unpinned > 10*time.Second {
		t.Errorf("read_committed consumers were pinned for %s after the restart, want < 10s", unpinned)
	}
	restarted.wait(3 * time.Minute)
	report(t, "lingering transactions after SIGKILL", runs, n, countIDs(t, b, output, ids), unpinned)
}

// killMidInterval SIGKILLs c halfway between two checkpoints, once one has
// completed and the output holds records of transactions still open.
func killMidInterval(t *testing.T, c *child, adm *kadm.Client, output string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no open transaction on %s after a checkpoint within 60s\n%s", output, c.stderrText())
		}
		select {
		case <-c.exited:
			t.Fatalf("the job ended before it could be killed with open transactions (%v); give it more input\n%s", c.err, c.stderrText())
		default:
		}
		since, ok := c.sinceCheckpoint()
		if ok && since > 500*time.Millisecond && since < 900*time.Millisecond {
			if lso, hwm := offsets(t, adm, output); pinned(lso, hwm) {
				c.kill()
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
