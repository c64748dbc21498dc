package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/shuffleop"
	"github.com/splitflow/splitflow/runtime/internal/slots"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
)

// recordingShuffle is a Shuffle whose sides are test connectors, and which
// remembers what it was asked for.
type recordingShuffle struct {
	sinks, sources []string
	partitions     []int
	owner          func(partition, parallelism int) int
}

func (s *recordingShuffle) Sink(ds DataStream[connector.ShuffleRecord], channel string, partitions int) DataStreamSink {
	s.sinks = append(s.sinks, channel)
	s.partitions = append(s.partitions, partitions)
	return SinkTo(ds, newCollectSink[connector.ShuffleRecord]()).UID("sink:" + channel)
}

func (s *recordingShuffle) Source(env *Environment, channel string, partitions int, owner func(partition, parallelism int) int) DataStream[connector.ShuffleRecord] {
	s.sources = append(s.sources, channel)
	s.owner = owner
	src := ownedMem[connector.ShuffleRecord]{&memSource[connector.ShuffleRecord]{numSplits: 1, perSplit: 0, gen: func(_, i int) (connector.ShuffleRecord, int64) { return connector.ShuffleRecord{}, 0 }}}
	return FromSource(env, src, "shuffle "+channel).UID("source:" + channel)
}

// kgoCluster is a connector.Cluster over franz-go options, as
// connector/kafka's Conn is (which runtime's tests cannot import): the
// metadata request of Conn.ClusterID, and the options as they are.
type kgoCluster []kgo.Opt

func (c kgoCluster) ClientOpts() ([]kgo.Opt, error) { return c, nil }

