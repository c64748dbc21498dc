package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/restart"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// The table join in running jobs: exactly-once under failures and
// rescaled on restore.

// tableJobRow makes the table update of record v of tableJob: key v%7,
// value v, a deletion for every fifth one.
func tableJobRow(v int64) TableUpdate[int64, int64] {
	return TableUpdate[int64, int64]{Key: v % 7, Value: v, Deleted: (v/4)%5 == 3}
}

// tableJob left-joins the odd records of src (the stream, key v%7) with
// a table made of the records that are multiples of 4 (tableJobRow),
// each timestamped with its value, into the two-phase test sink as
// y*1000+x, x the table's value as of y, or y*1000+999 without one. A
// key's table value is up to 28 records old, so the table outlives
// checkpoints and failovers.
func tableJob(par int, src *rangeSrc, mapFn func(int64) (int64, error), sink *txnSink2PC, opts ...Option) *Environment {
	env := NewEnvironment(append([]Option{WithParallelism(par), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
		WithDrainTimeout(5 * time.Second), WithAutoWatermarkInterval(time.Millisecond)}, opts...)...)
	ds := Map(FromSource(env, src, "range", WithWatermarks(watermark.ForMonotonousTimestamps[int64]().
		WithTimestampAssigner(func(v, _ int64) int64 { return v }))).UID("src"), mapFn).UID("map")
	rows := Map(Filter(ds, func(v int64) (bool, error) { return v%4 == 0, nil }), func(v int64) (TableUpdate[int64, int64], error) {
		return tableJobRow(v), nil
	})
	stream := KeyBy(Filter(ds, func(v int64) (bool, error) { return v%2 == 1, nil }), func(v int64) int64 { return v % 7 })
	joined := LeftTableJoin(stream, rows, func(y, x int64, ok bool) (int64, error) {
		if !ok {
			x = 999
		}
		return y*1000 + x, nil
	}).UID("join")
	SinkTo(joined, twoPhase(sink)).UID("sink")
	return env
}

// checkTableJoined: every odd record of tableJob over records 0..n-1 was
// committed once, joined with its key's table value at its time, and
// nothing else was.
func checkTableJoined(t *testing.T, store *txnStore, n int64) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	seen := map[int64]int{}
	for _, rs := range store.committed {
		for _, r := range rs {
			seen[r]++
		}
	}
	want, withValue := 0, 0
	for y := int64(1); y < n; y += 2 {
		x := int64(999)
		for v := y - 1; v >= 0; v-- {
			if v%4 == 0 && v%7 == y%7 {
				if !tableJobRow(v).Deleted {
					x = v
					withValue++
				}
				break
			}
		}
		want++
		if c := seen[y*1000+x]; c != 1 {
			t.Fatalf("record %d joined with %d committed %d times, want once", y, x, c)
		}
	}
	if len(seen) != want {
		t.Fatalf("%d distinct results committed, want the %d records", len(seen), want)
	}
	if withValue == 0 || withValue == want {
		t.Fatalf("%d of %d records have a table value: the job proves less than it says", withValue, want)
	}
}

// Rule (exactly-once): a table join whose job fails at random records
// and restarts from its checkpoints commits every stream record once,
// joined with the table as of its time: the table, the records waiting
// for the watermark and their timers are restored. Parallelism 1 to 3,
// both backends.
func TestTableJoinExactlyOnceUnderFailures(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for seed := range 3 {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), 9))
				par, splits, per := 1+rng.IntN(3), 2+rng.IntN(3), 30+rng.IntN(30)
				n := splits * per
				fails := []int64{int64(rng.IntN(n)), int64(rng.IntN(n))}
				src := &rangeSrc{splits: splits, perSplit: per, delay: time.Duration(rng.IntN(300)) * time.Microsecond, readerFailAt: -1}
				store := newTxnStore()
				env := tableJob(par, src, failOnce(fails...), &txnSink2PC{store: store},
					WithCheckpointInterval(time.Duration(2+rng.IntN(5))*time.Millisecond), WithRestartStrategy(restart.FixedDelay(10, time.Millisecond)), backend)
				if err := env.Execute(testCtx(t), "table join"); err != nil {
					t.Fatalf("par %d fails=%v: %v", par, fails, err)
				}
				if env.Status().Restarts == 0 {
					t.Fatal("the job never failed over; the test proves less than it says")
				}
				checkTableJoined(t, store, int64(n))
			})
		}
	})
}

