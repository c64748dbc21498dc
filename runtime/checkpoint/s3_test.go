package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// s3Write writes b through w and returns the metadata to commit.
func s3Write(t *testing.T, w Writer, b blobs) Metadata {
	t.Helper()
	m := Metadata{ID: w.ID(), Timestamp: testTime, Fingerprint: "graph-v1"}
	for owner, data := range b {
		h, err := w.WriteState(owner, data)
		if err != nil {
			t.Fatalf("WriteState(%s): %v", owner, err)
		}
		m.States = append(m.States, h)
	}
	return m
}

// Rule (atomic completion): a checkpoint exists only once its metadata is
// written, last; a metadata PUT that fails leaves nothing that looks
// complete, and no object of the checkpoint behind.
func TestS3FailedMetadataPutLeavesNoCheckpoint(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3Client(f.client(2)))
	w := mustBegin(t, s, 1)
	m := s3Write(t, w, testBlobs(1))
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if isKey(r, http.MethodPut, "/"+metadataFile) {
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	err := w.Commit(m)
	if err == nil {
		t.Fatal("Commit succeeded though every metadata PUT failed")
	}
	if !strings.Contains(err.Error(), "chk-1/_metadata") {
		t.Fatalf("Commit: %q does not name the metadata object", err)
	}
	f.setFault(nil)
	if ids, err := s.List(); err != nil || len(ids) != 0 {
		t.Fatalf("List after a failed commit = %v, %v; want nothing", ids, err)
	}
	if keys := f.keys(t, "job/chk-1/"); len(keys) != 0 {
		t.Fatalf("a failed commit left %v", keys)
	}
}

// A metadata PUT that succeeds but answers an error (the answer lost) is
// never reported wrongly: retried, the conditional PUT finds the object
// and it is ours, so Commit succeeds; with no retry left, Commit fails and
// takes the metadata back, so the checkpoint does not look complete.
func TestS3MetadataPutStoredButAnsweredError(t *testing.T) {
	for _, c := range []struct {
		name     string
		attempts int
		complete bool
	}{
		{"retried", 3, true},
		{"not retried", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeS3(t)
			s := f.open(t, "job", WithS3Client(f.client(c.attempts)))
			w := mustBegin(t, s, 1)
			b := testBlobs(1)
			m := s3Write(t, w, b)
			var once atomic.Bool
			f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
				if isKey(r, http.MethodPut, "/"+metadataFile) && once.CompareAndSwap(false, true) {
					next.ServeHTTP(httptest.NewRecorder(), r) // stored...
					http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
					return true // ...but answered 500
				}
				return false
			})
			err := w.Commit(m)
			f.setFault(nil)
			ids, lerr := s.List()
			if lerr != nil {
				t.Fatal(lerr)
			}
			if c.complete {
				if err != nil {
					t.Fatalf("Commit: %v; the retried PUT found its own metadata stored", err)
				}
				cp, err := s.Latest()
				if err != nil {
					t.Fatal(err)
				}
				checkContent(t, cp, sortedStates(m), b)
				return
			}
			if err == nil {
				t.Fatal("Commit returned nil though it never saw its metadata stored")
			}
			if len(ids) != 0 {
				t.Fatalf("a Commit that failed left checkpoints %v that look complete", ids)
			}
		})
	}
}

func sortedStates(m Metadata) Metadata {
	m.States = slices.Clone(m.States)
	slices.SortFunc(m.States, func(a, b StateHandle) int { return a.Owner.Compare(b.Owner) })
	return m
}

