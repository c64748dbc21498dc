package checkpoint

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeSharedCheckpoint commits checkpoint id in s with one coordinator
// blob and one subtask blob that uses a shared file.
func writeSharedCheckpoint(t *testing.T, s Storage, id int64) {
	t.Helper()
	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, []byte("shared file bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := s.PutFile("sst-1", local)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := w.WriteState(CoordinatorOwner("src"), []byte("enumerator"))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := w.WriteState(OperatorOwner("count", 0), []byte("keyed"), fh)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(Metadata{ID: id, Timestamp: time.UnixMilli(1700000000000), Fingerprint: "fp", States: []StateHandle{h1, h2}}); err != nil {
		t.Fatal(err)
	}
}

// checkSavepoint loads the savepoint at path and compares it with what
// writeSharedCheckpoint wrote.
func checkSavepoint(t *testing.T, path string, id int64, opts ...StorageOption) {
	t.Helper()
	c, err := OpenRestorePoint(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != id || !c.Savepoint || c.Fingerprint != "fp" {
		t.Fatalf("savepoint metadata: id %d savepoint %v fingerprint %q", c.ID, c.Savepoint, c.Fingerprint)
	}
	for owner, want := range map[Owner]string{CoordinatorOwner("src"): "enumerator", OperatorOwner("count", 0): "keyed"} {
		got, ok, err := c.State(owner)
		if err != nil || !ok || string(got) != want {
			t.Fatalf("state of %s: %q %v %v, want %q", owner, got, ok, err, want)
		}
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := c.CopyFile(c.Files()[0], dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "shared file bytes" {
		t.Fatalf("shared file: %q", b)
	}
}

// Rule: a savepoint is self-contained. Deleting the job's checkpoint
// storage (every blob and shared file) leaves it whole, and its metadata
// marks it a savepoint.
func TestSavepointIsSelfContained(t *testing.T) {
	jobDir := t.TempDir()
	s, err := NewDirStorage(jobDir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	writeSharedCheckpoint(t, s, 4)
	src, err := s.Load(4)
	if err != nil {
		t.Fatal(err)
	}
	path := SavepointPath(t.TempDir(), 4, src.Timestamp)
	if !strings.HasSuffix(path, "savepoint-4-20231114T221320Z") {
		t.Fatalf("savepoint path %s", path)
	}
	if _, err := WriteSavepoint(src, path, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(jobDir); err != nil {
		t.Fatal(err)
	}
	checkSavepoint(t, path, 4)
	// And by its checkpoint's own path.
	checkSavepoint(t, filepath.Join(path, "chk-4"), 4)
	// A second savepoint into the same path is refused: one each.
	if _, err := WriteSavepoint(src, path, ""); err == nil || !strings.Contains(err.Error(), "already holds checkpoint 4") {
		t.Fatalf("second savepoint into one path: %v", err)
	}
}

// Rule: a savepoint on S3 is self-contained too, every object copied
// through the real S3 protocol.
func TestSavepointOnS3(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job")
	writeSharedCheckpoint(t, s, 7)
	src, err := s.Load(7)
	if err != nil {
		t.Fatal(err)
	}
	path := SavepointPath("s3://"+f.bucket+"/savepoints", 7, src.Timestamp)
	opts := []StorageOption{quiet, WithS3Client(f.client(5))}
	if _, err := WriteSavepoint(src, path, "", opts...); err != nil {
		t.Fatal(err)
	}
	for _, k := range f.keys(t, "job/") {
		f.deleteObject(t, k)
	}
	checkSavepoint(t, path, 7, opts...)
}

// Rule: a missing, empty or damaged savepoint is an error naming its
// path, never a fresh start.
func TestRestorePointErrorsNameThePath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-savepoint")
	empty := t.TempDir()
	s, err := NewDirStorage(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	writeSharedCheckpoint(t, s, 2)
	src, err := s.Load(2)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := SavepointPath(t.TempDir(), 2, src.Timestamp)
	if _, err := WriteSavepoint(src, corrupt, ""); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(corrupt, "chk-2", metadataFile)
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing": missing, "empty": empty, "corrupt": corrupt, "missing checkpoint": filepath.Join(corrupt, "chk-9")} {
		if _, err := OpenRestorePoint(path, quiet); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s", name, err, path)
		}
	}
}

// Rule: only savepoints are written in metadata version 3; the mark
// survives a round trip, and a checkpoint without it stays in version 1
// or 2, which an older build reads.
func TestSavepointMarkIsVersion3(t *testing.T) {
	for _, sp := range []bool{false, true} {
		b, err := encodeMetadata(Metadata{ID: 1, Timestamp: time.UnixMilli(5), Fingerprint: "fp", Savepoint: sp})
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(metadataVersionV1)
		if sp {
			want = metadataVersion
		}
		if v := uint32(b[4])<<24 | uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]); v != want {
			t.Fatalf("savepoint %v: version %d, want %d", sp, v, want)
		}
		m, err := decodeMetadata(b)
		if err != nil || m.Savepoint != sp {
			t.Fatalf("savepoint %v: decoded %v, %v", sp, m.Savepoint, err)
		}
	}
}

// writeManyFilesCheckpoint commits checkpoint id in s with one state
// that uses n shared files and one coordinator blob.
func writeManyFilesCheckpoint(t *testing.T, s Storage, id int64, n int) {
	t.Helper()
	var files []FileHandle
	for i := range n {
		local := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(local, []byte(fmt.Sprintf("shared file %d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := s.PutFile(fmt.Sprintf("sst-%d", i), local)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fh)
	}
	w, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := w.WriteState(CoordinatorOwner("src"), []byte("enumerator"))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := w.WriteState(OperatorOwner("count", 0), []byte("keyed"), files...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(Metadata{ID: id, States: []StateHandle{h1, h2}}); err != nil {
		t.Fatal(err)
	}
}

// Rule (savepoint copy, bounded concurrency): a savepoint copies its
// shared files several at a time, never more than
// savepointCopyConcurrency, so that its time follows the bytes copied
// rather than one round trip per file in turn. The first upload waits for
// a second to arrive (a sequential copy never sends one).
func TestSavepointCopiesFilesConcurrentlyWithinBound(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job")
	writeManyFilesCheckpoint(t, s, 3, 12)
	src, err := s.Load(3)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inflight, most, waited := 0, 0, false
	second := make(chan struct{})
	var once sync.Once
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/savepoints/") || !strings.Contains(r.URL.Path, "/shared/") {
			return false
		}
		mu.Lock()
		inflight++
		most = max(most, inflight)
		first := !waited
		waited = true
		if inflight >= 2 {
			once.Do(func() { close(second) })
		}
		mu.Unlock()
		if first {
			select {
			case <-second:
			case <-time.After(10 * time.Second):
			}
		}
		next.ServeHTTP(w, r)
		mu.Lock()
		inflight--
		mu.Unlock()
		return true
	})
	path := SavepointPath("s3://"+f.bucket+"/savepoints", 3, time.Unix(0, 0))
	opts := []StorageOption{quiet, WithS3Client(f.client(5))}
	if _, err := WriteSavepoint(src, path, "", opts...); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 || most > savepointCopyConcurrency {
		t.Fatalf("at most %d shared files were copied at once, want 2 to %d", most, savepointCopyConcurrency)
	}
	if inflight != 0 {
		t.Fatalf("%d uploads still under way after WriteSavepoint returned", inflight)
	}
}

// Rule (savepoint completion): a copy that fails half-way, on a shared
// file or on a state, returns an error naming what failed once every copy
// under way has returned, and leaves no metadata: the path reads as no
// completed savepoint.
func TestFailedSavepointCopyLeavesNoSavepoint(t *testing.T) {
	for _, c := range []struct{ name, failing string }{
		{"shared file", "/shared/sst-5"},
		{"state", ".state"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeS3(t)
			s := f.open(t, "job")
			writeManyFilesCheckpoint(t, s, 3, 12)
			src, err := s.Load(3)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			inflight := 0
			f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
				if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/savepoints/") {
					return false
				}
				if strings.Contains(r.URL.Path, c.failing) {
					http.Error(w, "injected", http.StatusInternalServerError)
					return true
				}
				mu.Lock()
				inflight++
				mu.Unlock()
				next.ServeHTTP(w, r)
				mu.Lock()
				inflight--
				mu.Unlock()
				return true
			})
			path := SavepointPath("s3://"+f.bucket+"/savepoints", 3, time.Unix(0, 0))
			opts := []StorageOption{quiet, WithS3Client(f.client(2))}
			_, err = WriteSavepoint(src, path, "", opts...)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("WriteSavepoint with a failing copy: %v, want an error naming %s", err, path)
			}
			mu.Lock()
			if inflight != 0 {
				t.Errorf("%d copies still under way after WriteSavepoint returned", inflight)
			}
			mu.Unlock()
			f.setFault(nil)
			for _, k := range f.keys(t, "savepoints/") {
				if strings.HasSuffix(k, "/"+metadataFile) {
					t.Errorf("a failed copy left metadata %s", k)
				}
			}
			if _, err := OpenRestorePoint(path, opts...); err == nil || !strings.Contains(err.Error(), "no completed savepoint") {
				t.Fatalf("restore from a failed savepoint: %v, want no completed savepoint", err)
			}
		})
	}
}
