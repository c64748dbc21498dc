package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/runtime/restart"
)

// checkLatestCounts checks the committed output of countingJobRolling with
// EmitLatest against the rule a read_committed consumer relies on: in
// commit order (by checkpoint), every key's counts strictly increase and
// end at the exact number of its records among n; and no transaction
// holds a key twice (one emission per key per checkpoint, unless bound).
func checkLatestCounts(t *testing.T, store *txnStore, n, keys int) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	ids := make([]string, 0, len(store.committed))
	for id := range store.committed {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if c := store.checkpointOf[a] - store.checkpointOf[b]; c != 0 {
			return int(c)
		}
		return strings.Compare(a, b)
	})
	seq := map[int64][]int64{}
	for _, id := range ids {
		inTxn := map[int64]bool{}
		for _, r := range store.committed[id] {
			k, c := r/100000, r%100000
			if inTxn[k] {
				t.Fatalf("transaction %s (checkpoint %d) holds key %d twice: %v", id, store.checkpointOf[id], k, store.committed[id])
			}
			inTxn[k] = true
			seq[k] = append(seq[k], c)
		}
	}
	for k := range int64(keys) {
		total := int64(0)
		for v := range int64(n) {
			if v%int64(keys) == k {
				total++
			}
		}
		s := seq[k]
		if len(s) == 0 || s[len(s)-1] != total {
			t.Fatalf("key %d: committed counts %v, want them to end at %d", k, s, total)
		}
		for i := 1; i < len(s); i++ {
			if s[i] <= s[i-1] {
				t.Fatalf("key %d: committed counts %v go back or repeat at %d", k, s, i)
			}
		}
	}
}

// Rule (EmitLatest, exactly-once): each changed key's latest value is
// emitted before the barrier of the checkpoint whose state holds it, once
// per checkpoint; a read_committed reader sees, per key, strictly
// increasing counts ending at the exact total, on either backend, also
// through failovers (the pending keys are not checkpointed: none are
// pending when the state is taken, and a restored job emits afresh what
// changes after the checkpoint).
func TestEmitLatestCommitsEachChangedKeyOncePerCheckpoint(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, a := range rollingAPIs {
			for _, fail := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/failover=%v", a.name, fail), func(t *testing.T) {
					src := &rangeSrc{splits: 4, perSplit: 40, delay: 200 * time.Microsecond, readerFailAt: -1}
					store := newTxnStore()
					mapFn := func(v int64) (int64, error) { return v, nil }
					if fail {
						mapFn = failOnce(50, 120)
					}
					var commits int
					sink := &txnSink2PC{store: store}
					env := countingJobRolling(a.api, []RollingOption{EmitLatest()}, 2, src, mapFn, sink,
						WithCheckpointInterval(3*time.Millisecond), WithRestartStrategy(restart.FixedDelay(5, time.Millisecond)), backend)
					if err := env.Execute(testCtx(t), "latest"); err != nil {
						t.Fatal(err)
					}
					checkLatestCounts(t, store, 160, 7)
					store.mu.Lock()
					for _, rs := range store.committed {
						commits += len(rs)
					}
					store.mu.Unlock()
					t.Logf("%d records committed for 160 updates", commits)
				})
			}
		}
	})
}

// latestWords runs Count with ropts over words at parallelism 1 without
// checkpoints and returns what it emitted, in order, as key=count.
func latestWords(t *testing.T, backend Option, words []string, ropts ...RollingOption) []string {
	t.Helper()
	env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()), backend)
	src := &memSource[string]{numSplits: 1, perSplit: len(words), gen: func(_, i int) (string, int64) { return words[i], int64(i) }}
	sink := newCollectSink[string]()
	counts := Count(KeyBy(FromSource(env, src, "words"), func(w string) string { return w }), ropts...)
	SinkTo(Map(counts, func(kv KV[string, int64]) (string, error) { return fmt.Sprintf("%s=%d", kv.Key, kv.Value), nil }), sink)
	if err := env.Execute(testCtx(t), "latest words"); err != nil {
		t.Fatal(err)
	}
	return sink.all()
}

// Rule: without checkpoints EmitLatest emits at the end of input, each
// changed key once, in the order of the keys' first changes; the size
// bound (MaxPendingKeys) emits the pending keys early once that many are
// pending. Both backends.
func TestEmitLatestFlushesAtEndOfInputAndAtTheSizeBound(t *testing.T) {
	words := strings.Fields("a a b a c c a")
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		cases := []struct {
			name  string
			ropts []RollingOption
			want  []string
		}{
			{"every", nil, []string{"a=1", "a=2", "b=1", "a=3", "c=1", "c=2", "a=4"}},
			{"latest", []RollingOption{EmitLatest()}, []string{"a=4", "b=1", "c=2"}},
			{"latest/2 keys", []RollingOption{EmitLatest(MaxPendingKeys(2))}, []string{"a=2", "b=1", "a=3", "c=1", "c=2", "a=4"}},
			{"latest/1 key", []RollingOption{EmitLatest(MaxPendingKeys(1))}, []string{"a=1", "a=2", "b=1", "a=3", "c=1", "c=2", "a=4"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if got := latestWords(t, backend, words, c.ropts...); !slices.Equal(got, c.want) {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			})
		}
	})
}

