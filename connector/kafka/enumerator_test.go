package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// enumCtx is a single-threaded SplitEnumeratorContext: async work runs when
// the test calls run, on the test goroutine, so every step is explicit.
type enumCtx struct {
	parallelism int
	readers     map[int]connector.ReaderInfo
	assigned    map[int][]Split
	noMore      map[int]bool
	work        []connector.AsyncWork
	periodic    connector.AsyncWork
}

func newEnumCtx(par int) *enumCtx {
	return &enumCtx{parallelism: par, readers: map[int]connector.ReaderInfo{}, assigned: map[int][]Split{}, noMore: map[int]bool{}}
}

func (*enumCtx) Context() context.Context  { return context.Background() }
func (c *enumCtx) CurrentParallelism() int { return c.parallelism }
func (c *enumCtx) RegisteredReaders() map[int]connector.ReaderInfo {
	m := map[int]connector.ReaderInfo{}
	for k, v := range c.readers {
		m[k] = v
	}
	return m
}
func (c *enumCtx) AssignSplits(a connector.SplitsAssignment[Split]) error {
	for sub, ss := range a.Assignment {
		if _, ok := c.readers[sub]; !ok {
			return fmt.Errorf("subtask %d not registered", sub)
		}
		c.assigned[sub] = append(c.assigned[sub], ss...)
	}
	return nil
}
func (c *enumCtx) AssignSplit(s Split, sub int) error {
	return c.AssignSplits(connector.SplitsAssignment[Split]{Assignment: map[int][]Split{sub: {s}}})
}
func (c *enumCtx) SignalNoMoreSplits(sub int) error                         { c.noMore[sub] = true; return nil }
func (c *enumCtx) SendEventToSourceReader(int, connector.SourceEvent) error { return nil }
func (c *enumCtx) CallAsync(w connector.AsyncWork)                          { c.work = append(c.work, w) }
func (c *enumCtx) CallAsyncPeriodically(w connector.AsyncWork, _, _ time.Duration) {
	c.periodic = w
}
func (c *enumCtx) RunInCoordinatorThread(fn func() error) { _ = fn() }

// run performs the queued one-shot work, or one periodic run, and its
// continuation.
func (c *enumCtx) run(t *testing.T) {
	t.Helper()
	var w connector.AsyncWork
	if len(c.work) > 0 {
		w, c.work = c.work[0], c.work[1:]
	} else if c.periodic != nil {
		w = c.periodic
	} else {
		t.Fatal("no async work scheduled")
	}
	if then := w(context.Background()); then != nil {
		if err := then(); err != nil {
			t.Fatalf("continuation: %v", err)
		}
	}
}

func (c *enumCtx) all() []Split {
	var out []Split
	for _, ss := range c.assigned {
		out = append(out, ss...)
	}
	slices.SortFunc(out, func(a, b Split) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	return out
}

func fakeCluster(t *testing.T, topics map[string]int32) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for name, parts := range topics {
		if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), parts, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	return c, cl
}

func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("v")}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func testConfig(seeds []string, opts ...SourceOption) *sourceConfig {
	cfg := defaultSourceConfig()
	cfg.logger = slog.New(slog.DiscardHandler)
	WithBrokers(seeds...).apply(&cfg)
	// kgo answers metadata requests from a cache younger than this; tests
	// change topics between runs.
	WithClientOpts(kgo.MetadataMinAge(10 * time.Millisecond)).apply(&cfg)
	for _, o := range opts {
		o.apply(&cfg)
	}
	return &cfg
}

func startEnum(t *testing.T, cfg *sourceConfig, ctx *enumCtx, st EnumeratorState) *enumerator {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	e := newEnumerator(cfg, ctx, st)
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Every partition goes to its stable owner, each exactly once, across
// readers registering before and after discovery.
func TestEnumeratorAssignsEachPartitionToItsOwner(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"a": 5, "b": 3})
	ctx := newEnumCtx(3)
	ctx.readers[0] = connector.ReaderInfo{SubtaskIndex: 0}
	e := startEnum(t, testConfig(c.ListenAddrs(), WithTopics("a", "b")), ctx, EnumeratorState{})
	ctx.run(t)
	for _, sub := range []int{1, 2} {
		ctx.readers[sub] = connector.ReaderInfo{SubtaskIndex: sub}
		if err := e.AddReader(sub); err != nil {
			t.Fatal(err)
		}
	}
	all := ctx.all()
	if len(all) != 8 {
		t.Fatalf("assigned %d splits, want 8: %v", len(all), all)
	}
	for sub, ss := range ctx.assigned {
		for _, s := range ss {
			if ownerOf(s.TopicPartition, 3) != sub {
				t.Errorf("%s went to subtask %d, its owner is %d", s, sub, ownerOf(s.TopicPartition, 3))
			}
			if s.StartingOffset != 0 || s.Bounded() {
				t.Errorf("%s: want start 0 and no stop", s)
			}
		}
	}
	st, _ := e.SnapshotState(1)
	if len(st.Assigned) != 8 || len(st.Pending) != 0 {
		t.Fatalf("state after assigning all: %d assigned, %d pending", len(st.Assigned), len(st.Pending))
	}
}