// The table join's table, waiting records and timers move with their key
// groups: a job killed at parallelism 2 (3) after a checkpoint that holds
// them goes on at 3 (1), and every record is committed once, joined with
// the right value.
func TestTableJoinRescaledOnRestore(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		for _, pars := range [][2]int{{2, 3}, {3, 1}} {
			t.Run(fmt.Sprintf("%d->%d", pars[0], pars[1]), func(t *testing.T) {
				dir := t.TempDir()
				store := newTxnStore()
				dieMidStream(t, pars[0], func(src *rangeSrc, kill func(int64) (int64, error), opts ...Option) *Environment {
					return tableJob(pars[0], src, kill, &txnSink2PC{store: store}, append(opts, WithCheckpointDir(dir), backend)...)
				})
				src2 := &rangeSrc{splits: 4, perSplit: 40, readerFailAt: -1}
				env2 := tableJob(pars[1], src2, func(v int64) (int64, error) { return v, nil }, &txnSink2PC{store: store},
					WithCheckpointInterval(3*time.Millisecond), WithCheckpointDir(dir), backend)
				if err := env2.Execute(testCtx(t), "first"); err != nil {
					t.Fatal(err)
				}
				checkTableJoined(t, store, 160)
			})
		}
	})
}

// Rule: a quiet table side with idleness does not hold the join back.
// The table's source emits three rows and then has nothing to read (it
// never ends, as a compacted topic's reader does not); with
// WithIdleness it goes idle, the operator's watermark follows the stream
// alone, and every stream record is emitted (a left join) while the
// table's source still runs. The stream is held until the table's reader has emitted
// its rows: they then reach the join before the table's idle status (one
// channel keeps its order), as a table loaded before the stream's
// records catch up. Without the hold a loaded machine can start the
// table's reader after the stream ended, and its rows are then late
// updates, behind records already emitted without a value.
func TestTableJoinIdleTableDoesNotStall(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		const n = 60
		env := NewEnvironment(WithParallelism(2), WithFlushTimeout(time.Millisecond), WithLogger(discardLogger()),
			WithAutoWatermarkInterval(time.Millisecond), backend)
		quiet := &rangeSrc{splits: 1, perSplit: 10, readerFailAt: -1, hold: func(v int64) bool { return v >= 3 }}
		rows := Map(FromSource(env, quiet, "table", WithWatermarks(watermark.ForMonotonousTimestamps[int64]().
			WithTimestampAssigner(func(v, _ int64) int64 { return v }).WithIdleness(20*time.Millisecond))),
			func(v int64) (TableUpdate[int64, int64], error) {
				return TableUpdate[int64, int64]{Key: v, Value: 100 * v}, nil
			})
		release := make(chan struct{})
		records := FromSource(env, &rangeSrc{splits: 2, perSplit: n / 2, delay: 100 * time.Microsecond, readerFailAt: -1,
			hold: func(int64) bool { return true }, release: release}, "stream",
			WithWatermarks(watermark.ForMonotonousTimestamps[int64]().WithTimestampAssigner(func(v, _ int64) int64 { return 10 + v })))
		joined := LeftTableJoin(KeyBy(records, func(v int64) int64 { return v % 3 }), rows, func(y, x int64, ok bool) (int64, error) {
			if !ok {
				x = 999
			}
			return y*1000 + x, nil
		})
		sink := newCollectSink[int64]()
		SinkTo(joined, sink)
		ctx, cancel := context.WithCancel(testCtx(t))
		errc := make(chan error, 1)
		go func() { errc <- env.Execute(ctx, "quiet table") }()
		released := false
		for sink.Count() < n {
			if !released && quiet.holding.Load() > 0 {
				close(release)
				released = true
			}
			select {
			case err := <-errc:
				cancel()
				t.Fatalf("the job ended (%v) with %d of %d records emitted", err, sink.Count(), n)
			case <-ctx.Done():
				t.Fatalf("%d of %d records emitted before the test's deadline: the quiet table holds the join back", sink.Count(), n)
			case <-time.After(5 * time.Millisecond):
			}
		}
		cancel()
		<-errc
		// Every record emitted once. Its value is not checked: with
		// idleness which rows a record meets depends on timing (see
		// TableJoin), and this test is about progress.
		got := map[int64]int{}
		for _, r := range sink.all() {
			if x := r % 1000; x != 999 && x != 100*((r/1000)%3) {
				t.Fatalf("record %d joined with %d, not its key's value", r/1000, x)
			}
			got[r/1000]++
		}
		for y := int64(0); y < n; y++ {
			if got[y] != 1 {
				t.Fatalf("record %d emitted %d times, want once", y, got[y])
			}
		}
	})
}
