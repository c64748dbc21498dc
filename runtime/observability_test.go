package runtime

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitflow/splitflow/metrics/metricstest"
	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/state"
	"github.com/splitflow/splitflow/runtime/status"
	"github.com/splitflow/splitflow/runtime/watermark"
)

// loggedCheckpoint is one "checkpoint completed" line of the job log.
type loggedCheckpoint struct {
	duration, sync time.Duration
	size, full     int64
}

var checkpointLine = regexp.MustCompile(`msg="splitflow: checkpoint completed" id=(\d+) duration=(\S+) sync=(\S+) size=(\d+) full=(\d+)`)

// loggedCheckpoints reads the "checkpoint completed" lines of a text log,
// by checkpoint id, failing on a line that lacks a field or whose field
// does not parse.
func loggedCheckpoints(t *testing.T, log string) map[int64]loggedCheckpoint {
	t.Helper()
	out := map[int64]loggedCheckpoint{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "checkpoint completed") {
			continue
		}
		m := checkpointLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("checkpoint line without id, duration, sync, size and full: %s", line)
		}
		id, err1 := strconv.ParseInt(m[1], 10, 64)
		d, err2 := time.ParseDuration(m[2])
		s, err3 := time.ParseDuration(m[3])
		size, err4 := strconv.ParseInt(m[4], 10, 64)
		full, err5 := strconv.ParseInt(m[5], 10, 64)
		for _, err := range []error{err1, err2, err3, err4, err5} {
			if err != nil {
				t.Fatalf("checkpoint line %s: %v", line, err)
			}
		}
		if _, dup := out[id]; dup {
			t.Fatalf("checkpoint %d logged as completed twice", id)
		}
		out[id] = loggedCheckpoint{duration: d, sync: s, size: size, full: full}
	}
	return out
}