// Two writers cannot both claim one checkpoint id where the server
// honours If-None-Match: the second Commit fails with ErrExists, removes
// only what it wrote, and the first one's checkpoint is intact.
func TestS3TwoWritersCannotBothClaimOneID(t *testing.T) {
	f := newFakeS3(t)
	a, b := f.open(t, "job"), f.open(t, "job")
	if !a.ConditionalWrites() {
		t.Fatal("the fake server honours If-None-Match, but the probe says it does not")
	}
	wa, wb := mustBegin(t, a, 1), mustBegin(t, b, 1)
	ba, bb := testBlobs(1), blobs{OperatorOwner("source", 0): []byte("the other writer's state")}
	ma, mb := s3Write(t, wa, ba), s3Write(t, wb, bb)
	if err := wa.Commit(ma); err != nil {
		t.Fatal(err)
	}
	err := wb.Commit(mb)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "another writer") {
		t.Fatalf("second writer's Commit of checkpoint 1: %v, want ErrExists saying another writer completed it", err)
	}
	cp, err := b.Load(1)
	if err != nil {
		t.Fatalf("the first writer's checkpoint after the second one's failed commit: %v", err)
	}
	checkContent(t, cp, sortedStates(ma), ba)
	for _, k := range f.keys(t, "job/chk-1/") {
		if strings.Contains(k, wb.(*blobWriter).token) {
			t.Fatalf("the losing writer left %s", k)
		}
	}
}

// A server that ignores If-None-Match is detected when the storage opens
// (ConditionalWrites false, a warning). What then holds: two writers of
// one id both commit and the last metadata PUT wins, but the checkpoint
// read back is still whole, one writer's, never a mix, since each
// writer's objects have names of their own.
func TestS3ServerIgnoringConditionalWritesDetected(t *testing.T) {
	f := newFakeS3(t)
	f.ignoreConditional = true
	var logs logBuffer
	a, err := NewS3Storage("s3://"+f.bucket+"/job", WithS3Client(f.client(3)), logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	if a.ConditionalWrites() {
		t.Fatal("ConditionalWrites is true on a server that ignores If-None-Match")
	}
	if !strings.Contains(logs.String(), "ignores If-None-Match") {
		t.Fatalf("no warning logged: %q", logs.String())
	}
	b := f.open(t, "job")
	wa, wb := mustBegin(t, a, 1), mustBegin(t, b, 1)
	bb := blobs{OperatorOwner("source", 0): []byte("the other writer's state")}
	ma, mb := s3Write(t, wa, testBlobs(1)), s3Write(t, wb, bb)
	if err := wa.Commit(ma); err != nil {
		t.Fatal(err)
	}
	if err := wb.Commit(mb); err != nil {
		t.Fatalf("without conditional writes the second commit cannot be told from a first: %v", err)
	}
	cp, err := a.Load(1)
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, sortedStates(mb), bb)
}

// Throttling and 5xx answers are retried with backoff: a storage whose
// every first attempt at a request fails with 503 SlowDown or 500 still
// checkpoints, restores and collects, losing nothing.
func TestS3RetriesThrottlingAnd5xx(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithRetained(1))
	var mu sync.Mutex
	seen := map[string]bool{}
	var failed atomic.Int64
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		k := r.Method + " " + r.URL.String()
		mu.Lock()
		first := !seen[k]
		seen[k] = true
		mu.Unlock()
		if !first {
			return false
		}
		failed.Add(1)
		if failed.Load()%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
		} else {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "<Error><Code>InternalError</Code></Error>")
		}
		return true
	})
	for id := int64(1); id <= 3; id++ {
		runScript(t, s, fmt.Sprintf("begin %d; put f%d; write %d f%d; commit %d; load %d", id, id, id, id, id, id))
	}
	runScript(t, s, "want f3")
	if failed.Load() < 10 {
		t.Fatalf("only %d requests failed once; the test injects too little", failed.Load())
	}
}

// Every request has a timeout: a server that never answers makes each
// operation fail with an error, never hang.
func TestS3UnansweredRequestsTimeOut(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3RequestTimeout(300*time.Millisecond), WithS3Client(f.client(2)))
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
		return true
	})
	if _, err := s.Begin(1); err == nil {
		t.Fatal("Begin succeeded against a server that never answers")
	}
	if _, err := s.Latest(); err == nil {
		t.Fatal("Latest succeeded against a server that never answers")
	}
	if _, err := s.PutFile("a.sst", localFile(t, "x")); err == nil {
		t.Fatal("PutFile succeeded against a server that never answers")
	}
	if _, err := NewS3Storage("s3://"+f.bucket+"/job", quiet, WithS3Client(f.client(1)), WithS3RequestTimeout(300*time.Millisecond)); err == nil {
		t.Fatal("NewS3Storage succeeded against a server that never answers")
	}
}

