package kafka

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A distributed job's shuffle topics keep what a stopped job still needs
// and lose what no restore can need.
//
// Purge: the word count of the migration tests runs over three rounds of
// input on two processes of 3 slots; once a round is counted, every
// partition of the shuffle topic soon starts at or above where it ended
// after the round before (each slot's reader deletes below its completed
// checkpoint), so the topic holds about one round, however long the job
// runs. Before, nothing was ever deleted.
//
// Retention: the brokers keep records 1 ms unless a topic says otherwise
// (the input and output topics here keep theirs). A process counts a
// fourth round with checkpoints a minute apart, so that it is stopped
// before any but its final checkpoint: that checkpoint commits the
// round's shuffle records, which no reader's checkpoint has read. The
// broker then applies retention, and two processes started again count
// the round exactly: the shuffle topic was created with retention off.
// Before, the topic had the brokers' retention, and the stopped job's
// records were gone.
func TestShuffleTopicsKeepWhatAStoppedJobNeedsAndArePurgedOfTheRest(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"log.retention.ms": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	m := &migration{t: t, in: "words", out: "counts", dir: t.TempDir(), errs: make(chan error, 8),
		seeds: fake.ListenAddrs(), shuffleOpts: []ShuffleOption{WithShufflePurgeInterval(0)}}
	m.cl, err = kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.cl.Close)
	adm := kadm.NewClient(m.cl)
	keep := "-1"
	for _, topic := range []string{m.in, m.out} {
		if resp, err := adm.CreateTopic(context.Background(), 3, -1, map[string]*string{"retention.ms": &keep}, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	t.Cleanup(m.wg.Wait)

	shuffleTopics := func() []string {
		t.Helper()
		td, err := adm.ListTopics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var ts []string
		for _, name := range td.Names() {
			if strings.HasSuffix(name, ShuffleTopicSuffix) {
				ts = append(ts, name)
			}
		}
		sort.Strings(ts)
		if len(ts) == 0 {
			t.Fatal("no shuffle topic")
		}
		return ts
	}
	offsets := func(start bool, topics []string) map[string]int64 {
		t.Helper()
		list := adm.ListEndOffsets
		if start {
			list = adm.ListStartOffsets
		}
		l, err := list(context.Background(), topics...)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		l.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				t.Fatalf("%s-%d: %v", o.Topic, o.Partition, o.Err)
			}
			out[fmt.Sprintf("%s-%d", o.Topic, o.Partition)] = o.Offset
		})
		return out
	}

	ctx, cancel := context.WithCancel(context.Background())
	for p := range 2 {
		m.process(ctx, p, runtime.WithCheckpointInterval(100*time.Millisecond))
	}
	m.produce(0)
	m.waitFor(migrationHalf)
	topics := shuffleTopics()
	for round := 1; round < 3; round++ {
		before := offsets(false, topics)
		m.produce(round * migrationHalf)
		m.waitFor((round + 1) * migrationHalf)
		deadline := time.Now().Add(30 * time.Second)
		for {
			starts := offsets(true, topics)
			var behind []string
			for tp, end := range before {
				if starts[tp] < end {
					behind = append(behind, fmt.Sprintf("%s starts at %d, below %d", tp, starts[tp], end))
				}
			}
			if len(behind) == 0 {
				break
			}
			if time.Now().After(deadline) {
				sort.Strings(behind)
				t.Fatalf("round %d counted, and 30s later the shuffle topic still holds what every reader's completed checkpoint had passed before it (where each partition ended once round %d was counted):\n%s",
					round+1, round, strings.Join(behind, "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cancel()
	m.wait()

	rcs, err := adm.DescribeTopicConfigs(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if (c.Key == "retention.ms" || c.Key == "retention.bytes") && c.MaybeValue() != "-1" {
				t.Errorf("shuffle topic %s has %s=%s (%s); want -1", rc.Name, c.Key, c.MaybeValue(), c.Source)
			}
		}
	}

	// The fourth round: read by one process, crossing the shuffle only in
	// its final checkpoint.
	m.produce(3 * migrationHalf)
	ctx, cancel = context.WithCancel(context.Background())
	env := m.process(ctx, 0, runtime.WithCheckpointInterval(time.Minute))
	deadline := time.Now().Add(60 * time.Second)
	for read := int64(0); read < migrationHalf; {
		read = 0
		for _, ts := range env.Status().Tasks {
			if strings.HasPrefix(ts.Name, "Source: words") {
				read += ts.RecordsIn
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process read %d records of the fourth round in 60s, want %d", read, migrationHalf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	m.wait()
	starts, ends := offsets(true, topics), offsets(false, topics)
	unread := 0
	for tp := range ends {
		if ends[tp]-starts[tp] > 1 {
			unread++
		}
	}
	if unread == 0 {
		t.Fatalf("no shuffle partition holds records the stopped job has not read (starts %v, ends %v): the test shows nothing", starts, ends)
	}

	fake.ApplyRetention()
	if after := offsets(true, topics); fmt.Sprint(after) != fmt.Sprint(starts) {
		t.Errorf("the broker's retention moved the shuffle topics' starts from %v to %v", starts, after)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	for p := range 2 {
		m.process(ctx, p, runtime.WithCheckpointInterval(100*time.Millisecond))
	}
	m.waitFor(4 * migrationHalf)
	cancel()
	m.wait()
	m.exact()
}