// What a completed checkpoint reports, on both backends, checked against
// what happened: the log line's duration=, sync=, size= and full=, the
// status API's fields of the same checkpoint, and the metrics of the
// newest one and of the backend's local state.
//
// The job counts 20000 distinct keys, then changes 10 of them a record a
// millisecond, then holds its last record (checkpoints go on) until the
// test has read the state metrics of the running job. For every completed
// checkpoint, full >= size > 0 and the synchronous pause lies within the
// checkpoint's duration; some pause was measured. On the heap backend
// every checkpoint writes all the state (size == full) and there is no
// local disk or block cache; on pebble a checkpoint taken while only the
// 10 keys change (most of them) writes a tenth of the full size or less, the DBs take
// disk space and the reads of the changed keys fill the block cache
// (within its size; sampled while the job runs), and once the job has
// ended its disk is given back.
// The metrics of the last checkpoint are the newest one's.
func TestCheckpointObservability(t *testing.T) {
	forEachStateBackend(t, func(t *testing.T, backend Option) {
		pebble := strings.HasSuffix(t.Name(), "/"+string(kindPebble))
		const unique, changing, trickle = 20000, 10, 300
		reg := prometheus.NewRegistry()
		var logs statustest.LockedBuffer
		release := make(chan struct{})
		var released sync.Once
		defer released.Do(func() { close(release) })
		src := &rangeSrc{splits: 1, perSplit: unique + trickle, readerFailAt: -1,
			hold: func(v int64) bool { return v == unique+trickle-1 }, release: release}
		var trickling atomic.Bool
		env := NewEnvironment(WithParallelism(2), WithMaxParallelism(16), WithFlushTimeout(time.Millisecond),
			WithLogger(slogText(&logs)), WithMetricsRegistry(reg), WithCheckpointInterval(10*time.Millisecond), backend)
		// fewChanges holds the checkpoints whose barriers entered the
		// source while only the changing keys were being counted.
		var fewMu sync.Mutex
		fewChanges := map[int64]bool{}
		env.hooks = &testHooks{barrierInjected: func(id int64) {
			fewMu.Lock()
			fewChanges[id] = trickling.Load() && src.holding.Load() == 0
			fewMu.Unlock()
		}}
		keys := Map(FromSource(env, src, "range").UID("src"), func(v int64) (int64, error) {
			if v < unique {
				return v, nil
			}
			trickling.Store(true)
			time.Sleep(time.Millisecond)
			return v % changing, nil
		}).UID("keys")
		counts := Count(KeyBy(keys, func(v int64) int64 { return v })).UID("counts")
		SinkTo(counts, newCollectSink[KV[int64, int64]]()).UID("sink")

		done := make(chan error, 1)
		go func() { done <- env.Execute(testCtx(t), "observed") }()

		// status reads the status, whose checkpoints in progress report
		// no sizes, alignment or pause yet (acknowledgements add to them
		// before the checkpoint completes).
		// It samples the block cache too: a compaction drops the blocks
		// of the files it replaced, so the cache may be empty again at
		// the end.
		var maxCache float64
		checkpoints := func() status.Checkpoints {
			cache, _ := metricstest.Sum(t, reg, "splitflow_state_block_cache_bytes", nil)
			maxCache = max(maxCache, cache)
			if cache > float64(defaultBlockCacheSize()) {
				t.Fatalf("block cache bytes %v, above the cache's %d", cache, defaultBlockCacheSize())
			}
			cs := env.Status().Checkpoints
			for _, c := range cs.Recent {
				if c.Status == "in_progress" && (c.SizeBytes != 0 || c.FullSizeBytes != 0 || c.AlignmentMillis != 0 || c.SyncMicros != 0) {
					t.Fatalf("checkpoint %d in progress reports %+v; want sizes, alignment and pause 0 until completed", c.ID, c)
				}
			}
			return cs
		}
		// Held at the last record: wait for checkpoints that hold every
		// change, then read the state metrics of the running job.
		for deadline := time.Now().Add(20 * time.Second); src.holding.Load() == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("the source never reached its last record: %+v", checkpoints())
			}
			checkpoints()
			time.Sleep(time.Millisecond)
		}
		held := checkpoints().Completed
		for deadline := time.Now().Add(20 * time.Second); checkpoints().Completed < held+3; {
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoints while the last record is held: %+v", checkpoints())
			}
			time.Sleep(time.Millisecond)
		}
		disk, _ := metricstest.Sum(t, reg, "splitflow_state_disk_bytes", nil)
		if pebble {
			if disk <= 0 {
				t.Errorf("state disk bytes %v while the pebble job runs with %d keys, want > 0", disk, unique)
			}
			if maxCache <= 0 {
				t.Errorf("block cache bytes never above 0 while the changing keys were read from flushed files")
			}
		} else if disk != 0 || maxCache != 0 {
			t.Errorf("heap backend: state disk bytes %v, block cache bytes up to %v; want 0 and 0", disk, maxCache)
		}
		released.Do(func() { close(release) })
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		logged := loggedCheckpoints(t, logs.String())
		st := env.Status()
		if int64(len(logged)) != st.Checkpoints.Completed || len(logged) < 5 {
			t.Fatalf("%d checkpoints logged as completed, status says %d; want equal and at least 5", len(logged), st.Checkpoints.Completed)
		}
		// The status's recent checkpoints say what their log lines say.
		var newest *status.Checkpoint
		for i, c := range st.Checkpoints.Recent {
			if c.Status != "completed" {
				continue
			}
			l, ok := logged[c.ID]
			if !ok {
				t.Fatalf("completed checkpoint %d was not logged", c.ID)
			}
			if time.Duration(c.DurationMillis)*time.Millisecond != l.duration || time.Duration(c.SyncMicros)*time.Microsecond != l.sync ||
				c.SizeBytes != l.size || c.FullSizeBytes != l.full {
				t.Errorf("checkpoint %d: status %+v, log line %+v", c.ID, c, l)
			}
			newest = &st.Checkpoints.Recent[i]
		}
		if newest == nil {
			t.Fatal("no completed checkpoint in the status")
		}
		for _, m := range []struct {
			name string
			want float64
		}{
			{"splitflow_checkpoint_last_size_bytes", float64(newest.SizeBytes)},
			{"splitflow_checkpoint_last_full_size_bytes", float64(newest.FullSizeBytes)},
			{"splitflow_checkpoint_last_sync_pause_seconds", float64(newest.SyncMicros) / 1e6},
		} {
			if got, n := metricstest.Sum(t, reg, m.name, nil); n != 1 || got != m.want {
				t.Errorf("%s = %v over %d series, want %v, the newest checkpoint's (%d)", m.name, got, n, m.want, newest.ID)
			}
		}
		if disk, n := metricstest.Sum(t, reg, "splitflow_state_disk_bytes", nil); n != 1 || disk != 0 {
			t.Errorf("state disk bytes %v over %d series once the job ended, want 0: its DBs are gone", disk, n)
		}

		var maxSync time.Duration
		var maxFull int64
		few, fewSmall := 0, 0
		for id, l := range logged {
			if l.size <= 0 || l.full < l.size {
				t.Errorf("checkpoint %d: size %d full %d, want full >= size > 0", id, l.size, l.full)
			}
			// The duration is whole milliseconds, cut down.
			if l.sync < 0 || l.sync > l.duration+time.Millisecond {
				t.Errorf("checkpoint %d: sync pause %v, want it within the checkpoint's duration %v", id, l.sync, l.duration)
			}
			if !pebble && l.size != l.full {
				t.Errorf("heap checkpoint %d: size %d full %d, want every checkpoint to write all the state", id, l.size, l.full)
			}
			maxSync, maxFull = max(maxSync, l.sync), max(maxFull, l.full)
			fewMu.Lock()
			if fewChanges[id] {
				few++
				if l.size*10 <= l.full {
					fewSmall++
				}
			}
			fewMu.Unlock()
		}
		if maxSync <= 0 {
			t.Errorf("no checkpoint of %d measured a synchronous pause", len(logged))
		}
		// Each key is at least 12 bytes with its value: the state of the
		// distinct keys, compressed, is over 20 KB.
		if maxFull < 20000 {
			t.Errorf("largest full size %d bytes with %d keys in state, want more", maxFull, unique)
		}
		if pebble {
			// A checkpoint after a compaction writes the files it made,
			// all the state at this size (once in 8 flushes, see
			// state.L0CompactionThreshold); most write only the flush of
			// what changed, and the blobs.
			if few == 0 || fewSmall*2 < few {
				t.Errorf("%d checkpoints taken while %d keys changed, %d of them writing a tenth of the full size or less; want most", few, changing, fewSmall)
			}
			t.Logf("%d checkpoints while %d keys changed, %d wrote a tenth of the full size or less; largest full size %d; longest sync pause %v",
				few, changing, fewSmall, maxFull, maxSync)
		}
	})
}