// A shared file larger than a part is uploaded in parts, and comes back
// whole and verified.
func TestS3LargeSharedFileUsesMultipart(t *testing.T) {
	f := newFakeS3(t)
	const part = 5 << 20
	s := f.open(t, "job", WithS3PartSize(part), WithS3UploadConcurrency(3))
	var parts atomic.Int64
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method == http.MethodPut && r.URL.Query().Get("uploadId") != "" {
			parts.Add(1)
		}
		return false
	})
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*part+part/2)/16)
	path := filepath.Join(t.TempDir(), "big.sst")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := s.PutFile("big.sst", path)
	if err != nil {
		t.Fatal(err)
	}
	if n := parts.Load(); n != 3 {
		t.Fatalf("a file of 2.5 parts was uploaded in %d parts, want 3", n)
	}
	w := mustBegin(t, s, 1)
	sh, err := w.WriteState(OperatorOwner("kv", 0), []byte("x"), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(Metadata{ID: 1, States: []StateHandle{sh}}); err != nil {
		t.Fatal(err)
	}
	cp, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored.sst")
	if err := cp.CopyFile(h, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored %d bytes, %v; want the %d put", len(got), err, len(data))
	}
}

// A damaged state object is an error naming its key.
func TestS3DamagedObjectNamesKey(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job")
	fakes.Store(s, f)
	defer fakes.Delete(s)
	commit(t, s, 1, testBlobs(1))
	damageState(t, s, 1)
	_, err := s.Load(1)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "s3://checkpoints/job/chk-1/") {
		t.Fatalf("Load of a damaged checkpoint: %v, want ErrCorrupt naming s3://checkpoints/job/chk-1/...", err)
	}
}

// A checkpoint whose commit never returned (its metadata beside its
// writer's marker) is passed over when damaged, as on a directory; one
// whose commit returned is not (TestStorageDamagedReportedCheckpointIsNotPassedOver).
func TestS3InterruptedCommitPassedOverWhenDamaged(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job")
	fakes.Store(s, f)
	defer fakes.Delete(s)
	commit(t, s, 1, testBlobs(1))
	// Checkpoint 2's commit is cut short after the metadata PUT: the
	// marker's DELETE never arrives.
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/chk-2/"+markerPrefix) {
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	w := mustBegin(t, s, 2)
	m := s3Write(t, w, testBlobs(2))
	tok := w.(*blobWriter).token
	if err := w.Commit(m); err == nil {
		t.Fatal("Commit returned nil though its marker could not be removed")
	}
	f.setFault(nil)
	// What a crash at that instant leaves: metadata beside the marker.
	key := func(n string) string { return "job/" + stateKey(2, n) }
	meta, _ := encodeMetadata(sortedStates(m))
	for _, h := range m.States {
		f.putObject(t, key(h.File), testBlobs(2)[h.Owner])
	}
	f.putObject(t, key(markerPrefix+tok), nil)
	f.putObject(t, key(metadataFile), meta)
	if never, err := s.CommitInterrupted(2); err != nil || !never {
		t.Fatalf("CommitInterrupted(2) = %v, %v; want true", never, err)
	}
	damageState(t, s, 2)
	cp, err := s.Latest()
	if err != nil || cp.ID != 1 || len(cp.Skipped) != 1 {
		t.Fatalf("Latest = %v, %v; want checkpoint 1 with 2 skipped", cp, err)
	}
}

