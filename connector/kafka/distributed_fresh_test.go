package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
)

// A distributed job started fresh (a new checkpoint root) under a job
// name an earlier run used reads none of that run's shuffle records. The
// earlier run counts the words of one topic and stops with its last
// checkpoint's shuffle records committed and unpurged (purge off: the
// topic keeps what a stopped job may need); the new run counts the words
// of another topic into another output, and each word's counts there
// are 1..30 once each. The job's start record holds the shuffle topics'
// ends as the first process found them, and a slot that restores no
// position of its own starts there. Before, the new run's slots read the
// shuffle topics from their earliest offsets, counted the earlier run's
// words into their keyed state, and every count went above 30.
func TestFreshDistributedJobNeverReadsAnEarlierRunsShuffleRecords(t *testing.T) {
	m := newMigration(t)
	m.shuffleOpts = []ShuffleOption{WithShufflePurgeInterval(-1)}
	m.produce(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.process(ctx, 0, runtime.WithCheckpointInterval(100*time.Millisecond))
	m.waitFor(migrationHalf)
	cancel()
	m.wait()

	// The same job name, a new checkpoint root, new input and output.
	m.in, m.out, m.dir, m.batches = "words-again", "counts-again", t.TempDir(), 0
	for _, topic := range []string{m.in, m.out} {
		if resp, err := kadm.NewClient(m.cl).CreateTopic(context.Background(), 3, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	m.produce(0)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	for p := range 2 {
		m.process(ctx, p, runtime.WithCheckpointInterval(100*time.Millisecond))
	}
	m.waitFor(migrationHalf)
	cancel()
	m.wait()
	m.exact()
}
