package kafka

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
)

// Rule (a bounded source ends): splits restored from a checkpoint or
// savepoint of an unbounded job carry no stopping offset; a bounded
// source (WithBounded) given them stops each at the offset its stopping
// initializer resolves as of the restore, so the job ends, and a
// checkpoint taken after the restore records that stop, so a second
// restore ends at the same place. Records written after the restore are
// left for a later job.
func TestBoundedSourceRestoredFromUnboundedSplitsEnds(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceValues(t, cl, "t", 0, 0, 30)
	produceValues(t, cl, "t", 1, 100, 120)
	src := newTestSource(t, StringValues(), c.ListenAddrs(), WithBounded(LatestOffsets()))
	// As the unbounded job checkpointed them: read up to 10 and 5.
	restored := []Split{NewSplit(TopicPartition{"t", 0}, 10, NoStoppingOffset), NewSplit(TopicPartition{"t", 1}, 5, NoStoppingOffset)}
	r := newTestReader(t, src, restored)
	r.NotifyNoMoreSplits()
	produceValues(t, cl, "t", 0, 30, 40) // after the restore: not this job's

	snap, err := r.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(snap, func(a, b Split) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	if len(snap) != 2 || snap[0].StoppingOffset != 30 || snap[1].StoppingOffset != 20 {
		t.Errorf("restored splits checkpointed as %v, want stops at the end offsets as of the restore (30 and 20)", snap)
	}

	out := &collect[string]{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatal(err)
		}
		if st == connector.EndOfInput {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a bounded source given splits without a stopping offset (from an unbounded job's checkpoint) never ended: %d records read, it reads on to the splits' own end, which they have none of", len(out.recs))
		}
		if st == connector.NothingAvailable {
			select {
			case <-r.Available():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	var want []string
	for i := 10; i < 30; i++ {
		want = append(want, strconv.Itoa(i))
	}
	for i := 105; i < 120; i++ {
		want = append(want, strconv.Itoa(i))
	}
	got := slices.Clone(out.recs)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read %q, want every record from the restored offsets to the end offsets as of the restore %q", got, want)
	}
}