// Bad input fails at start with an error saying what to fix, never a hang.
func TestS3BadInputFailsAtStart(t *testing.T) {
	for _, c := range []struct{ url, says string }{
		{"s3://", "no bucket"},
		{"s3:///prefix", "no bucket"},
		{"s3://Bad_Bucket/x", "bucket name"},
		{"s3://ab/x", "3 to 63"},
		{"s3://bucket/x?region=eu", "no user, port, query"},
		{"s3://bucket/a//b", "empty path segment"},
	} {
		if _, err := NewS3Storage(c.url, quiet); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("NewS3Storage(%q): %v, want an error saying %q", c.url, err, c.says)
		}
	}
	if _, err := OpenStorage("gs://bucket/x", quiet); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Errorf("OpenStorage(gs://...): %v, want unknown scheme", err)
	}

	f := newFakeS3(t)
	if _, err := NewS3Storage("s3://missing-bucket/x", quiet, WithS3Client(f.client(1))); err == nil || !strings.Contains(err.Error(), "NoSuchBucket") || !strings.Contains(err.Error(), "is the bucket there") {
		t.Errorf("a missing bucket: %v, want NoSuchBucket and what to check", err)
	}

	// The standard configuration, from an empty environment.
	home := t.TempDir()
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "none"),
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_ENDPOINT_URL": f.srv.URL, "AWS_ENDPOINT_URL_S3": "", "AWS_REGION": "",
	} {
		t.Setenv(k, v)
	}
	if _, err := NewS3Storage("s3://checkpoints/x", quiet); err == nil || !strings.Contains(err.Error(), "no usable AWS credentials") {
		t.Errorf("no credentials: %v, want an error saying so", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s, err := NewS3Storage("s3://checkpoints/x", quiet)
	if err != nil {
		t.Fatalf("credentials and AWS_ENDPOINT_URL from the environment: %v", err)
	}
	commit(t, s, 1, testBlobs(1))

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	t.Setenv("AWS_ENDPOINT_URL", closed.URL)
	if _, err := NewS3Storage("s3://checkpoints/x", quiet, WithS3MaxAttempts(2), WithS3RequestTimeout(2*time.Second)); err == nil || !strings.Contains(err.Error(), "cannot list the bucket") {
		t.Errorf("an unreachable endpoint: %v, want an error saying the bucket cannot be listed", err)
	}

	for _, o := range []StorageOption{WithS3RequestTimeout(0), WithS3PartSize(1 << 20), WithS3UploadConcurrency(0), WithS3MaxAttempts(0)} {
		if _, err := NewS3Storage("s3://checkpoints/x", quiet, o); err == nil {
			t.Errorf("an invalid S3 option was accepted")
		}
	}
}

// BenchmarkIncrementalCheckpoint is one incremental checkpoint of a
// file-based state backend: a new 8 MiB shared file, 31 earlier ones
// referenced again, 8 state blobs of 64 KiB, Commit with retention 3 and
// collection. On S3 (in-process server) it reports the HTTP requests and
// the bytes sent per checkpoint: requests stay a handful beyond one per
// new object, and bytes are the new file and blobs only, whatever the
// files referenced; dir is the baseline of the same run.
func BenchmarkIncrementalCheckpoint(b *testing.B) {
	const fileSize, blobSize, blobs, kept = 8 << 20, 64 << 10, 8, 31
	data := bytes.Repeat([]byte("0123456789abcdef"), fileSize/16)
	local := filepath.Join(b.TempDir(), "local.sst")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		b.Fatal(err)
	}
	blob := bytes.Repeat([]byte("s"), blobSize)
	run := func(b *testing.B, s Storage, requests, sent *atomic.Int64) {
		var live []FileHandle
		id := int64(0)
		checkpoint := func() {
			id++
			h, err := s.PutFile(fmt.Sprintf("%06d.sst", id), local)
			if err != nil {
				b.Fatal(err)
			}
			live = append(live, h)
			if len(live) > kept+1 {
				live = live[1:]
			}
			w, err := s.Begin(id)
			if err != nil {
				b.Fatal(err)
			}
			m := Metadata{ID: id}
			for i := range blobs {
				var files []FileHandle
				if i == 0 {
					files = live
				}
				st, err := w.WriteState(OperatorOwner("kv", i), blob, files...)
				if err != nil {
					b.Fatal(err)
				}
				m.States = append(m.States, st)
			}
			if err := w.Commit(m); err != nil {
				b.Fatal(err)
			}
		}
		for range kept {
			checkpoint()
		}
		r0, s0 := requests.Load(), sent.Load()
		b.SetBytes(fileSize + blobs*blobSize)
		b.ResetTimer()
		for range b.N {
			checkpoint()
		}
		b.StopTimer()
		if requests != sent {
			b.ReportMetric(float64(requests.Load()-r0)/float64(b.N), "requests/op")
			b.ReportMetric(float64(sent.Load()-s0)/float64(b.N), "sent-bytes/op")
		}
	}
	b.Run("dir", func(b *testing.B) {
		s, err := NewDirStorage(b.TempDir(), quiet)
		if err != nil {
			b.Fatal(err)
		}
		var none atomic.Int64
		run(b, s, &none, &none)
	})
	b.Run("s3", func(b *testing.B) {
		f := newFakeS3(b)
		s := f.open(b, "bench")
		var requests, sent atomic.Int64
		f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			requests.Add(1)
			if r.ContentLength > 0 {
				sent.Add(r.ContentLength)
			}
			return false
		})
		run(b, s, &requests, &sent)
	})
}