func (c kgoCluster) ClusterID(ctx context.Context) (string, error) {
	cl, err := kgo.NewClient(c...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	if resp.ClusterID == nil {
		return "", nil
	}
	return *resp.ClusterID, nil
}

func distEnv(t *testing.T, sh Shuffle, opts ...Option) *Environment {
	return NewEnvironment(append([]Option{
		WithCheckpointInterval(time.Second),
		WithCheckpointDir(t.TempDir()),
		WithDistributed(Distributed{Job: "orders", Slots: 4, Cluster: kgoCluster(nil), Shuffle: sh}),
	}, opts...)...)
}

// ownedMem is a memory source that says its splits have fixed owners; the
// tests that use it only build graphs or check refusals, and never read
// its splits in two slots.
type ownedMem[T any] struct{ *memSource[T] }

func (ownedMem[T]) SplitsOwnedBySubtask() bool { return true }

func countJob(env *Environment) {
	src := ownedMem[int]{&memSource[int]{numSplits: 2, perSplit: 10, gen: func(_, i int) (int, int64) { return i, 0 }}}
	words := Map(FromSource(env, src, "numbers").UID("numbers"), func(i int) (string, error) { return string(rune('a' + i%5)), nil })
	counts := Count(KeyBy(words, func(w string) string { return w })).UID("count")
	SinkTo(counts, newCollectSink[KV[string, int64]]()).UID("out")
}

// A distributed job's keyed edges become shuffles: slot i is then subtask
// i of every chain, a forward pipeline that runs and checkpoints alone.
// The channel of a keyed edge has one partition per slot: partition i
// holds the records of the key groups slot i owns, and subtask i reads it.
func TestDistributedCutsEveryKeyedEdgeIntoAShuffleOfAPartitionPerSlot(t *testing.T) {
	sh := &recordingShuffle{}
	env := distEnv(t, sh)
	countJob(env)
	var keyHash func(string) uint32
	for _, n := range env.nodes {
		if n.uid == "count" {
			keyHash = n.inputs[0].keyHash.(func(string) uint32)
		}
	}
	g := cutPointwise(t, env)
	if len(sh.sinks) != 1 || sh.sinks[0] != "orders.count" || len(sh.sources) != 1 || sh.sources[0] != "orders.count" {
		t.Fatalf("channels: sinks %v sources %v, want orders.count once each", sh.sinks, sh.sources)
	}
	if sh.partitions[0] != 4 {
		t.Fatalf("%d partitions, want one per slot (4)", sh.partitions[0])
	}
	var enc *node
	for _, n := range g.nodes {
		for _, e := range n.inputs {
			if e.kind != engine.PartitionForward {
				t.Fatalf("edge %s -> %s is %s", e.from, e.to, partitioningName(e.kind))
			}
		}
		if n.uid == "count" && (len(n.inputs) != 1 || n.inputs[0].from.uid != "shuffle-decode:orders.count") {
			t.Fatalf("the count reads %v, want the shuffle's decoding", n.inputs)
		}
		if n.par(&env.cfg) != 4 {
			t.Fatalf("%s runs %d subtasks, want one per slot", n, n.par(&env.cfg))
		}
		if n.uid == "shuffle-encode:orders.count" {
			enc = n
		}
	}
	for p := range 4 {
		if got := sh.owner(p, 4); got != p {
			t.Fatalf("partition %d read by subtask %d, want %d", p, got, p)
		}
	}
	// Every key's records go to the partition of the slot that owns its
	// key group, from whichever upstream subtask.
	for subtask := range 4 {
		batches := &winOut[connector.ShuffleRecord]{}
		op, in := enc.build(engine.OpInfo{Subtask: subtask}, 4, engine.Output[connector.ShuffleRecord](batches))
		var keys []string
		for i := range 200 {
			k := fmt.Sprintf("key-%d-%d", subtask, i)
			keys = append(keys, k)
			if err := in.(engine.Output[string]).Collect(k, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := op.EndInput(); err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, b := range batches.vals {
			// A decoding of its own reads each batch (and marker, which
			// decodes to no record): subtask 0, the one owner of b's
			// partition.
			dec := &winOut[string]{}
			owner := func(p, _ int) int {
				if p == int(b.Partition) {
					return 0
				}
				return 1
			}
			u := shuffleop.NewUnbatchOperator[string](engine.OpInfo{}, "orders.count", state.DefaultSerde[string]().Decode, dec, 4, 4, owner)
			if err := u.Collect(b, 0); err != nil {
				t.Fatal(err)
			}
			for _, k := range dec.vals {
				seen++
				if want := keygroup.Subtask(keygroup.ForHash(keyHash(k), keygroup.DefaultMaxParallelism), 4, keygroup.DefaultMaxParallelism); int(b.Partition) != want {
					t.Fatalf("key %q (key group %d) in partition %d, owned by slot %d", k, keygroup.ForHash(keyHash(k), keygroup.DefaultMaxParallelism), b.Partition, want)
				}
			}
		}
		if seen != len(keys) {
			t.Fatalf("subtask %d: %d of %d records in the batches", subtask, seen, len(keys))
		}
	}
}

// Rebalance and broadcast edges are cut too, each into a channel of one
// partition per slot that subtask i reads partition i of; a node with
// several cut inputs gets a channel for each.
func TestDistributedCutsRebalanceAndBroadcastEdgesIntoShuffles(t *testing.T) {
	sh := &recordingShuffle{}
	env := distEnv(t, sh)
	src := ownedMem[int]{&memSource[int]{numSplits: 2, perSplit: 10, gen: func(_, i int) (int, int64) { return i, 0 }}}
	in := FromSource(env, src, "numbers").UID("numbers")
	spread := Map(Rebalance(in), func(i int) (int, error) { return i, nil }).UID("spread")
	everywhere := Map(Broadcast(in), func(i int) (int, error) { return i, nil }).UID("everywhere")
	SinkTo(Union(spread, everywhere), newCollectSink[int]()).UID("out")
	g := cutPointwise(t, env)
	if fmt.Sprint(sh.sinks) != "[orders.spread orders.everywhere]" || fmt.Sprint(sh.sources) != fmt.Sprint(sh.sinks) {
		t.Fatalf("channels: sinks %v sources %v", sh.sinks, sh.sources)
	}
	for i, p := range sh.partitions {
		if p != 4 {
			t.Fatalf("channel %s has %d partitions, want one per slot", sh.sinks[i], p)
		}
	}
	for p := range 4 {
		if got := sh.owner(p, 4); got != p {
			t.Fatalf("partition %d read by subtask %d, want %d", p, got, p)
		}
	}
	for _, n := range g.nodes {
		for _, e := range n.inputs {
			if e.kind != engine.PartitionForward {
				t.Fatalf("edge %s -> %s is %s", e.from, e.to, partitioningName(e.kind))
			}
		}
	}
}

// A rebalance edge's encoding writes round robin, each subtask starting
// after its own index; a broadcast edge's writes every record to every
// partition.
func TestShuffleRebalanceAndBroadcastRouting(t *testing.T) {
	for _, c := range []struct {
		name string
		edge engine.PartitionKind
		want map[int32][]string
	}{
		{"rebalance", engine.PartitionRebalance, map[int32][]string{2: {"a", "d"}, 0: {"b", "e"}, 1: {"c"}}},
		{"broadcast", engine.PartitionBroadcast, map[int32][]string{0: {"a", "b", "c", "d", "e"}, 1: {"a", "b", "c", "d", "e"}, 2: {"a", "b", "c", "d", "e"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := distEnv(t, &recordingShuffle{}, WithDistributed(Distributed{Job: "j", Slots: 3, Cluster: kgoCluster(nil), Shuffle: &recordingShuffle{}}))
			src := ownedMem[string]{&memSource[string]{numSplits: 1, perSplit: 1, gen: func(_, i int) (string, int64) { return "", 0 }}}
			up := FromSource(env, src, "s")
			e := &edge{from: up.node, to: up.node, kind: c.edge}
			if _, err := (typeOpsFor[string]{}).cut(env, e, &recordingShuffle{}, "j.c", keygroup.DefaultMaxParallelism, 3); err != nil {
				t.Fatal(err)
			}
			var enc *node
			for _, n := range env.nodes {
				if n.uid == "shuffle-encode:j.c" {
					enc = n
				}
			}
			recs := &winOut[connector.ShuffleRecord]{}
			op, in := enc.build(engine.OpInfo{Subtask: 1}, 3, engine.Output[connector.ShuffleRecord](recs))
			for _, v := range []string{"a", "b", "c", "d", "e"} {
				if err := in.(engine.Output[string]).Collect(v, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := op.EndInput(); err != nil {
				t.Fatal(err)
			}
			got := map[int32][]string{}
			for _, r := range recs.vals {
				o := &winOut[string]{}
				dec := shuffleop.NewUnbatchOperator(engine.OpInfo{}, "j.c", state.DefaultSerde[string]().Decode, engine.Output[string](o), 3, 3, func(int, int) int { return 0 })
				if err := dec.Collect(r, 0); err != nil {
					t.Fatal(err)
				}
				got[r.Partition] = append(got[r.Partition], o.vals...)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("partitions got %v, want %v", got, c.want)
			}
		})
	}
}

// cutPointwise cuts env's job as Execute of a distributed job does and
// builds its graph, which must be pointwise.
func cutPointwise(t *testing.T, env *Environment) *jobGraph {
	t.Helper()
	env.cfg.parallelism = env.cfg.dist.Slots
	if err := env.cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if err := env.cutShuffles(); err != nil {
		t.Fatal(err)
	}
	g, err := buildJobGraph(env)
	if err != nil {
		t.Fatal(err)
	}
	if !g.pointwise() {
		t.Fatal("the cut job is not pointwise")
	}
	return g
}

type unexportedOnly struct{ n int }

// What a distributed job cannot carry yet is refused before anything
// runs, each problem named.
func TestDistributedRefusesWhatItCannotCarry(t *testing.T) {
	src := func() *memSource[int] {
		return &memSource[int]{numSplits: 1, perSplit: 1, gen: func(_, i int) (int, int64) { return i, 0 }}
	}
	owned := func() ownedMem[int] { return ownedMem[int]{src()} }
	for _, c := range []struct {
		name string
		opts []Option
		job  func(env *Environment)
		want string
	}{
		{"source", nil, func(env *Environment) {
			SinkTo(FromSource(env, src(), "s"), newCollectSink[int]())
		}, "splits to subtasks by a rule"},
		{"parallelism", nil, func(env *Environment) {
			SinkTo(Map(FromSource(env, owned(), "s"), func(i int) (int, error) { return i, nil }).Parallelism(2), newCollectSink[int]())
		}, "one subtask per slot"},
		{"type", nil, func(env *Environment) {
			m := Map(FromSource(env, owned(), "s"), func(i int) (unexportedOnly, error) { return unexportedOnly{i}, nil })
			SinkTo(Count(KeyBy(m, func(u unexportedOnly) int { return u.n })), newCollectSink[KV[int, int64]]())
		}, "cannot cross the shuffle"},
		{"no dir", []Option{WithCheckpointDir("")}, countJob, "no checkpoint directory"},
		{"no checkpoints", []Option{WithCheckpointInterval(0)}, countJob, "checkpoints are off"},
		{"job name", []Option{WithDistributed(Distributed{Job: "a.b", Shuffle: &recordingShuffle{}})}, countJob, "job"},
		{"no shuffle", []Option{WithDistributed(Distributed{Job: "x"})}, countJob, "no Shuffle"},
		{"slots", []Option{WithDistributed(Distributed{Job: "x", Slots: 500, Shuffle: &recordingShuffle{}})}, countJob, "exceed the max parallelism"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := distEnv(t, &recordingShuffle{}, c.opts...)
			c.job(env)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := env.Execute(ctx, "refused")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Execute: %v, want an invalid graph naming %q", err, c.want)
			}
		})
	}
}

// A slot's checkpoint holds its own subtask only. Restored, it is the
// state of that subtask at the job's parallelism, not of a smaller job:
// read as one, slot 1 of 3 had its source's splits dealt out to subtask 0
// and never read them.
func TestSlotCheckpointRestoresAtTheJobsParallelism(t *testing.T) {
	st, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	owner := checkpoint.OperatorOwner("lines", 1)
	h, err := w.WriteState(owner, []byte("split of slot 1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1, States: []checkpoint.StateHandle{h}}); err != nil {
		t.Fatal(err)
	}
	chk, err := st.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	rs := &engine.RestoredState{Chk: chk, Parallelism: 3}
	old, err := rs.Subtasks("lines")
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 3 || string(old[1]) != "split of slot 1" {
		t.Fatalf("restored %d subtasks %q, want slot 1's state as subtask 1 of 3", len(old), old)
	}
	if got := engine.ForSubtask(old, 1, 3); len(got) != 1 || string(got[0]) != "split of slot 1" {
		t.Fatalf("subtask 1 restores %q", got)
	}
}

// ownedRange is the range source in push mode, whose enumerator gives
// split K to subtask K mod parallelism.
type ownedRange struct{ *rangeSrc }

func (ownedRange) SplitsOwnedBySubtask() bool { return true }

// distributedRun runs a job of 2 slots reading an unbounded source into
// a sink, on the checkpoint root dir, as one process of job "logs" on the
// Kafka at seeds, until ctx ends.
func distributedRun(ctx context.Context, seeds []string, dir string) error {
	return distributedRunInto(ctx, seeds, dir, newCollectSink[int64]())
}

func distributedRunInto(ctx context.Context, seeds []string, dir string, sink connector.Sink[int64]) error {
	return distributedJob(seeds, dir, sink).Execute(ctx, "logs")
}

// distributedJob is the job distributedRunInto runs, not yet executed.
func distributedJob(seeds []string, dir string, sink connector.Sink[int64]) *Environment {
	env := NewEnvironment(
		WithCheckpointInterval(50*time.Millisecond),
		WithCheckpointDir(dir),
		WithLogger(slog.New(slog.DiscardHandler)),
		WithDistributed(Distributed{Job: "logs", Slots: 2, Shuffle: &recordingShuffle{},
			Cluster: kgoCluster{kgo.SeedBrokers(seeds...)}, SessionTimeout: 2 * time.Second}))
	// Pushed splits go to subtask K mod parallelism, a rule of the split
	// and the parallelism alone. Readers hold after 100 records each: the
	// job runs and checkpoints until ctx ends.
	src := ownedRange{&rangeSrc{splits: 2, perSplit: 1000, push: true, readerFailAt: -1, hold: func(v int64) bool { return v%1000 >= 100 }, release: make(chan struct{})}}
	SinkTo(FromSource(env, src, "numbers").UID("numbers"), sink).UID("out")
	return env
}

// groupCluster is a kfake cluster whose groups accept the short session
// timeouts of the distributed tests.
func groupCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// claimSink records the claim epoch each writer was created under, and
// the incarnations of the claims.
type claimSink struct {
	*collectSink[int64]
	mu           sync.Mutex
	epochs       map[int][]int64 // by subtask
	incarnations map[string]bool
}

func (s *claimSink) CreateWriter(ctx connector.SinkInitContext) (connector.SinkWriter[int64], error) {
	s.mu.Lock()
	var e int64 = -1
	if ci, ok := ctx.(connector.ClaimInfo); ok {
		e = ci.ClaimEpoch()
	}
	s.epochs[ctx.SubtaskIndex()] = append(s.epochs[ctx.SubtaskIndex()], e)
	if ci, ok := ctx.(connector.ClaimIncarnation); ok {
		if s.incarnations == nil {
			s.incarnations = map[string]bool{}
		}
		s.incarnations[ci.ClaimIncarnation()] = true
	}
	s.mu.Unlock()
	return s.collectSink.CreateWriter(ctx)
}

func (s *claimSink) seen() map[int][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.epochs)
}

// A sink in a slot learns the claim it writes under (connector.ClaimInfo),
// and a later owner's claim is newer: the Kafka sink names its
// transactions after it, so that an older owner that lives on cannot
// abort the newer one's. Every claim of the job under one checkpoint
// root is of one incarnation (connector.ClaimIncarnation), which the
// PostgreSQL sink compares claims within.
func TestSlotSinksWriteUnderTheirClaim(t *testing.T) {
	c := groupCluster(t)
	dir := t.TempDir()
	incarnations := map[string]bool{}
	run := func() map[int][]int64 {
		sink := &claimSink{collectSink: newCollectSink[int64](), epochs: map[int][]int64{}}
		defer func() {
			sink.mu.Lock()
			maps.Copy(incarnations, sink.incarnations)
			sink.mu.Unlock()
		}()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- distributedRunInto(ctx, c.ListenAddrs(), dir, sink) }()
		deadline := time.Now().Add(time.Minute)
		for len(sink.seen()) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("writers created in a minute: %v", sink.seen())
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return sink.seen()
	}
	first, second := run(), run()
	for slot := range 2 {
		if len(first[slot]) == 0 || len(second[slot]) == 0 {
			t.Fatalf("slot %d: writers under claims %v, then %v", slot, first[slot], second[slot])
		}
		a, b := slices.Max(first[slot]), slices.Min(second[slot])
		if a < 1 || b <= a {
			t.Fatalf("slot %d: the first process wrote under claims %v, the next under %v; want claims >= 1, the next one's newer", slot, first[slot], second[slot])
		}
	}
	if len(incarnations) != 1 || incarnations[""] {
		t.Fatalf("claims of one job under one root of incarnations %v, want one, named", slices.Collect(maps.Keys(incarnations)))
	}
}

// A slot whose ownership log is gone while its checkpoints remain is not
// started afresh (that would replay or lose what they committed): the
// process fails naming the slot. Before, the driver never told the
// ownership which checkpoints the storage held, and the slot started from
// nothing.
func TestDistributedSlotWhoseLogIsGoneIsRefused(t *testing.T) {
	c := groupCluster(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- distributedRun(ctx, c.ListenAddrs(), dir) }()
	// Both slots record checkpoints in their logs.
	deadline := time.Now().Add(time.Minute)
	for {
		a, _ := filepath.Glob(filepath.Join(dir, "logs", "slots", "0", "log", "records", "log-*"))
		b, _ := filepath.Glob(filepath.Join(dir, "logs", "slots", "1", "log", "records", "log-*"))
		if len(a) >= 3 && len(b) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots recorded %d and %d log records in a minute", len(a), len(b))
		}
		select {
		case err := <-done:
			t.Fatalf("the first run ended: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the first run: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "logs", "slots", "1", "log")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := distributedRun(ctx, c.ListenAddrs(), dir)
	if !errors.Is(err, slots.ErrLogMissing) || !strings.Contains(err.Error(), "slot 1") {
		t.Fatalf("second run: %v, want slot 1 refused with %v", err, slots.ErrLogMissing)
	}
	if ctx.Err() != nil {
		t.Fatal("the second run ran into its deadline")
	}
}

// A slot's execution that fails after another process claimed the slot
// does not restart: it reads the slot's log first, finds the newer claim,
// and the slot ends as taken over. Before, it restarted under its stale
// claim: its writers registered their ids again and opened transactions
// that nobody would commit, pinning read_committed readers until they
// were aborted.
func TestSlotRestartAfterANewerClaimEndsTheSlot(t *testing.T) {
	c := groupCluster(t)
	dir := t.TempDir()
	var logs statustest.LockedBuffer
	// No checkpoint is recorded meanwhile (the interval is long): only
	// the restart can find the newer claim.
	env := NewEnvironment(
		WithCheckpointInterval(time.Hour),
		WithCheckpointDir(dir),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithDistributed(Distributed{Job: "logs", Slots: 2, Shuffle: &recordingShuffle{},
			Cluster: kgoCluster{kgo.SeedBrokers(c.ListenAddrs()...)}, SessionTimeout: 2 * time.Second}))
	sink := newCollectSink[int64]()
	var created [2]atomic.Int32
	var fail atomic.Bool
	var wrote atomic.Int64
	sink.creating = func(sub int) error { created[sub].Add(1); return nil }
	sink.writeFn = func(sub int, v int64, _ connector.WriteContext) error {
		if sub != 1 {
			return nil
		}
		wrote.Add(1)
		if fail.CompareAndSwap(true, false) {
			return errors.New("injected write failure")
		}
		return nil
	}
	src := ownedRange{&rangeSrc{splits: 2, perSplit: 1 << 30, push: true, readerFailAt: -1, delay: time.Millisecond}}
	SinkTo(FromSource(env, src, "numbers").UID("numbers"), sink).UID("out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	deadline := time.Now().Add(time.Minute)
	for created[1].Load() == 0 || wrote.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot 1 wrote nothing in a minute\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Another process claims slot 1, as after this one was paused.
	st, err := checkpoint.OpenStorage(slots.LogPath(dir, "logs", 1))
	if err != nil {
		t.Fatal(err)
	}
	rs := st.(checkpoint.RecordStorage)
	recs, err := slots.LoadLog(rs)
	if err != nil || len(recs) == 0 {
		t.Fatalf("slot 1's log: %v, %v", recs, err)
	}
	top := slots.Decide(recs).Owner
	if err := slots.StoreRecord(rs, slots.Record{Seq: recs[len(recs)-1].Seq + 1, Kind: slots.Claim, Epoch: top.Epoch + 1, Generation: 1000, Member: "another"}); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)

	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "slot taken over") {
		if n := created[1].Load(); n > 1 {
			t.Fatalf("slot 1 restarted under its stale claim (%d writers)\n%s", n, logs.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot 1 neither restarted nor ended in 30s\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := created[1].Load(); n != 1 {
		t.Fatalf("slot 1 had %d writers, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Once a claim has recorded a checkpoint, the storages of the slot's
// older claims are never read again, and the claim removes them: a job
// whose slots change owners does not keep every owner's checkpoints.
func TestOlderClaimsStoragesAreRemovedOnceANewerOneRecords(t *testing.T) {
	c := groupCluster(t)
	dir := t.TempDir()
	epochs := func(slot int) []string {
		names, err := checkpoint.Children(slots.StoragePath(dir, "logs", slot))
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	run := func(until func() bool) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- distributedRun(ctx, c.ListenAddrs(), dir) }()
		deadline := time.Now().Add(time.Minute)
		for !until() {
			if time.Now().After(deadline) {
				t.Fatalf("not reached in a minute: slot 0 has %q, slot 1 %q", epochs(0), epochs(1))
			}
			select {
			case err := <-done:
				t.Fatalf("the run ended: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	recorded := func(epoch string) bool {
		for slot := range 2 {
			ids, err := checkpoint.OpenStorageForInspection(filepath.Join(slots.StoragePath(dir, "logs", slot), epoch))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := ids.List(); len(got) < 2 {
				return false
			}
		}
		return true
	}
	run(func() bool { return recorded("epoch-1") })
	run(func() bool {
		return slices.Equal(epochs(0), []string{"epoch-2", "log"}) && slices.Equal(epochs(1), []string{"epoch-2", "log"})
	})
	// The third owner restores from the second's checkpoints.
	run(func() bool {
		return slices.Equal(epochs(0), []string{"epoch-3", "log"}) && slices.Equal(epochs(1), []string{"epoch-3", "log"})
	})
}

// A slot revoked before its claim recorded a checkpoint is released at
// once, without waiting for a final checkpoint: it has nothing to hand
// over that the slot's restore point does not hold already, and the
// rebalance, so the process that joined, waits for the release. Here no
// checkpoint of the first process can complete (its sink's flush before
// every checkpoint blocks until the writer stops), as when a slot is
// revoked while its writers still start; before, the release waited for
// that final checkpoint, and the second process got no slot.
func TestSlotRevokedBeforeItsFirstRecordIsReleasedAtOnce(t *testing.T) {
	c := groupCluster(t)
	dir := t.TempDir()
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	first := newCollectSink[int64]()
	first.flushFn = func(_ int, ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return nil
		}
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- distributedRunInto(ctxA, c.ListenAddrs(), dir, first) }()
	deadline := time.Now().Add(time.Minute)
	for {
		first.mu.Lock()
		both := len(first.bySub[0]) > 0 && len(first.bySub[1]) > 0
		first.mu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first process's slots wrote nothing in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}

	second := newCollectSink[int64]()
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	doneB := make(chan error, 1)
	go func() { doneB <- distributedRunInto(ctxB, c.ListenAddrs(), dir, second) }()
	deadline = time.Now().Add(30 * time.Second)
	for second.Count() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the second process wrote %d records in 30s: the revoked slot was not released", second.Count())
		}
		select {
		case err := <-doneA:
			t.Fatalf("the first process ended: %v", err)
		case err := <-doneB:
			t.Fatalf("the second process ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The slot the second process took starts from nothing, as the first
	// process's copy did: its split's first 100 numbers again.
	second.mu.Lock()
	var got []int64
	for _, vs := range second.bySub {
		got = append(got, vs...)
	}
	second.mu.Unlock()
	slices.Sort(got)
	if len(got) != 100 || got[0]%1000 != 0 || got[99]%1000 != 99 {
		t.Fatalf("the second process wrote %d records, %v to %v; want one split's first 100", len(got), got[0], got[len(got)-1])
	}
	unblock()
	cancelB()
	if err := <-doneB; err != nil {
		t.Fatalf("the second process: %v", err)
	}
	cancelA()
	if err := <-doneA; err != nil {
		t.Fatalf("the first process: %v", err)
	}
}

// A savepoint of a distributed job is one savepoint of every slot, in the
// form of a job in one process at parallelism = slots: asked of a
// process (TriggerSavepoint, StopWithSavepoint, the status server's POST
// /api/v1/savepoints), every slot drains (its sources stop, its final
// checkpoint is recorded), one process merges the final checkpoints, and
// the slots go on (a trigger) or every process stops (Execute returns
// ErrStopped). Each savepoint restores in one process at another
// parallelism, the job's whole output then exact: every value once. A
// request without a target is refused, as in one process.
func TestDistributedSavepointIsOneSavepointOfEverySlotRestorableInOneProcess(t *testing.T) {
	c := groupCluster(t)
	sink := newCollectSink[int64]()
	env := distributedJob(c.ListenAddrs(), t.TempDir(), sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	deadline := time.Now().Add(time.Minute)
	for sink.Count() < 200 {
		if time.Now().After(deadline) {
			t.Fatal("the job wrote nothing in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := env.TriggerSavepoint(ctx, ""); !errors.Is(err, status.ErrSavepointRefused) {
		t.Fatalf("a savepoint without a target: %v; want it refused", err)
	}
	spCtx, spCancel := context.WithTimeout(ctx, time.Minute)
	defer spCancel()
	triggered, err := env.TriggerSavepoint(spCtx, t.TempDir())
	if err != nil {
		t.Fatalf("trigger: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended after a savepoint without stop: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	stopped, err := env.StopWithSavepoint(spCtx, t.TempDir())
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Execute after a stop with a savepoint: %v; want ErrStopped", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not stop in 30s after its savepoint")
	}
	before := sink.all()
	for _, sp := range []status.Savepoint{triggered, stopped} {
		rest := newCollectSink[int64]()
		one := NewEnvironment(WithParallelism(3), WithCheckpointInterval(50*time.Millisecond), WithCheckpointDir(t.TempDir()),
			WithRestoreFrom(sp.Path), WithLogger(slog.New(slog.DiscardHandler)))
		src := ownedRange{&rangeSrc{splits: 2, perSplit: 1000, push: true, readerFailAt: -1}}
		SinkTo(FromSource(one, src, "numbers").UID("numbers"), rest).UID("out")
		if err := one.Execute(context.Background(), "logs"); err != nil {
			t.Fatalf("the job in one process from %s: %v", sp.Path, err)
		}
		seen := map[int64]int{}
		for _, v := range append(slices.Clone(before), rest.all()...) {
			seen[v]++
		}
		for v := range int64(2000) {
			if seen[v] != 1 {
				t.Fatalf("from the savepoint %s (checkpoint %d): value %d written %d times; want once", sp.Path, sp.Checkpoint, v, seen[v])
			}
		}
		if len(seen) != 2000 {
			t.Fatalf("from the savepoint %s: %d values; want 2000", sp.Path, len(seen))
		}
	}
}

// MergeSlotEnumeratorStates is the range source's
// connector.SlotEnumeratorStateMerger: what slot i's enumerator holds
// pending for its own reader (split K to subtask K mod slots).
func (ownedRange) MergeSlotEnumeratorStates(states [][]*rSplit) ([]*rSplit, error) {
	var out []*rSplit
	for i, st := range states {
		for _, sp := range st {
			if sp.K%len(states) == i {
				out = append(out, sp)
			}
		}
	}
	return out, nil
}

// The status's checkpoint history of a distributed process names the slot
// of every checkpoint: each slot numbers its own, so checkpoint N of two
// slots is two entries, each with its own slot, never one entry that
// both slots' acknowledgements and ends were folded into.
func TestDistributedCheckpointHistoryIsPerSlot(t *testing.T) {
	c := groupCluster(t)
	sink := newCollectSink[int64]()
	env := distributedJob(c.ListenAddrs(), t.TempDir(), sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	perSlot := func() map[int][]int64 {
		ids := map[int][]int64{}
		for _, cp := range env.Status().Checkpoints.Recent {
			s := -1
			if cp.Slot != nil {
				s = *cp.Slot
			}
			if cp.Status == "completed" {
				ids[s] = append(ids[s], cp.ID)
			}
		}
		return ids
	}
	deadline := time.Now().Add(time.Minute)
	for ids := perSlot(); len(ids[0]) < 3 || len(ids[1]) < 3; ids = perSlot() {
		if time.Now().After(deadline) {
			t.Fatalf("completed checkpoints by slot after a minute: %v; want at least 3 of each of slots 0 and 1, and no entry without a slot", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ids := perSlot()
	if len(ids[-1]) > 0 {
		t.Fatalf("checkpoints %v have no slot", ids[-1])
	}
	for s, got := range ids {
		if len(got) != len(slices.Compact(slices.Clone(got))) {
			t.Fatalf("slot %d's checkpoints %v: an id listed twice", s, got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A process whose job ended runs no slot: once Execute returned (its
// slots drained, the process out of the group), its status lists none
// and its owned-slots gauge is 0, while the job's state says it ended.
func TestStoppedProcessListsNoSlots(t *testing.T) {
	c := groupCluster(t)
	env := distributedJob(c.ListenAddrs(), t.TempDir(), newCollectSink[int64]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "logs") }()
	deadline := time.Now().Add(time.Minute)
	for running := 0; running < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("slots running after a minute: %+v; want both", env.Status().Distributed)
		}
		time.Sleep(20 * time.Millisecond)
		running = 0
		if d := env.Status().Distributed; d != nil {
			for _, s := range d.Slots {
				if s.Running {
					running++
				}
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := env.Status()
	if st.Distributed == nil || len(st.Distributed.Slots) != 0 {
		t.Fatalf("the stopped process lists slots %+v (job state %q); want none", st.Distributed, st.State)
	}
	mfs, err := env.gatherer().Gather()
	owned := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "splitflow_slots_owned" {
			for _, m := range mf.GetMetric() {
				owned = m.GetGauge().GetValue()
			}
		}
	}
	if err != nil || owned != 0 {
		t.Fatalf("splitflow_slots_owned is %v after the process stopped (%v); want 0", owned, err)
	}
}

// writeTestCheckpoint writes checkpoint id in a directory storage at dir,
// with a small state for each uid.
func writeTestCheckpoint(t *testing.T, dir string, id int64, uids ...string) {
	t.Helper()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	var hs []checkpoint.StateHandle
	for _, uid := range uids {
		h, err := w.WriteState(checkpoint.OperatorOwner(uid, 0), []byte("state"))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := w.Commit(checkpoint.Metadata{ID: id, Timestamp: time.Now(), States: hs}); err != nil {
		t.Fatal(err)
	}
}

// settleSavepoint is slots.Settle of a job whose Shuffle tells no
// ends: the savepoint it settles.
func settleSavepoint(root, job string, slotCount int, given string, log *slog.Logger) (string, error) {
	sp, err := slots.Settle(root, job, slotCount, given, nil, log)
	return sp.Savepoint, err
}

// The job's start record names the run of the job (its incarnation,
// connector.ClaimIncarnation): every process settling in one root reads
// the same name, a job started again into another root, or into the same
// path made again, gets another, from a savepoint or afresh; a record of
// an earlier splitflow, without a name, is named after its root's start
// path, so that its claims stay comparable among its processes.
func TestStartRecordNamesTheJobsIncarnation(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	settle := func(root, given string) string {
		t.Helper()
		sp, err := slots.Settle(root, "orders", 4, given, nil, log)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Incarnation == "" {
			t.Fatalf("start record in %s names no incarnation", root)
		}
		return sp.Incarnation
	}
	first := t.TempDir()
	a := settle(first, "")
	if b := settle(first, ""); b != a {
		t.Fatalf("two processes of one run: incarnations %q and %q", a, b)
	}
	savepoint := t.TempDir()
	writeTestCheckpoint(t, savepoint, 7, "numbers", "count")
	second := t.TempDir()
	b := settle(second, savepoint)
	if b == a {
		t.Fatalf("a job started from a savepoint into a new root has the old root's incarnation %q", a)
	}
	if again := settle(second, savepoint); again != b {
		t.Fatalf("a second process given the same savepoint: incarnation %q, the first %q", again, b)
	}
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	if c := settle(first, ""); c == a {
		t.Fatalf("a job started into a root made again at the same path has the old run's incarnation %q", a)
	}
	old := t.TempDir()
	st, err := checkpoint.OpenStorage(slots.StartPath(old, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.(checkpoint.RecordStorage).CreateRecord(slots.StartRecord, []byte("")); err != nil {
		t.Fatal(err)
	}
	if got, want := settle(old, ""), slots.StartPath(old, "orders"); got != want {
		t.Fatalf("a start record without a name: incarnation %q, want the start path %q", got, want)
	}
}

// The job's start record keeps the savepoint its slots start from: the
// first process given one checks it and records the checkpoint it
// resolves to (absolute, chk-N), a process given none takes it from
// there, the same one given again is accepted, and another one is
// refused naming both. A path holding no savepoint, or a slot's
// checkpoint, is refused before anything is recorded.
func TestStartPointIsRecordedOnceAndTakenByProcessesWithoutOne(t *testing.T) {
	root := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	t.Chdir(t.TempDir())
	writeTestCheckpoint(t, "savepoints/savepoint-7", 7, "numbers", "count")
	writeTestCheckpoint(t, "slot-1", 4, "numbers", shuffleDecodeUIDPrefix+"orders.count", "count")
	abs, err := filepath.Abs("savepoints/savepoint-7")
	if err != nil {
		t.Fatal(err)
	}
	resolved := abs + "/chk-7"

	for _, bad := range []string{"savepoints/missing", "slot-1"} {
		if _, err := settleSavepoint(root, "orders", 4, bad, log); err == nil {
			t.Fatalf("%s as the savepoint was accepted", bad)
		}
	}
	if got, err := settleSavepoint(root, "orders", 4, "savepoints/savepoint-7/", log); got != resolved || err != nil {
		t.Fatalf("the first process's savepoint: %q, %v; want %q recorded", got, err, resolved)
	}
	for _, given := range []string{"", abs, resolved, "savepoints/savepoint-7/chk-7/"} {
		if got, err := settleSavepoint(root, "orders", 4, given, log); got != resolved || err != nil {
			t.Fatalf("a later process given %q: %q, %v; want the recorded %q", given, got, err, resolved)
		}
	}
	writeTestCheckpoint(t, "savepoints/savepoint-9", 9, "numbers", "count")
	_, err = settleSavepoint(root, "orders", 4, "savepoints/savepoint-9", log)
	if !errors.Is(err, ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), resolved) || !strings.Contains(err.Error(), "savepoint-9/chk-9") {
		t.Fatalf("a process given another savepoint: %v; want ErrIncompatibleCheckpoint naming both", err)
	}
}

// The first process to settle the job's start point binds every other:
// a process started without a savepoint records the fresh start with the
// same conditional create as a savepoint, and a process given a savepoint
// afterwards fails with ErrIncompatibleCheckpoint naming the savepoint
// and the recorded fresh start, as it does when the slots' logs already
// hold records (a job that ran without a start record). Processes that
// settle at once, some with the savepoint and some without, all agree
// with whichever settled first: none starts its slots otherwise. Before,
// a process without the savepoint decided "fresh" without recording it,
// and one with it that settled a moment later dropped its savepoint with
// a warning (the job counted again what the savepoint's job had
// committed), or started its slots from it while the first process
// started its own from nothing.
func TestFirstStartPointDecisionBindsEveryProcess(t *testing.T) {
	root := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	t.Chdir(t.TempDir())
	writeTestCheckpoint(t, "savepoints/savepoint-7", 7, "numbers", "count")
	abs, err := filepath.Abs("savepoints/savepoint-7")
	if err != nil {
		t.Fatal(err)
	}
	resolved := abs + "/chk-7"

	// The process without the savepoint settles first.
	if got, err := settleSavepoint(root, "orders", 4, "", log); got != "" || err != nil {
		t.Fatalf("the first process, without a savepoint: %q, %v; want a fresh start", got, err)
	}
	for range 2 {
		got, err := settleSavepoint(root, "orders", 4, "savepoints/savepoint-7", log)
		if !errors.Is(err, ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), resolved) ||
			!strings.Contains(err.Error(), "fresh") || !strings.Contains(err.Error(), slots.StartPath(root, "orders")) {
			t.Fatalf("a process given the savepoint after a fresh start was settled: %q, %v; want ErrIncompatibleCheckpoint naming the savepoint and the recorded fresh start", got, err)
		}
	}
	if got, err := settleSavepoint(root, "orders", 4, "", log); got != "" || err != nil {
		t.Fatalf("a later process without a savepoint: %q, %v; want the recorded fresh start", got, err)
	}

	// Job "billing" ran without a start record: slot 2's log holds a claim.
	logStore, err := checkpoint.OpenStorage(slots.LogPath(root, "billing", 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := slots.StoreRecord(logStore.(checkpoint.RecordStorage), slots.Record{Seq: 1, Kind: slots.Claim, Epoch: 1, Generation: 1, Member: "m"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := settleSavepoint(root, "billing", 4, abs, log)
		if !errors.Is(err, ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), resolved) || !strings.Contains(err.Error(), slots.LogPath(root, "billing", 2)) {
			t.Fatalf("a job that ran without a savepoint, given one: %q, %v; want ErrIncompatibleCheckpoint naming the savepoint and slot 2's log", got, err)
		}
	}

	// Processes settling at once: every one that starts agrees with the
	// first decision, and only those given the savepoint may be refused.
	for job := range 6 {
		name := fmt.Sprintf("race-%d", job)
		type result struct {
			given, got string
			err        error
		}
		results := make(chan result, 8)
		var wg sync.WaitGroup
		for p := range 8 {
			given := ""
			if p%2 == job%2 {
				given = "savepoints/savepoint-7"
			}
			wg.Go(func() {
				got, err := settleSavepoint(root, name, 4, given, log)
				results <- result{given, got, err}
			})
		}
		wg.Wait()
		close(results)
		starts := map[string]int{}
		for r := range results {
			switch {
			case r.err == nil:
				starts[r.got]++
			case r.given == "" || !errors.Is(r.err, ErrIncompatibleCheckpoint):
				t.Fatalf("job %s: a process given %q failed: %v", name, r.given, r.err)
			}
		}
		if len(starts) != 1 {
			t.Fatalf("job %s: processes settled at once start from %v; want one start point", name, starts)
		}
	}
}