// heldCount runs Count with ropts over keys v%2 of the records 0..9 at
// parallelism 1 without checkpoints, holding the source before record 4
// until release is closed; writes gets every record written.
func heldCount(t *testing.T, reg *prometheus.Registry, release chan struct{}, writes chan string, ropts ...RollingOption) (*collectSink[string], chan error) {
	t.Helper()
	env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()), WithMetricsRegistry(reg), WithFlushTimeout(time.Millisecond))
	src := &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1, hold: func(v int64) bool { return v >= 4 }, release: release}
	sink := newCollectSink[string]()
	sink.onWrite = writes
	counts := Count(KeyBy(FromSource(env, src, "range"), func(v int64) int64 { return v % 2 }), ropts...).UID("counts")
	SinkTo(Map(counts, func(kv KV[int64, int64]) (string, error) { return fmt.Sprintf("%d=%d", kv.Key, kv.Value), nil }), sink)
	done := make(chan error, 1)
	go func() { done <- env.Execute(testCtx(t), "held count") }()
	return sink, done
}

// Rule: MaxPendingTime emits the pending keys once that much processing
// time passed since the first of them changed, between checkpoints, while
// the input waits; without it nothing is emitted until the end of input,
// and the pending keys are the gauge splitflow_rolling_pending_keys.
func TestEmitLatestFlushesAtTheTimeBound(t *testing.T) {
	t.Run("time bound", func(t *testing.T) {
		release, writes := make(chan struct{}), make(chan string, 100)
		_, done := heldCount(t, prometheus.NewRegistry(), release, writes, EmitLatest(MaxPendingTime(20*time.Millisecond)))
		latest := map[string]string{}
		for timeout := time.After(30 * time.Second); latest["0"] != "2" || latest["1"] != "2"; {
			select {
			case w := <-writes:
				k, v, _ := strings.Cut(w, "=")
				latest[k] = v
			case <-timeout:
				t.Fatalf("latest counts %v before the input went on, want 0=2 and 1=2 emitted at the time bound", latest)
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(writes)
		for w := range writes {
			k, v, _ := strings.Cut(w, "=")
			latest[k] = v
		}
		if latest["0"] != "5" || latest["1"] != "5" {
			t.Fatalf("latest counts at the end %v, want 0=5 and 1=5", latest)
		}
	})
	t.Run("no time bound", func(t *testing.T) {
		release, writes := make(chan struct{}), make(chan string, 100)
		reg := prometheus.NewRegistry()
		sink, done := heldCount(t, reg, release, writes, EmitLatest())
		for deadline := time.Now().Add(30 * time.Second); pendingKeys(t, reg) != 2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("splitflow_rolling_pending_keys %v, want 2 while the input waits", pendingKeys(t, reg))
			}
		}
		time.Sleep(50 * time.Millisecond)
		if n := sink.Count(); n != 0 {
			t.Fatalf("%d records emitted before the end of input without a bound reached, want none", n)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := sink.all(); !slices.Equal(got, []string{"0=5", "1=5"}) {
			t.Fatalf("got %v, want [0=5 1=5] at the end of input", got)
		}
	})
}

// pendingKeys reads the gauge splitflow_rolling_pending_keys of the
// operator "Count", -1 if absent.
func pendingKeys(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "splitflow_rolling_pending_keys" {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Rule: EmitLatest's bounds are checked before anything runs, naming the
// bound.
func TestEmitLatestRefusesBadBounds(t *testing.T) {
	for _, c := range []struct {
		opt  LatestOption
		want string
	}{{MaxPendingKeys(0), "MaxPendingKeys(0) must be at least 1"}, {MaxPendingTime(-time.Second), "MaxPendingTime(-1s) must be positive"}} {
		env := NewEnvironment(WithLogger(discardLogger()))
		ds := FromSource[int64, *rSplit, []*rSplit](env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "range")
		SinkTo(Count(KeyBy(ds, func(v int64) int64 { return v }), EmitLatest(c.opt)), newCollectSink[KV[int64, int64]]())
		err := env.Execute(testCtx(t), "bad bound")
		if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Execute: %v, want ErrInvalidGraph saying %q", err, c.want)
		}
	}
}

// BenchmarkEmitLatestPendingKey measures what EmitLatest adds to a record
// of a key already pending, the common case between two checkpoints:
// 10000 keys pending, records cycling over them.
func BenchmarkEmitLatestPendingKey(b *testing.B) {
	const n = 10_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("word-%06d", i)
	}
	l := &latestSet[string, int64]{cfg: latestConfig{maxKeys: 1 << 30}, at: map[string]int{}, gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})}
	for i, k := range keys {
		l.note(k, 1, int64(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.note(keys[i%n], int64(i), int64(i))
	}
}

// The pending set holds each changed key once, in the order of its first
// change, with its latest value and the timestamp of its latest record
// (what its emitted record carries), and counts keys, not records.
func TestEmitLatestPendingSetHoldsEachKeyOnceWithItsLatestTimestamp(t *testing.T) {
	l := &latestSet[string, int64]{cfg: latestConfig{maxKeys: 1 << 30}, at: map[string]int{}, gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})}
	for i, k := range []string{"b", "a", "b", "c", "a", "b"} {
		if n, want := l.note(k, int64(i), int64(10+i)), len(l.order); n != want {
			t.Fatalf("note(%q) = %d pending, want %d", k, n, want)
		}
	}
	want := []pendingKey[string, int64]{{"b", 5, 15}, {"a", 4, 14}, {"c", 3, 13}}
	if !slices.Equal(l.order, want) {
		t.Fatalf("pending %v, want %v", l.order, want)
	}
	if len(l.at) != 3 {
		t.Fatalf("index holds %d keys, want 3", len(l.at))
	}
}