// Retention removes every object of a checkpoint it drops, not only its
// metadata.
func TestS3RetentionRemovesObjects(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithRetained(2))
	for id := int64(1); id <= 4; id++ {
		commit(t, s, id, testBlobs(id))
	}
	for _, id := range []int64{1, 2} {
		if keys := f.keys(t, fmt.Sprintf("job/chk-%d/", id)); len(keys) != 0 {
			t.Fatalf("retention left %v of checkpoint %d", keys, id)
		}
	}
	if keys := f.keys(t, "job/chk-4/"); len(keys) != len(testBlobs(4))+1 {
		t.Fatalf("checkpoint 4 is %v, want its %d state objects and metadata", keys, len(testBlobs(4)))
	}
}

// Rule (a failed commit never leaves a damaged checkpoint that looks
// reported): when a Commit fails after its metadata may have been stored
// and the metadata's DELETE fails too, the rest of the checkpoint stays,
// so what is left is whole and marked never reported, not metadata
// pointing at removed state objects that Latest must refuse to pass over.
func TestS3FailedCommitWhoseMetadataCannotBeRemovedStaysWhole(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3Client(f.client(1)))
	commit(t, s, 1, testBlobs(1))
	w := mustBegin(t, s, 2)
	b := testBlobs(2)
	m := s3Write(t, w, b)
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		switch {
		case isKey(r, http.MethodPut, "/chk-2/"+metadataFile):
			next.ServeHTTP(httptest.NewRecorder(), r) // stored...
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true // ...but answered 500
		case isKey(r, http.MethodDelete, "/chk-2/"+metadataFile):
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	if err := w.Commit(m); err == nil {
		t.Fatal("Commit returned nil though its metadata PUT answered an error")
	}
	f.setFault(nil)
	cp, err := s.Latest()
	if err != nil {
		t.Fatalf("Latest after a failed commit whose metadata stayed: %v", err)
	}
	if cp.ID != 2 {
		t.Fatalf("Latest = checkpoint %d, want the whole checkpoint 2 its failed commit left", cp.ID)
	}
	checkContent(t, cp, sortedStates(m), b)
}

// Rule (listing pages): every listing reads all its pages, so a prefix of
// more than 1000 objects (S3's page) loses none: a shared file listed
// after the first page is found by Load, and unused shared files on later
// pages are collected.
func TestS3ListingReadsEveryPage(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job")
	const orphans = 1100
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	client := f.client(3)
	for i := range orphans {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			key := fmt.Sprintf("job/shared/orphan-%05d.sst", i)
			if _, err := client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &f.bucket, Key: &key, Body: strings.NewReader("x")}); err != nil {
				t.Error(err) // not Fatal: off the test's goroutine
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	h, err := s.PutFile("used.sst", localFile(t, "the used file"))
	if err != nil {
		t.Fatal(err)
	}
	var pages atomic.Int64
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" && strings.Contains(r.URL.Query().Get("prefix"), "shared/") {
			pages.Add(1)
		}
		return false
	})
	w := mustBegin(t, s, 1)
	sh, err := w.WriteState(OperatorOwner("kv", 0), []byte("x"), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(Metadata{ID: 1, States: []StateHandle{sh}}); err != nil {
		t.Fatal(err)
	}
	if n := pages.Load(); n < 2 {
		t.Fatalf("listing %d shared files took %d page(s); the server does not page, so this test shows nothing", orphans+1, n)
	}
	if _, err := s.Load(1); err != nil {
		t.Fatalf("Load of a checkpoint whose shared file is listed on the second page: %v", err)
	}
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name != "used.sst" {
		t.Fatalf("after collection %d shared files are left (first %v), want only used.sst", len(files), files[:min(3, len(files))])
	}
}

