package keyed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
)

// slowPutStorage delays every PutFile, counts how many run at once and
// how many started, and fails the put of one name.
type slowPutStorage struct {
	checkpoint.Storage
	failName           string
	running, max, puts atomic.Int64
}

func (s *slowPutStorage) PutFile(name, path string) (checkpoint.FileHandle, error) {
	s.puts.Add(1)
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for {
		m := s.max.Load()
		if n <= m || s.max.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	if name == s.failName {
		return checkpoint.FileHandle{}, errors.New("refused")
	}
	return s.Storage.PutFile(name, path)
}

func uploadFixture(t *testing.T, n int) ([]pebblestate.StoredFile, []int, []string) {
	dir := t.TempDir()
	var files []pebblestate.StoredFile
	var upload []int
	var paths []string
	for i := range n {
		name := fmt.Sprintf("%06d.sst", i)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		upload = append(upload, len(files))
		paths = append(paths, p)
		files = append(files, pebblestate.StoredFile{Name: name})
	}
	return files, upload, paths
}

// Rule: a snapshot's new files are stored up to pebbleUploads at once
// (round trips to a remote store overlap), each handle lands on its own
// file, and every put has returned when the snapshot's upload does.
func TestPebbleSnapshotStoresFilesConcurrentlyWithinBound(t *testing.T) {
	st := &slowPutStorage{Storage: memStorage(t)}
	pk := &Pebble{Storage: st, instance: "i"}
	files, upload, paths := uploadFixture(t, 3*pebbleUploads)
	err := putPebbleFiles(pk, files, upload, paths, func() bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if got := st.max.Load(); got < 2 || got > pebbleUploads {
		t.Errorf("at most %d puts ran at once, want 2 to %d", got, pebbleUploads)
	}
	if r := st.running.Load(); r != 0 {
		t.Errorf("%d puts still running after the upload returned", r)
	}
	for _, f := range files {
		if f.Handle.Name != "i-"+f.Name || f.Handle.Size != int64(len(f.Name)) {
			t.Errorf("file %s got handle %+v", f.Name, f.Handle)
		}
	}
}

// Rule: after a failed put or an abandoned snapshot no further put
// starts, and none runs once the upload has returned its error.
func TestPebbleSnapshotUploadStopsAtFirstFailureOrAbandon(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		st := &slowPutStorage{Storage: memStorage(t), failName: "i-000001.sst"}
		pk := &Pebble{Storage: st, instance: "i"}
		files, upload, paths := uploadFixture(t, 10*pebbleUploads)
		err := putPebbleFiles(pk, files, upload, paths, func() bool { return false })
		if err == nil || errors.Is(err, ErrSnapshotAbandoned) {
			t.Fatalf("err %v, want the refused put's error", err)
		}
		if r := st.running.Load(); r != 0 {
			t.Errorf("%d puts still running after the upload returned", r)
		}
		// The failure is seen at the latest when the bound's next slot
		// frees: at most the puts of two rounds of the bound started.
		if p := st.puts.Load(); p > 2*pebbleUploads+1 {
			t.Errorf("%d puts started after a failure among the first, want at most %d", p, 2*pebbleUploads+1)
		}
	})
	t.Run("abandon", func(t *testing.T) {
		st := &slowPutStorage{Storage: memStorage(t)}
		pk := &Pebble{Storage: st, instance: "i"}
		files, upload, paths := uploadFixture(t, 4*pebbleUploads)
		var asked atomic.Int64
		err := putPebbleFiles(pk, files, upload, paths, func() bool {
			return asked.Add(1) > 3
		})
		if !errors.Is(err, ErrSnapshotAbandoned) {
			t.Fatalf("err %v, want errSnapshotAbandoned", err)
		}
		if p := st.puts.Load(); p != 3 {
			t.Errorf("%d puts started, want the 3 started before stop said so", p)
		}
		if r := st.running.Load(); r != 0 {
			t.Errorf("%d puts still running after the upload returned", r)
		}
	})
}

func memStorage(t *testing.T) checkpoint.Storage {
	st, err := checkpoint.NewMemoryStorage()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
