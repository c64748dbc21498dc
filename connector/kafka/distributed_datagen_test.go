package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/datagen"
	"github.com/splitflow/splitflow/integration/committed"
	"github.com/splitflow/splitflow/integration/kafkatest"
	"github.com/splitflow/splitflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A source built on connector/base with a split owner rule (datagen is
// one) runs in a distributed job: every slot's enumerator plans the same
// splits and gives each to the slot the rule names, so each generated
// index is counted once over two processes. Read with read_committed:
// every key's counts 1..n once each.
func TestDistributedJobReadsABaseSourceWithAnOwnerRuleOnce(t *testing.T) {
	const out, job, keys, n = "counts", "generated", 30, 3000
	seeds, _ := distributedCluster(t, out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			errs <- func() error {
				sh, err := NewShuffle(WithShuffleSinkOptions(WithBrokers(seeds...), WithLogger(quietLogger())),
					WithShuffleSourceOptions(WithBrokers(seeds...), WithLogger(quietLogger())))
				if err != nil {
					return err
				}
				env := runtime.NewEnvironment(
					runtime.WithCheckpointInterval(100*time.Millisecond),
					runtime.WithCheckpointDir(dir),
					runtime.WithLogger(quietLogger()),
					runtime.WithDistributed(runtime.Distributed{Job: job, Slots: 3, Shuffle: sh,
						Cluster: Connect(WithBrokers(seeds...), WithClientOpts(kgo.ClientID(fmt.Sprintf("process-%d", p)))), SessionTimeout: 2 * time.Second}))
				src, err := datagen.NewSource(func(i int64, _ *rand.Rand) int64 { return i },
					datagen.WithCount(n), datagen.WithRecordsPerSecond(3000))
				if err != nil {
					return err
				}
				keyed := runtime.KeyBy(runtime.FromSource(env, src, "numbers").UID("numbers"), func(i int64) string { return fmt.Sprintf("k%02d", i%keys) })
				counts := runtime.Count(keyed).UID("count")
				sink, err := NewSink(KeyValueSerializer(out, func(kv runtime.KV[string, int64]) ([]byte, []byte, error) {
					return nil, fmt.Appendf(nil, "%s %d", kv.Key, kv.Value), nil
				}), WithBrokers(seeds...), WithExactlyOnce(out), WithLogger(quietLogger()))
				if err != nil {
					return err
				}
				runtime.SinkTo(counts, connector.Sink[runtime.KV[string, int64]](sink)).UID("out")
				return env.Execute(ctx, job)
			}()
		})
	}
	visible := func() int {
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		recs, err := committed.Visible(rctx, seeds, out, 20*time.Millisecond)
		if err != nil {
			return -1
		}
		return len(recs)
	}
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
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a process: %v", err)
		}
	}
	got := map[string][]int64{}
	for _, r := range kafkatest.ReadCommitted(t, seeds, out, 30*time.Second) {
		var k string
		var c int64
		if _, err := fmt.Sscanf(string(r.Value), "%s %d", &k, &c); err != nil {
			t.Fatalf("%q: %v", r.Value, err)
		}
		got[k] = append(got[k], c)
	}
	var bad []string
	for i := range keys {
		k := fmt.Sprintf("k%02d", i)
		counts := got[k]
		slices.Sort(counts) // the output has 3 partitions
		ok := len(counts) == n/keys
		for j := 0; ok && j < n/keys; j++ {
			ok = counts[j] == int64(j+1)
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s counted %v, want 1 to %d once each", k, counts, n/keys))
		}
	}
	if len(got) != keys {
		bad = append(bad, fmt.Sprintf("%d keys counted, want %d", len(got), keys))
	}
	if len(bad) > 0 {
		t.Fatalf("%d problems (read_committed):\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