// Rule (a failed commit never leaves a damaged checkpoint that looks
// reported): when a retried metadata PUT answers 412 and the metadata
// cannot be read back to tell whose it is, it may be this writer's own
// (the first attempt stored it, its answer lost), so the writer's state
// objects and marker stay: the checkpoint is whole and never reported.
func TestS3UnreadableMetadataAfter412KeepsWritersObjects(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3Client(f.client(2)))
	commit(t, s, 1, testBlobs(1))
	w := mustBegin(t, s, 2)
	b := testBlobs(2)
	m := s3Write(t, w, b)
	var once atomic.Bool
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		switch {
		case isKey(r, http.MethodPut, "/chk-2/"+metadataFile) && once.CompareAndSwap(false, true):
			next.ServeHTTP(httptest.NewRecorder(), r) // stored...
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true // ...but answered 500; the retry answers 412
		case isKey(r, http.MethodGet, "/chk-2/"+metadataFile):
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	err := w.Commit(m)
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Commit: %v, want ErrExists (metadata there, unreadable)", err)
	}
	f.setFault(nil)
	cp, err := s.Latest()
	if err != nil {
		t.Fatalf("Latest after a commit that could not read its metadata back: %v", err)
	}
	if cp.ID != 2 {
		t.Fatalf("Latest = checkpoint %d, want the whole checkpoint 2", cp.ID)
	}
	checkContent(t, cp, sortedStates(m), b)
}

// Rule (a failed commit deletes no metadata it never put): a Commit that
// fails before its metadata PUT, here on metadata of another id, leaves
// the checkpoint another writer completed at its id.
func TestS3CommitFailingBeforeMetadataPutLeavesOthersCheckpoint(t *testing.T) {
	f := newFakeS3(t)
	a, b := f.open(t, "job"), f.open(t, "job")
	wa, wb := mustBegin(t, a, 1), mustBegin(t, b, 1)
	ma := s3Write(t, wa, testBlobs(1))
	mb := s3Write(t, wb, testBlobs(1))
	if err := wa.Commit(ma); err != nil {
		t.Fatal(err)
	}
	mb.ID = 9
	if err := wb.Commit(mb); err == nil {
		t.Fatal("Commit of metadata of another id succeeded")
	}
	if _, err := a.Load(1); err != nil {
		t.Fatalf("the first writer's checkpoint after the second one's Commit failed on its own metadata: %v", err)
	}
}

// A metadata PUT that the server stores but never answers times out, and
// the failed Commit takes the metadata back: nothing looks complete.
func TestS3MetadataPutStoredButTimedOutLeavesNoCheckpoint(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3RequestTimeout(500*time.Millisecond))
	w := mustBegin(t, s, 1)
	m := s3Write(t, w, testBlobs(1))
	var stored atomic.Bool
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if isKey(r, http.MethodPut, "/"+metadataFile) {
			next.ServeHTTP(httptest.NewRecorder(), r)
			stored.Store(true)
			<-r.Context().Done() // never answered
			return true
		}
		return false
	})
	if err := w.Commit(m); err == nil {
		t.Fatal("Commit returned nil though its metadata PUT was never answered")
	}
	f.setFault(nil)
	if !stored.Load() {
		t.Fatal("the metadata PUT never reached the server; the test shows nothing")
	}
	if ids, err := s.List(); err != nil || len(ids) != 0 {
		t.Fatalf("List after a commit whose metadata PUT timed out = %v, %v; want nothing", ids, err)
	}
}

