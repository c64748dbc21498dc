package runtime

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/internal/s3test"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/state"
)

// benchStateSizesMB are the pebble state sizes the checkpoint storage
// benchmarks run at: 10 and 100 MB, or SPLITFLOW_BENCH_STATE_MB (a comma
// list, such as "1000" for the 1 GB run, which takes minutes and holds the
// state several times in memory on the in-process S3 server).
func benchStateSizesMB(b *testing.B) []int {
	v := os.Getenv("SPLITFLOW_BENCH_STATE_MB")
	if v == "" {
		return []int{10, 100}
	}
	var sizes []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("SPLITFLOW_BENCH_STATE_MB=%q: want a comma list of sizes in MB, such as 10,100,1000", v)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// s3Traffic counts what reaches the in-process S3 server: requests, bytes
// of request bodies, and objects created (a PUT of a whole object, or the
// completion of a multipart upload; a part is not an object).
type s3Traffic struct {
	requests, bytes, objects, parts atomic.Int64
	// latency is added before each request is served
	// (SPLITFLOW_BENCH_S3_LATENCY, a Go duration, default none): the
	// in-process server answers in microseconds, a remote S3 in tens of
	// milliseconds, and only a delay per request shows what round trips
	// would cost there.
	latency time.Duration
}

func (c *s3Traffic) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		if c.latency > 0 {
			time.Sleep(c.latency)
		}
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPut && q.Has("partNumber"):
			c.parts.Add(1)
		case r.Method == http.MethodPut, r.Method == http.MethodPost && q.Has("uploadId"):
			c.objects.Add(1)
		}
		if r.Body != nil {
			r.Body = &countingBody{r.Body, &c.bytes}
		}
		next.ServeHTTP(w, r)
	})
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type s3Counts struct{ requests, bytes, objects, parts int64 }

func (c *s3Traffic) snapshot() s3Counts {
	return s3Counts{c.requests.Load(), c.bytes.Load(), c.objects.Load(), c.parts.Load()}
}

func (a s3Counts) minus(b s3Counts) s3Counts {
	return s3Counts{a.requests - b.requests, a.bytes - b.bytes, a.objects - b.objects, a.parts - b.parts}
}

// BenchmarkPebbleCheckpointOnS3 is the completion of a pebble keyed
// state's checkpoint on S3 (the in-process server through the real client
// over HTTP) against a directory, in the same iteration, at each size of
// benchStateSizesMB (values of 1 KiB of random bytes, so that compression
// does not shrink them): the synchronous freeze, the materialization, the
// upload of the files the storage does not have, the blob and the commit
// with its retention and collection. "full" is a first checkpoint into an
// empty storage, once Pebble's compactions settled; "incremental" follows
// a change of 1% of the keys (a checkpoint among them may carry the
// rewrite of a compaction the changes started, as in a running job). Per
// checkpoint: dir-ms and s3-ms and their ratio; on S3, the bytes of
// request bodies, the objects created, the parts of multipart uploads and
// the HTTP requests, counted by a handler in front of the server.
func BenchmarkPebbleCheckpointOnS3(b *testing.B) {
	for _, mb := range benchStateSizesMB(b) {
		b.Run(fmt.Sprintf("state=%dMB", mb), func(b *testing.B) {
			benchPebbleCheckpointOnS3(b, mb)
		})
	}
}

