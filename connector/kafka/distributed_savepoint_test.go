package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A job moves from one process to a distributed job through a savepoint:
// a single-process job at parallelism 2, 3 or 4 counts the first half of
// the input and stops with a savepoint, and two processes of a
// distributed job of 3 slots started from it (WithRestoreFrom) count the
// second half. Every slot takes its share of the savepoint (its key
// groups' counts, the input partitions the owner rule gives it), so each
// word's counts run 1, 2, ... up to its total once each in the
// read_committed output: a count restored twice or lost, or an input
// offset restored to the wrong slot, would repeat or skip a number.
func TestDistributedJobStartsFromASingleProcessSavepointExactly(t *testing.T) {
	for _, parallelism := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("parallelism %d", parallelism), func(t *testing.T) {
			m := newMigration(t)
			sp := m.savepoint(parallelism)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for p := range 2 {
				m.process(ctx, p, runtime.WithRestoreFrom(sp), runtime.WithCheckpointInterval(100*time.Millisecond))
			}
			m.waitFor(2 * migrationHalf)
			cancel()
			m.wait()
			m.exact()
		})
	}
}

// A process of a distributed job started without WithRestoreFrom, after
// another started the job from a savepoint, starts the slots whose logs
// name no checkpoint from that savepoint too (the job's start record),
// not empty. The first process checkpoints once a minute, so only when
// it stops, and the slot it gives the second is handed over before any
// checkpoint of it was recorded; once the second committed, the first
// stops, and the second takes over its slots from their final
// checkpoints. A third process given another savepoint is refused.
func TestDistributedProcessWithoutTheSavepointStartsFreshSlotsFromIt(t *testing.T) {
	m := newMigration(t)
	sp := m.savepoint(2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	first := m.process(firstCtx, 0, runtime.WithRestoreFrom(sp), runtime.WithCheckpointInterval(time.Minute))
	running := func(env *runtime.Environment) []status.Slot {
		d := env.Status().Distributed
		if d == nil {
			return nil
		}
		return slices.DeleteFunc(d.Slots, func(s status.Slot) bool { return !s.Running })
	}
	deadline := time.Now().Add(time.Minute)
	for len(running(first)) < 3 {
		select {
		case err := <-m.errs:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first process runs %v after a minute, want all 3 slots", running(first))
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := m.process(ctx, 1, runtime.WithCheckpointInterval(100*time.Millisecond))
	// Only the second process commits while both run: wait until a
	// checkpoint of a slot it runs completed. (Not for its counts in the
	// read_committed output: the first process's transactions stay open
	// until it checkpoints, a minute on, and hold back every count after
	// theirs.)
	committedSlot := func() bool {
		st := second.Status()
		for _, s := range running(second) {
			for _, c := range st.Checkpoints.Recent {
				if c.Slot != nil && *c.Slot == s.Slot && c.Status == "completed" {
					return true
				}
			}
		}
		return false
	}
	deadline = time.Now().Add(90 * time.Second)
	for !committedSlot() {
		select {
		case err := <-m.errs:
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of a slot of the second process completed within 90s; it runs %+v", running(second))
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := running(second)
	if len(took) == 0 || !slices.ContainsFunc(took, func(s status.Slot) bool { return strings.HasPrefix(s.Savepoint, sp+"/chk-") }) {
		t.Fatalf("the second process runs %+v; want a slot started from the savepoint %s", took, sp)
	}

	// A copy is another savepoint, of the same job.
	another := filepath.Join(t.TempDir(), "another-savepoint")
	if err := os.CopyFS(another, os.DirFS(sp)); err != nil {
		t.Fatal(err)
	}
	other := runtime.NewEnvironment(
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(m.dir),
		runtime.WithRestoreFrom(another),
		runtime.WithLogger(quietLogger()),
		runtime.WithDistributed(runtime.Distributed{Job: migrationJob, Slots: 3, Shuffle: m.shuffle(),
			Cluster: Connect(WithBrokers(m.seeds...)), SessionTimeout: 2 * time.Second}))
	if err := m.build(other); err != nil {
		t.Fatal(err)
	}
	if err := other.Execute(ctx, migrationJob); !errors.Is(err, runtime.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), sp) {
		t.Fatalf("a process given another savepoint: %v; want ErrIncompatibleCheckpoint naming the job's %s", err, sp)
	}

	stopFirst()
	m.waitFor(2 * migrationHalf)
	cancel()
	m.wait()
	m.exact()
}

const (
	migrationJob   = "migrated"
	migrationWords = 20
	// migrationHalf is the records of each half of the input.
	migrationHalf = 600
)

// migration is a job counting words of a 3-partition topic into another,
// run in one process and then as processes of a distributed job of 3
// slots.
type migration struct {
	t       *testing.T
	seeds   []string
	cl      *kgo.Client
	dir     string // the distributed job's checkpoint root
	wg      sync.WaitGroup
	errs    chan error
	in, out string
	// shuffleOpts are the processes' shuffle options besides the brokers
	// and the logger; batches counts the halves produced.
	shuffleOpts []ShuffleOption
	batches     int
}

func newMigration(t *testing.T) *migration {
	m := &migration{t: t, in: "words", out: "counts", dir: t.TempDir(), errs: make(chan error, 8)}
	m.seeds, m.cl = distributedCluster(t, m.in, m.out)
	// Before the directories are removed, after a test that failed with
	// processes running has cancelled them.
	t.Cleanup(m.wg.Wait)
	return m
}

func (m *migration) produce(from int) {
	m.t.Helper()
	m.batches++
	var rs []*kgo.Record
	for i := from; i < from+migrationHalf; i++ {
		rs = append(rs, &kgo.Record{Topic: m.in, Partition: int32(i % 3), Value: fmt.Appendf(nil, "w%02d", (i*7)%migrationWords)})
	}
	if err := m.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		m.t.Fatal(err)
	}
}

func (m *migration) build(env *runtime.Environment) error {
	src, err := NewSource(StringValues(), WithBrokers(m.seeds...), WithTopics(m.in), WithLogger(quietLogger()))
	if err != nil {
		return err
	}
	ws := runtime.FromSource(env, src, "words").UID("words")
	counts := runtime.Count(runtime.KeyBy(ws, func(w string) string { return w })).UID("count")
	sink, err := NewSink(KeyValueSerializer(m.out, func(kv runtime.KV[string, int64]) ([]byte, []byte, error) {
		return nil, fmt.Appendf(nil, "%s %d", kv.Key, kv.Value), nil
	}), WithBrokers(m.seeds...), WithExactlyOnce(m.out), WithLogger(quietLogger()))
	if err != nil {
		return err
	}
	runtime.SinkTo(counts, connector.Sink[runtime.KV[string, int64]](sink)).UID("out")
	return nil
}

func (m *migration) visible() int {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := committed.Visible(rctx, m.seeds, m.out, 20*time.Millisecond)
	if err != nil {
		return -1
	}
	return len(recs)
}

// waitFor waits until n counts are visible, failing when a process ended
// meanwhile.
func (m *migration) waitFor(n int) {
	m.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for m.visible() < n {
		select {
		case err := <-m.errs:
			m.t.Fatalf("a job ended before %d counts were visible: %v", n, err)
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%d of %d counts visible after 90s", m.visible(), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// savepoint runs the job in one process at parallelism over the first
// half of the input, stops it with a savepoint, writes the second half
// and returns the savepoint's path.
func (m *migration) savepoint(parallelism int) string {
	m.t.Helper()
	m.produce(0)
	single := runtime.NewEnvironment(runtime.WithParallelism(parallelism),
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(m.t.TempDir()),
		runtime.WithLogger(quietLogger()))
	if err := m.build(single); err != nil {
		m.t.Fatal(err)
	}
	go func() { m.errs <- single.Execute(context.Background(), migrationJob) }()
	m.waitFor(migrationHalf)
	sp, err := single.StopWithSavepoint(context.Background(), filepath.Join(m.t.TempDir(), "savepoints"))
	if err != nil {
		m.t.Fatalf("stop with savepoint: %v", err)
	}
	if err := <-m.errs; !errors.Is(err, runtime.ErrStopped) {
		m.t.Fatalf("the single-process job: %v, want runtime.ErrStopped after its stop with a savepoint", err)
	}
	m.produce(migrationHalf)
	return sp.Path
}

func (m *migration) shuffle() *Shuffle {
	sh, err := NewShuffle(append([]ShuffleOption{WithShuffleSinkOptions(WithBrokers(m.seeds...), WithLogger(quietLogger())),
		WithShuffleSourceOptions(WithBrokers(m.seeds...), WithLogger(quietLogger()))}, m.shuffleOpts...)...)
	if err != nil {
		m.t.Fatal(err)
	}
	return sh
}

// process starts process p of the distributed job with opts until ctx
// ends, and returns its environment.
func (m *migration) process(ctx context.Context, p int, opts ...runtime.Option) *runtime.Environment {
	m.t.Helper()
	env := runtime.NewEnvironment(append([]runtime.Option{
		runtime.WithCheckpointDir(m.dir),
		runtime.WithLogger(quietLogger()),
		runtime.WithDistributed(runtime.Distributed{Job: migrationJob, Slots: 3, Shuffle: m.shuffle(),
			Cluster: Connect(WithBrokers(m.seeds...), WithClientOpts(kgo.ClientID(fmt.Sprintf("process-%d", p)))), SessionTimeout: 2 * time.Second}),
	}, opts...)...)
	if err := m.build(env); err != nil {
		m.t.Fatal(err)
	}
	m.wg.Go(func() {
		if err := env.Execute(ctx, migrationJob); err != nil {
			m.errs <- fmt.Errorf("process %d: %w", p, err)
		}
	})
	return env
}

// wait waits for the processes to end and fails on an error of any.
func (m *migration) wait() {
	m.t.Helper()
	m.wg.Wait()
	select {
	case err := <-m.errs:
		m.t.Fatal(err)
	default:
	}
}

// exact checks the whole output with read_committed: every word's counts
// 1..n once each, n its count in every half produced.
func (m *migration) exact() {
	m.t.Helper()
	got := map[string][]int64{}
	for _, r := range kafkatest.ReadCommitted(m.t, m.seeds, m.out, 30*time.Second) {
		var w string
		var c int64
		if _, err := fmt.Sscanf(string(r.Value), "%s %d", &w, &c); err != nil {
			m.t.Fatalf("%q: %v", r.Value, err)
		}
		got[w] = append(got[w], c)
	}
	var bad []string
	for i := range migrationWords {
		w := fmt.Sprintf("w%02d", i)
		counts := got[w]
		slices.Sort(counts) // the output has 3 partitions
		want := m.batches * migrationHalf / migrationWords
		ok := len(counts) == want
		for j := 0; ok && j < want; j++ {
			ok = counts[j] == int64(j+1)
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s counted %v, want 1 to %d once each", w, counts, want))
		}
	}
	if len(got) != migrationWords {
		bad = append(bad, fmt.Sprintf("%d words counted, want %d", len(got), migrationWords))
	}
	if len(bad) > 0 {
		m.t.Fatalf("%d problems (read_committed):\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
