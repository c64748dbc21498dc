package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/txn"
)

// A typical failure, a writer fenced by a newer attempt under the same
// prefix, reads as the engine reports it with each prefix once: the
// engine names the operator and subtask, the sink says "kafka sink:", the
// pool "txn:". Before, it read "... subtask 0 failed: kafka sink: subtask
// 0: txn: transactional id ... (txn: producer fenced ...)".
func TestFencedWriterErrorNamesEachPrefixOnce(t *testing.T) {
	f, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	c := cluster{seeds: f.ListenAddrs(), fake: f}
	topic := c.topic(t)
	prefix := "prefix-once"
	old := writer(t, stringSink(t, c, topic, prefix))
	defer old.Close()
	write(t, old, "a")                                  // begins old's transaction, registering its id
	newer := writer(t, stringSink(t, c, topic, prefix)) // registers, so fences, every id
	defer newer.Close()
	// "a" may have been delivered before the fence, so a record of the
	// same transaction after it makes the refusal certain before the
	// commit.
	write(t, old, "b")

	// The refusal surfaces at the flush or, if the flush had nothing left
	// to wait for, at the prepare; the engine reports whichever comes.
	err = old.Flush(false)
	if err == nil {
		_, err = old.PrepareCommit(1)
	}
	if !errors.Is(err, txn.ErrFenced) {
		t.Fatalf("the fenced writer's Flush and PrepareCommit: %v, want an error wrapping txn.ErrFenced", err)
	}
	msg := (&runtime.OperatorError{Operator: "Sink: out", UID: "sink", Subtask: 0, Err: err}).Error()
	for _, line := range strings.Split(msg, "\n") {
		for _, prefix := range []string{"kafka sink:", "txn:", "subtask "} {
			if n := strings.Count(line, prefix); n != 1 {
				t.Errorf("%q says %q %d times, want once", line, prefix, n)
			}
		}
	}
}
