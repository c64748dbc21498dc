package kafka

import (
	"context"
	"fmt"
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
	"github.com/twmb/franz-go/pkg/kgo"
)

// A job moves from one process to a distributed job through a savepoint:
// a single-process job at parallelism 2, 3 or 4 counts the first half of
// the input and stops with a savepoint, and two processes of a
// distributed job of 3 slots started from it (WithRestoreFrom) count the
// second half.
// Every slot takes its share of the savepoint (its key groups' counts,
// the input partitions the owner rule gives it), so each word's counts
// run 1, 2, ... up to its total once each in the read_committed output:
// a count restored twice or lost, or an input offset restored to the
// wrong slot, would repeat or skip a number.
func TestDistributedJobStartsFromASingleProcessSavepointExactly(t *testing.T) {
	for _, parallelism := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("parallelism %d", parallelism), func(t *testing.T) {
			distributedFromSavepoint(t, parallelism)
		})
	}
}

func distributedFromSavepoint(t *testing.T, parallelism int) {
	const in, out, job, words, perHalf = "words", "counts", "migrated", 20, 600
	seeds, cl := distributedCluster(t, in, out)
	half := func(from int) []*kgo.Record {
		var rs []*kgo.Record
		for i := from; i < from+perHalf; i++ {
			rs = append(rs, &kgo.Record{Topic: in, Partition: int32(i % 3), Value: fmt.Appendf(nil, "w%02d", (i*7)%words)})
		}
		return rs
	}
	produce := func(rs []*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	build := func(env *runtime.Environment) error {
		src, err := NewSource(StringValues(), WithBrokers(seeds...), WithTopics(in), WithLogger(quietLogger()))
		if err != nil {
			return err
		}
		ws := runtime.FromSource(env, src, "words").UID("words")
		counts := runtime.Count(runtime.KeyBy(ws, func(w string) string { return w })).UID("count")
		sink, err := NewSink(KeyValueSerializer(out, func(kv runtime.KV[string, int64]) ([]byte, []byte, error) {
			return nil, fmt.Appendf(nil, "%s %d", kv.Key, kv.Value), nil
		}), WithBrokers(seeds...), WithDeliveryGuarantee(ExactlyOnce), WithTransactionalIDPrefix(out), WithLogger(quietLogger()))
		if err != nil {
			return err
		}
		runtime.SinkTo(counts, connector.Sink[runtime.KV[string, int64]](sink)).UID("out")
		return nil
	}
	visible := func() int {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recs, err := committed.Visible(rctx, seeds, out, 20*time.Millisecond)
		if err != nil {
			return -1
		}
		return len(recs)
	}
	waitFor := func(n int, errs chan error) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for visible() < n {
			select {
			case err := <-errs:
				t.Fatalf("a process ended before %d counts were visible: %v", n, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d counts visible after 90s", visible(), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	produce(half(0))
	single := runtime.NewEnvironment(runtime.WithParallelism(parallelism),
		runtime.WithCheckpointInterval(100*time.Millisecond),
		runtime.WithCheckpointDir(t.TempDir()),
		runtime.WithLogger(quietLogger()))
	if err := build(single); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- single.Execute(context.Background(), job) }()
	waitFor(perHalf, ended)
	sp, err := single.StopWithSavepoint(context.Background(), filepath.Join(t.TempDir(), "savepoints"))
	if err != nil {
		t.Fatalf("stop with savepoint: %v", err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("the single-process job: %v", err)
	}
	produce(half(perHalf))

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			sh, err := NewShuffle(WithShuffleSinkOpts(WithBrokers(seeds...), WithLogger(quietLogger())),
				WithShuffleSourceOpts(WithBrokers(seeds...), WithLogger(quietLogger())))
			if err != nil {
				errs <- err
				return
			}
			env := runtime.NewEnvironment(
				runtime.WithCheckpointInterval(100*time.Millisecond),
				runtime.WithCheckpointDir(dir),
				runtime.WithRestoreFrom(sp.Path),
				runtime.WithLogger(quietLogger()),
				runtime.WithDistributed(runtime.Distributed{Job: job, Slots: 3, Shuffle: sh,
					Kafka: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(fmt.Sprintf("process-%d", p))}, SessionTimeout: 2 * time.Second}))
			if err := build(env); err != nil {
				errs <- err
				return
			}
			errs <- env.Execute(ctx, job)
		})
	}
	waitFor(2*perHalf, errs)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a distributed process: %v", err)
		}
	}

	got := map[string][]int64{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, out, 30*time.Second) {
		var w string
		var c int64
		if _, err := fmt.Sscanf(string(r.Value), "%s %d", &w, &c); err != nil {
			t.Fatalf("%q: %v", r.Value, err)
		}
		got[w] = append(got[w], c)
	}
	var bad []string
	for i := range words {
		w := fmt.Sprintf("w%02d", i)
		counts := got[w]
		slices.Sort(counts) // the output has 3 partitions
		want := 2 * perHalf / words
		ok := len(counts) == want
		for j := 0; ok && j < want; j++ {
			ok = counts[j] == int64(j+1)
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s counted %v, want 1 to %d once each", w, counts, want))
		}
	}
	if len(got) != words {
		bad = append(bad, fmt.Sprintf("%d words counted, want %d", len(got), words))
	}
	if len(bad) > 0 {
		t.Fatalf("%d problems (read_committed):\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