// Every splitflow_ metric a job registers is in the metrics table of
// docs/operations.md, so that a metric added later is documented with it.
func TestJobMetricsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	wm := watermark.ForMonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return v })
	sink := &txnSink2PC{store: newTxnStore()}
	env := NewEnvironment(WithParallelism(1), WithLogger(discardLogger()), WithMetricsRegistry(reg),
		WithCheckpointInterval(5*time.Millisecond), WithStateBackend(state.Pebble(t.TempDir())))
	src := FromSource(env, &rangeSrc{splits: 1, perSplit: 1 << 40, delay: 100 * time.Microsecond, readerFailAt: -1}, "range", WithWatermarks(wm)).UID("src")
	counts := Map(Count(KeyBy(src, func(v int64) int64 { return v % 7 })).UID("counts"), func(kv KV[int64, int64]) (int64, error) { return kv.Value, nil })
	SinkTo(counts, twoPhase(sink)).UID("sink")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- env.Execute(ctx, "documented") }()
	for deadline := time.Now().Add(20 * time.Second); env.Status().Checkpoints.Completed < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoints: %+v", env.Status().Checkpoints)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "splitflow_") {
			continue
		}
		n++
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("metric %s is not in the metrics table of docs/operations.md", name)
		}
	}
	if n < 10 {
		t.Fatalf("the job registered %d splitflow_ metrics, want its checkpoint, state, task and operator metrics", n)
	}
}
