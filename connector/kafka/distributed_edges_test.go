package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A distributed job's rebalance and broadcast edges cross the Kafka
// shuffle exactly once: after Rebalance every input value reaches one
// slot, spread over all of them; after Broadcast every value reaches
// every slot once. Read with read_committed from the job's exactly-once
// sinks, each value tagged with the slot that received it.
func TestDistributedRebalanceAndBroadcastAreExact(t *testing.T) {
	const in, spreadOut, allOut, job, slots, n = "values", "spread", "everywhere", "edges", 3, 300
	seeds, cl := distributedCluster(t, in, spreadOut, allOut)
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: in, Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%03d", i)})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	sh, err := NewShuffle(WithShuffleSinkOptions(WithBrokers(seeds...), WithLogger(quietLogger())),
		WithShuffleSourceOptions(WithBrokers(seeds...), WithLogger(quietLogger())))
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnvironment(
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithLogger(quietLogger()),
		runtime.WithDistributed(runtime.Distributed{Job: job, Slots: slots, Shuffle: sh,
			Cluster: Connect(WithBrokers(seeds...)), SessionTimeout: 2 * time.Second}))
	src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(in), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	values := runtime.FromSource(env, src, "values").UID("values")
	tag := func(ds runtime.DataStream[string], uid, topic string) {
		tagged := runtime.Process(ds, func(ctx *runtime.ProcessContext[string], v string) error {
			ctx.Collect(fmt.Sprintf("%s s%d", v, ctx.SubtaskIndex()))
			return nil
		}).UID(uid)
		sink, err := NewSink(KeyValueSerializer(topic, func(v string) ([]byte, []byte, error) { return nil, []byte(v), nil }),
			WithBrokers(seeds...), WithExactlyOnce(topic), WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		runtime.SinkTo(tagged, connector.Sink[string](sink)).UID(topic)
	}
	tag(runtime.Rebalance(values), "tag-spread", spreadOut)
	tag(runtime.Broadcast(values), "tag-everywhere", allOut)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, job) }()
	count := func(topic string) int {
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		recs, err := committed.Visible(rctx, seeds, topic, 20*time.Millisecond)
		if err != nil {
			return -1
		}
		return len(recs)
	}
	deadline := time.Now().Add(90 * time.Second)
	for count(spreadOut) < n || count(allOut) < n*slots {
		select {
		case err := <-done:
			t.Fatalf("the job ended before its output was visible: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("output not visible within 90s: %d of %d spread, %d of %d broadcast", count(spreadOut), n, count(allOut), n*slots)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("execute: %v", err)
	}

	read := func(topic string) (perValue map[string][]int, perSlot map[int]int) {
		perValue, perSlot = map[string][]int{}, map[int]int{}
		for _, r := range kafkatest.ReadCommitted(t, seeds, topic, 30*time.Second) {
			var v string
			var s int
			if _, err := fmt.Sscanf(string(r.Value), "%s s%d", &v, &s); err != nil {
				t.Fatalf("%s: %q: %v", topic, r.Value, err)
			}
			perValue[v] = append(perValue[v], s)
			perSlot[s]++
		}
		return perValue, perSlot
	}
	var bad []string
	spread, spreadSlots := read(spreadOut)
	all, _ := read(allOut)
	for i := range n {
		v := fmt.Sprintf("v%03d", i)
		if len(spread[v]) != 1 {
			bad = append(bad, fmt.Sprintf("%s reached slots %v after Rebalance, want one", v, spread[v]))
		}
		if got := fmt.Sprint(slices.Sorted(slices.Values(all[v]))); got != "[0 1 2]" {
			bad = append(bad, fmt.Sprintf("%s reached slots %s after Broadcast, want [0 1 2]", v, got))
		}
	}
	if len(spread) != n || len(all) != n {
		bad = append(bad, fmt.Sprintf("%d and %d distinct values, want %d", len(spread), len(all), n))
	}
	for s := range slots {
		// Each slot reads one input partition (n/3 values) and deals it
		// round robin over the 3 slots.
		if spreadSlots[s] < n/slots-slots || spreadSlots[s] > n/slots+slots {
			bad = append(bad, fmt.Sprintf("slot %d received %d values after Rebalance, want about %d", s, spreadSlots[s], n/slots))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d problems (read_committed):\n%s", len(bad), strings.Join(bad[:min(len(bad), 20)], "\n"))
	}
}

// distributedCluster starts kfake with a group session timeout low enough
// for distributed jobs and creates topics of 3 partitions on it; the
// client writes to the partitions its records name.
func distributedCluster(t *testing.T, topics ...string) ([]string, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for _, topic := range topics {
		if resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	return seeds, cl
}