func benchPebbleCheckpointOnS3(b *testing.B, mb int) {
	const valueSize = 1 << 10
	keys := mb << 20 / valueSize
	var traffic s3Traffic
	if v := os.Getenv("SPLITFLOW_BENCH_S3_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("SPLITFLOW_BENCH_S3_LATENCY=%q: want a duration such as 20ms", v)
		}
		traffic.latency = d
	}
	srv := s3test.NewWrapped(b, traffic.wrap)
	srv.Env(b)
	noLog := checkpoint.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

	var value state.ValueState[string]
	p, stop, err := openKeyedOn(b, benchStateConfig(b, kindPebble), nil, 1, 0, KeyedProcessFuncs[string, string, string]{
		Setup: func(ctx *KeyedContext[string, string]) error {
			var err error
			value, err = state.NewValueState[string]("value").Handle(ctx)
			return err
		},
		Element: func(*KeyedContext[string, string], string) error { return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	buf := make([]byte, valueSize)
	set := func(i int) {
		_, _ = rand.Read(buf)
		p.state.SetKey("key-" + strconv.Itoa(i))
		value.Update(string(buf))
	}
	for i := range keys {
		set(i)
	}
	pk := p.state.Pebble
	id := int64(0)
	// checkpoint runs one checkpoint of the state into st, whose stored
	// files the backend knows as stored.
	checkpointTo := func(st checkpoint.Storage, stored map[string]checkpoint.FileHandle) time.Duration {
		pk.Storage, pk.Stored = st, stored
		id++
		start := time.Now()
		enc, err := p.FreezeState(id)
		if err != nil {
			b.Fatal(err)
		}
		blob, files, err := enc(func() bool { return false })
		p.ThawState()
		if err != nil {
			b.Fatal(err)
		}
		w, err := st.Begin(id)
		if err != nil {
			b.Fatal(err)
		}
		h, err := w.WriteState(checkpoint.OperatorOwner("p", 0), blob, files...)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(checkpoint.Metadata{ID: id, States: []checkpoint.StateHandle{h}}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// settle waits until Pebble's background compactions are done, so
	// that every storage checkpoints the same files and a measured
	// checkpoint does not carry the rewrite of a compaction still running
	// from the writes before it: checkpoints into memory until two in a
	// row, a quarter second apart, store no new file.
	settle := func() {
		mem, err := checkpoint.NewMemoryStorage(noLog)
		if err != nil {
			b.Fatal(err)
		}
		stored := map[string]checkpoint.FileHandle{}
		checkpointTo(mem, stored)
		for quiet, tries := 0, 0; quiet < 2; tries++ {
			if tries == 600 {
				b.Fatal("pebble's compactions did not settle in 150 s")
			}
			time.Sleep(250 * time.Millisecond)
			checkpointTo(mem, stored)
			if pk.LastSnapshot.NewFiles == 0 {
				quiet++
			} else {
				quiet = 0
			}
		}
	}
	type target struct {
		st     checkpoint.Storage
		stored map[string]checkpoint.FileHandle
	}
	fresh := func(n int) (dir, s3 target) {
		d, err := checkpoint.NewDirStorage(b.TempDir(), noLog)
		if err != nil {
			b.Fatal(err)
		}
		s, err := checkpoint.NewS3Storage(srv.URLOf(fmt.Sprintf("state-%dmb-%d", mb, n)), noLog)
		if err != nil {
			b.Fatal(err)
		}
		return target{d, map[string]checkpoint.FileHandle{}}, target{s, map[string]checkpoint.FileHandle{}}
	}
	report := func(b *testing.B, dirT, s3T time.Duration, c s3Counts) {
		n := float64(b.N)
		b.ReportMetric(float64(dirT.Milliseconds())/n, "dir-ms/ckpt")
		b.ReportMetric(float64(s3T.Milliseconds())/n, "s3-ms/ckpt")
		b.ReportMetric(float64(s3T)/float64(dirT), "s3/dir")
		b.ReportMetric(float64(c.bytes)/n, "s3-bytes/ckpt")
		b.ReportMetric(float64(c.objects)/n, "objects/ckpt")
		b.ReportMetric(float64(c.parts)/n, "parts/ckpt")
		b.ReportMetric(float64(c.requests)/n, "requests/ckpt")
	}
	b.Run("full", func(b *testing.B) {
		settle()
		var dirT, s3T time.Duration
		var c s3Counts
		n := 0
		for b.Loop() {
			n++
			dir, s3 := fresh(n)
			dirT += checkpointTo(dir.st, dir.stored)
			before := traffic.snapshot()
			s3T += checkpointTo(s3.st, s3.stored)
			d := traffic.snapshot().minus(before)
			c = s3Counts{c.requests + d.requests, c.bytes + d.bytes, c.objects + d.objects, c.parts + d.parts}
		}
		report(b, dirT, s3T, c)
		b.ReportMetric(float64(pk.LastSnapshot.Bytes), "state-bytes")
	})
	b.Run("incremental", func(b *testing.B) {
		settle()
		dir, s3 := fresh(0)
		checkpointTo(dir.st, dir.stored)
		checkpointTo(s3.st, s3.stored)
		var dirT, s3T time.Duration
		var c s3Counts
		round := 0
		for b.Loop() {
			b.StopTimer()
			round++
			for i := range keys / 100 {
				set((i*7919 + round*104729) % keys)
			}
			b.StartTimer()
			dirT += checkpointTo(dir.st, dir.stored)
			before := traffic.snapshot()
			s3T += checkpointTo(s3.st, s3.stored)
			d := traffic.snapshot().minus(before)
			c = s3Counts{c.requests + d.requests, c.bytes + d.bytes, c.objects + d.objects, c.parts + d.parts}
		}
		report(b, dirT, s3T, c)
		b.ReportMetric(float64(pk.LastSnapshot.Bytes), "state-bytes")
	})
	// A savepoint of the newest checkpoint, copied into a new savepoint
	// directory on the same kind of storage: what TriggerSavepoint waits
	// for once its checkpoint is complete.
	b.Run("savepoint", func(b *testing.B) {
		settle()
		dir, s3 := fresh(-1)
		checkpointTo(dir.st, dir.stored)
		checkpointTo(s3.st, s3.stored)
		dirChk, err := dir.st.Load(id - 1)
		if err != nil {
			b.Fatal(err)
		}
		s3Chk, err := s3.st.Load(id)
		if err != nil {
			b.Fatal(err)
		}
		var dirT, s3T time.Duration
		var c s3Counts
		n := 0
		for b.Loop() {
			n++
			start := time.Now()
			if _, err := checkpoint.WriteSavepoint(dirChk, b.TempDir(), "", noLog); err != nil {
				b.Fatal(err)
			}
			dirT += time.Since(start)
			before := traffic.snapshot()
			start = time.Now()
			if _, err := checkpoint.WriteSavepoint(s3Chk, srv.URLOf(fmt.Sprintf("savepoints-%dmb/%d", mb, n)), "", noLog); err != nil {
				b.Fatal(err)
			}
			s3T += time.Since(start)
			d := traffic.snapshot().minus(before)
			c = s3Counts{c.requests + d.requests, c.bytes + d.bytes, c.objects + d.objects, c.parts + d.parts}
		}
		report(b, dirT, s3T, c)
	})
}