func TestOwnerIsStable(t *testing.T) {
	// Pinned: a changed hash would move partitions between subtasks across
	// releases.
	for _, tc := range []struct {
		tp   TopicPartition
		par  int
		want int
	}{
		{TopicPartition{"lines", 0}, 2, ownerOf(TopicPartition{"lines", 0}, 2)},
	} {
		for i := 0; i < 3; i++ {
			if got := ownerOf(tc.tp, tc.par); got != tc.want {
				t.Fatalf("owner of %s changed: %d then %d", tc.tp, tc.want, got)
			}
		}
	}
	h := ownerOf(TopicPartition{"lines", 0}, 4)
	for p := int32(0); p < 8; p++ {
		if got, want := ownerOf(TopicPartition{"lines", p}, 4), (h+int(p))%4; got != want {
			t.Fatalf("partition %d of one topic on subtask %d, want consecutive placement %d", p, got, want)
		}
	}
	if got := ownerOf(TopicPartition{"lines", 0}, 2); got != 0 {
		t.Fatalf("owner of lines-0 at parallelism 2 is %d; it was 0 (fnv-1a)", got)
	}
}

// Partitions added to a topic and topics matching the regex, found while
// running, start at the earliest offset even when the configured start is
// latest.
func TestEnumeratorDiscoversNewPartitionsAndTopics(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"in-a": 1})
	produceN(t, cl, "in-a", 0, 3)
	ctx := newEnumCtx(1)
	ctx.readers[0] = connector.ReaderInfo{}
	startEnum(t, testConfig(c.ListenAddrs(), WithTopicRegex(regexp.MustCompile(`in-.*`)),
		WithStartingOffsets(LatestOffsets()), WithPartitionDiscoveryInterval(time.Second)), ctx, EnumeratorState{})
	ctx.run(t)
	if got := ctx.all(); len(got) != 1 || got[0].StartingOffset != 3 {
		t.Fatalf("initial discovery: %v, want in-a-0 from latest (3)", got)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreatePartitions(context.Background(), 2, "in-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "in-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "other"); err != nil {
		t.Fatal(err)
	}
	produceN(t, cl, "in-b", 0, 2)
	time.Sleep(20 * time.Millisecond) // past the client's metadata cache age
	ctx.run(t)
	got := ctx.all()
	want := []string{"in-a-0[3,)", "in-a-1[0,)", "in-a-2[0,)", "in-b-0[0,)"}
	var gs []string
	for _, s := range got {
		gs = append(gs, s.String())
	}
	if !slices.Equal(gs, want) {
		t.Fatalf("after discovery: %v, want %v", gs, want)
	}
	ctx.run(t) // nothing new: nothing assigned twice
	if len(ctx.all()) != 4 {
		t.Fatalf("a discovery run with nothing new assigned again: %v", ctx.all())
	}
}

// A bounded source resolves stopping offsets at discovery and signals no
// more splits once everything is assigned, also to readers that register
// late.
func TestEnumeratorBoundedSignalsNoMoreSplits(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"t": 2})
	produceN(t, cl, "t", 0, 4)
	ctx := newEnumCtx(2)
	ctx.readers[0] = connector.ReaderInfo{}
	e := startEnum(t, testConfig(c.ListenAddrs(), WithTopics("t"), WithBounded(LatestOffsets())), ctx, EnumeratorState{})
	ctx.run(t)
	if ctx.periodic != nil {
		t.Fatal("a bounded source scheduled periodic discovery")
	}
	// Subtask 0 already holds all it owns: it is signalled at once.
	if !ctx.noMore[0] {
		t.Fatalf("subtask 0 holds all it owns but got no signal")
	}
	ctx.readers[1] = connector.ReaderInfo{}
	if err := e.AddReader(1); err != nil {
		t.Fatal(err)
	}
	if !ctx.noMore[0] || !ctx.noMore[1] {
		t.Fatalf("no-more-splits signals: %v, want both", ctx.noMore)
	}
	for _, s := range ctx.all() {
		want := int64(0)
		if s.Partition == 0 {
			want = 4
		}
		if s.StoppingOffset != want {
			t.Errorf("%s: stopping offset %d, want %d", s, s.StoppingOffset, want)
		}
	}
}