// Retention cut short after a checkpoint's metadata was deleted (here its
// other objects' DeleteObjects fails, as a crash there would leave it)
// leaves an incomplete checkpoint, never a damaged one; shared files a
// retained checkpoint uses stay, also across a restart (a new storage
// instance, which knows nothing of earlier puts), and the next commit
// removes the leftovers.
func TestS3InterruptedRetentionKeepsRetainedFiles(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithRetained(1))
	fakes.Store(s, f)
	defer fakes.Delete(s)
	run := newScript(t, s)
	run.run("begin 1; put a b; write 1 a b; commit 1")
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method == http.MethodPost && r.URL.Query().Has("delete") {
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	run.run("begin 2; put c; write 2 b c; commit 2; want b c")
	if keys := f.keys(t, "job/chk-1/"); len(keys) == 0 {
		t.Fatal("checkpoint 1 was removed whole; the fault did not cut its removal short, so the test shows nothing")
	}
	f.setFault(nil)
	if ids, err := s.List(); err != nil || !slices.Equal(ids, []int64{2}) {
		t.Fatalf("List after an interrupted removal of checkpoint 1 = %v, %v; want [2]", ids, err)
	}
	again := f.open(t, "job", WithRetained(1))
	fakes.Store(again, f)
	defer fakes.Delete(again)
	if cp, err := again.Latest(); err != nil || cp.ID != 2 {
		t.Fatalf("Latest after a restart = %v, %v; want checkpoint 2", cp, err)
	}
	runScript(t, again, "put b; begin 3; write 3 b; commit 3; want b; load 3")
	if keys := f.keys(t, "job/chk-1/"); len(keys) != 0 {
		t.Fatalf("the next commit left %v of the half-removed checkpoint 1", keys)
	}
}

// An endpoint URL may carry credentials (http://user:password@host) or
// tokens in its query: an error or a log line about the storage names the
// endpoint's scheme, host and path only. The error of a failed request
// (the SDK's, quoting the URL it sent) is redacted the same way, and stays
// reachable with errors.As.
func TestS3ErrorsNeverEchoEndpointCredentials(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	host := strings.TrimPrefix(closed.URL, "http://")
	home := t.TempDir()
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "none"),
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "",
	} {
		t.Setenv(k, v)
	}
	secrets := []string{"minio-admin", "hunter2", "sig=abc123"}
	for _, c := range []struct {
		env, endpoint string
		sent          bool // a request was sent (the SDK takes the endpoint)
	}{
		{"AWS_ENDPOINT_URL", "http://minio-admin:hunter2@" + host + "/?sig=abc123", false},
		{"AWS_ENDPOINT_URL", "http://minio-admin@" + host + "?sig=abc123", false},
		{"AWS_ENDPOINT_URL", "http://minio-admin:hunter2@" + host, true},
		{"AWS_ENDPOINT_URL_S3", "http://minio-admin:hunter2@" + host, true},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv("AWS_ENDPOINT_URL", "")
			t.Setenv("AWS_ENDPOINT_URL_S3", "")
			t.Setenv(c.env, c.endpoint)
			var logs bytes.Buffer
			_, err := NewS3Storage("s3://checkpoints/x", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				WithS3MaxAttempts(1), WithS3RequestTimeout(2*time.Second))
			if err == nil {
				t.Fatal("an unreachable endpoint was accepted")
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error echoes %q of the endpoint %s: %v", s, c.endpoint, err)
				}
				if strings.Contains(logs.String(), s) {
					t.Errorf("the log echoes %q of the endpoint %s: %s", s, c.endpoint, logs.String())
				}
			}
			if !strings.Contains(err.Error(), "http://"+host) {
				t.Errorf("the error does not name the endpoint http://%s: %v", host, err)
			}
			if !strings.Contains(err.Error(), c.env) {
				t.Errorf("the error does not say the endpoint came from %s: %v", c.env, err)
			}
			var ue *url.Error
			if c.sent && !errors.As(err, &ue) {
				t.Errorf("the request's error is no longer reachable with errors.As: %v", err)
			}
		})
	}
}

// redactEndpoint keeps what tells an operator which server was meant and
// nothing that could let another use it, also from a URL that does not
// parse.
func TestS3EndpointRedactedKeepsSchemeHostAndPath(t *testing.T) {
	for raw, want := range map[string]string{
		"http://minio:9000":                           "http://minio:9000",
		"https://user:pass@s3.internal:9000/base?x=y": "https://s3.internal:9000/base",
		"http://token@host#frag":                      "http://host",
		"http://us%zzer:pa ss@host:9000/?sig=1":       "http://host:9000/",
	} {
		if got := redactEndpoint(raw); got != want {
			t.Errorf("redactEndpoint(%q) = %q, want %q", raw, got, want)
		}
	}
}