// Splits of a failed subtask come back, are held in the enumerator's state
// (never in two places), and go to the owner when it registers again.
func TestEnumeratorAddSplitsBack(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 4})
	ctx := newEnumCtx(2)
	ctx.readers[0], ctx.readers[1] = connector.ReaderInfo{}, connector.ReaderInfo{SubtaskIndex: 1}
	e := startEnum(t, testConfig(c.ListenAddrs(), WithTopics("t")), ctx, EnumeratorState{})
	ctx.run(t)
	back := ctx.assigned[1]
	delete(ctx.readers, 1)
	ctx.assigned[1] = nil
	if err := e.AddSplitsBack(back, 1); err != nil {
		t.Fatal(err)
	}
	st, _ := e.SnapshotState(2)
	if len(st.Pending) != len(back) || len(st.Assigned) != 4-len(back) {
		t.Fatalf("state after AddSplitsBack: %d pending, %d assigned; want %d and %d", len(st.Pending), len(st.Assigned), len(back), 4-len(back))
	}
	ctx.readers[1] = connector.ReaderInfo{SubtaskIndex: 1}
	if err := e.AddReader(1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ctx.assigned[1], back) {
		t.Fatalf("re-registered subtask got %v, want %v", ctx.assigned[1], back)
	}
}

// A restored enumerator neither loses pending splits nor assigns known
// partitions again.
func TestEnumeratorRestore(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{"t": 3})
	st := EnumeratorState{
		Assigned:             []TopicPartition{{"t", 0}},
		Pending:              []Split{NewSplit(TopicPartition{"t", 1}, 42, NoStoppingOffset)},
		InitialDiscoveryDone: true,
	}
	ser := EnumeratorStateSerializer{}
	data, err := ser.Serialize(st)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := ser.Deserialize(ser.Version(), data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := newEnumCtx(1)
	ctx.readers[0] = connector.ReaderInfo{}
	startEnum(t, testConfig(c.ListenAddrs(), WithTopics("t"), WithPartitionDiscoveryInterval(time.Second)), ctx, st2)
	ctx.run(t)
	var gs []string
	for _, s := range ctx.all() {
		gs = append(gs, s.String())
	}
	if want := []string{"t-1[42,)", "t-2[0,)"}; !slices.Equal(gs, want) {
		t.Fatalf("after restore: %v, want %v", gs, want)
	}
}

// A deleted topic is logged and counted, not fatal.
func TestEnumeratorSurvivesDeletedTopic(t *testing.T) {
	c, cl := fakeCluster(t, map[string]int32{"keep": 1, "gone": 2})
	ctx := newEnumCtx(1)
	ctx.readers[0] = connector.ReaderInfo{}
	e := startEnum(t, testConfig(c.ListenAddrs(), WithTopicRegex(regexp.MustCompile(`keep|gone`)), WithPartitionDiscoveryInterval(time.Second)), ctx, EnumeratorState{})
	ctx.run(t)
	if _, err := kadm.NewClient(cl).DeleteTopics(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the client's metadata cache age
	ctx.run(t)
	if e.removedCount.Load() != 2 {
		t.Fatalf("removed partitions counted: %d, want 2", e.removedCount.Load())
	}
	st, _ := e.SnapshotState(1)
	if len(st.Assigned) != 1 || st.Assigned[0].Topic != "keep" {
		t.Fatalf("state after deletion: %+v", st)
	}
}

func TestEnumeratorMissingTopicFailsFirstDiscovery(t *testing.T) {
	c, _ := fakeCluster(t, map[string]int32{})
	ctx := newEnumCtx(1)
	startEnum(t, testConfig(c.ListenAddrs(), WithTopics("nope"), WithPartitionDiscoveryInterval(0)), ctx, EnumeratorState{})
	then := ctx.work[0](context.Background())
	err := then()
	if err == nil || !regexp.MustCompile(`topic "nope"`).MatchString(err.Error()) {
		t.Fatalf("discovery of a missing topic: %v", err)
	}
}

func TestSourceConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []SourceOption
		want string
	}{
		{"no brokers", []SourceOption{WithTopics("t")}, "no seed brokers"},
		{"no topics", []SourceOption{WithBrokers("x:1")}, "no topics"},
		{"both", []SourceOption{WithBrokers("x:1"), WithTopics("t"), WithTopicRegex(regexp.MustCompile("t"))}, "choose one"},
		{"committed without group", []SourceOption{WithBrokers("x:1"), WithTopics("t"), WithStartingOffsets(CommittedOffsets(ResetEarliest))}, "group id"},
	} {
		cfg := defaultSourceConfig()
		for _, o := range tc.opts {
			o.apply(&cfg)
		}
		err := cfg.validate()
		if err == nil || !regexp.MustCompile(regexp.QuoteMeta(tc.want)).MatchString(err.Error()) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestSplitSerializerRoundTrip(t *testing.T) {
	ser := SplitSerializer{}
	for _, s := range []Split{
		NewSplit(TopicPartition{"t", 0}, 0, NoStoppingOffset),
		NewSplit(TopicPartition{"a.b-c_d", 2147483647}, 1<<40, 1<<41),
	} {
		b, _ := ser.Serialize(s)
		got, err := ser.Deserialize(1, b)
		if err != nil || got != s {
			t.Fatalf("round trip of %s: %v, %v", s, got, err)
		}
		if _, err := ser.Deserialize(1, b[:len(b)-1]); err == nil {
			t.Fatalf("a truncated split decoded")
		}
	}
	if _, err := ser.Deserialize(2, nil); err == nil {
		t.Fatal("an unknown version decoded")
	}
}
