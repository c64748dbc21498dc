package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet drops storage logs in tests that do not look at them.
var quiet = WithLogger(slog.New(slog.DiscardHandler))

// storages runs a test against every Storage implementation: they promise
// the same rules.
func storages(t *testing.T, fn func(t *testing.T, open func(opts ...StorageOption) Storage)) {
	t.Run("dir", func(t *testing.T) {
		dir := t.TempDir()
		fn(t, func(opts ...StorageOption) Storage {
			s, err := NewDirStorage(dir, append([]StorageOption{quiet}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("memory", func(t *testing.T) {
		fn(t, func(opts ...StorageOption) Storage {
			s, err := NewMemoryStorage(append([]StorageOption{quiet}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("s3", func(t *testing.T) {
		f := newFakeS3(t)
		fn(t, func(opts ...StorageOption) Storage {
			s := f.open(t, "jobs/wordcount", opts...)
			fakes.Store(s, f)
			t.Cleanup(func() { fakes.Delete(s) })
			return s
		})
	})
}

// blobs is the state of one test checkpoint, by owner.
type blobs map[Owner][]byte

func testBlobs(id int64) blobs {
	return blobs{
		CoordinatorOwner("source"):     fmt.Appendf(nil, "enumerator state of checkpoint %d", id),
		OperatorOwner("source", 0):     fmt.Appendf(nil, "reader 0 state of checkpoint %d", id),
		OperatorOwner("source", 1):     fmt.Appendf(nil, "reader 1 state of checkpoint %d", id),
		OperatorOwner("sink/kafka", 0): {}, // empty state is state too
	}
}

var testTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// commit writes and commits checkpoint id holding b.
func commit(t *testing.T, s Storage, id int64, b blobs) Metadata {
	t.Helper()
	w, err := s.Begin(id)
	if err != nil {
		t.Fatalf("Begin(%d): %v", id, err)
	}
	m := Metadata{ID: id, Timestamp: testTime.Add(time.Duration(id) * time.Second), Fingerprint: "graph-v1"}
	for owner, data := range b {
		h, err := w.WriteState(owner, data)
		if err != nil {
			t.Fatalf("WriteState(%s): %v", owner, err)
		}
		m.States = append(m.States, h)
	}
	if err := w.Commit(m); err != nil {
		t.Fatalf("Commit(%d): %v", id, err)
	}
	slices.SortFunc(m.States, func(a, b StateHandle) int { return a.Owner.Compare(b.Owner) })
	return m
}

func checkContent(t *testing.T, cp *Checkpoint, want Metadata, b blobs) {
	t.Helper()
	if cp.ID != want.ID || !cp.Timestamp.Equal(want.Timestamp) || cp.Fingerprint != want.Fingerprint || !slices.EqualFunc(cp.States, want.States, StateHandle.equal) {
		t.Fatalf("loaded metadata %+v, want %+v", cp.Metadata, want)
	}
	for owner, data := range b {
		got, ok, err := cp.State(owner)
		if err != nil || !ok || !bytes.Equal(got, data) {
			t.Fatalf("State(%s) = %q, %v, %v; want %q", owner, got, ok, err, data)
		}
	}
}

// Rule (atomic checkpoints): what was committed is what comes back, verified.
func TestStorageRoundTrip(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		b := testBlobs(1)
		m := commit(t, s, 1, b)
		cp, err := s.Latest()
		if err != nil {
			t.Fatal(err)
		}
		checkContent(t, cp, m, b)
		if len(cp.Skipped) != 0 {
			t.Fatalf("skipped %v, want none", cp.Skipped)
		}
		if _, ok, err := cp.State(OperatorOwner("added-later", 0)); ok || err != nil {
			t.Fatalf("State of an unknown owner: ok=%v err=%v, want no state and no error", ok, err)
		}
		cp, err = s.Load(1)
		if err != nil {
			t.Fatal(err)
		}
		checkContent(t, cp, m, b)
	})
}

// A reopened directory (a restarted process) sees the same checkpoints.
func TestDirStorageSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	b := testBlobs(4)
	m := commit(t, s, 4, b)
	s2, err := NewDirStorage(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := s2.Latest()
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, m, b)
}

// A fresh storage has no checkpoint: a clear sentinel, not an empty value.
func TestStorageEmpty(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		if _, err := s.Latest(); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("Latest on empty storage: %v, want ErrNoCheckpoint", err)
		}
		if _, err := s.Load(1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Load(1) on empty storage: %v, want ErrNotFound", err)
		}
		if ids, err := s.List(); err != nil || len(ids) != 0 {
			t.Fatalf("List = %v, %v; want nothing", ids, err)
		}
	})
}

// Retention: the newest N stay, older ones go once a newer one is durable.
func TestStorageKeepsLastN(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open(WithRetained(2))
		for id := int64(1); id <= 5; id++ {
			commit(t, s, id, testBlobs(id))
		}
		ids, err := s.List()
		if err != nil || !slices.Equal(ids, []int64{4, 5}) {
			t.Fatalf("List = %v, %v; want [4 5]", ids, err)
		}
		if _, err := s.Load(3); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Load(3) after retention: %v, want ErrNotFound", err)
		}
		if _, err := s.Load(4); err != nil {
			t.Fatalf("Load(4): %v", err)
		}
	})
}

func TestStorageDefaultRetention(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		for id := int64(1); id <= 5; id++ {
			commit(t, s, id, testBlobs(id))
		}
		if ids, _ := s.List(); !slices.Equal(ids, []int64{3, 4, 5}) {
			t.Fatalf("List = %v, want the default 3 newest", ids)
		}
	})
}

// Ids are never reused: a restored coordinator must continue above them.
func TestStorageRefusesCommittedID(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		commit(t, s, 1, testBlobs(1))
		if _, err := s.Begin(1); !errors.Is(err, ErrExists) {
			t.Fatalf("Begin(1) again: %v, want ErrExists", err)
		}
		if _, err := s.Begin(0); err == nil {
			t.Fatal("Begin(0) succeeded; ids start at 1")
		}
	})
}

// A Writer accepts only what it wrote, once per owner, and ends at Commit
// or Abort; a refused Commit leaves no checkpoint.
func TestWriterRules(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		w, err := s.Begin(1)
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.WriteState(OperatorOwner("map", 0), []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteState(OperatorOwner("map", 0), []byte("y")); !errors.Is(err, ErrDuplicateState) {
			t.Fatalf("second WriteState for one owner: %v, want ErrDuplicateState", err)
		}
		if _, err := w.WriteState(Owner{}, nil); err == nil {
			t.Fatal("WriteState with an empty owner succeeded")
		}
		forged := h
		forged.CRC32C++
		err = w.Commit(Metadata{ID: 1, States: []StateHandle{forged}})
		if !errors.Is(err, ErrUnknownHandle) {
			t.Fatalf("Commit with a forged handle: %v, want ErrUnknownHandle", err)
		}
		if err := w.Commit(Metadata{ID: 1, States: []StateHandle{h}}); !errors.Is(err, ErrWriterClosed) {
			t.Fatalf("Commit after Commit: %v, want ErrWriterClosed", err)
		}
		if ids, _ := s.List(); len(ids) != 0 {
			t.Fatalf("refused commit left checkpoints %v", ids)
		}

		w, err = s.Begin(2)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(Metadata{ID: 3}); err == nil {
			t.Fatal("Commit of checkpoint 2's writer with metadata of 3 succeeded")
		}

		w, err = s.Begin(4)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteState(OperatorOwner("map", 0), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteState(OperatorOwner("map", 1), nil); !errors.Is(err, ErrWriterClosed) {
			t.Fatalf("WriteState after Abort: %v, want ErrWriterClosed", err)
		}
		if ids, _ := s.List(); len(ids) != 0 {
			t.Fatalf("aborted checkpoint listed: %v", ids)
		}
		// Stateless jobs still complete checkpoints.
		if err := mustBegin(t, s, 5).Commit(Metadata{ID: 5}); err != nil {
			t.Fatal(err)
		}
		if cp, err := s.Latest(); err != nil || cp.ID != 5 || len(cp.States) != 0 {
			t.Fatalf("Latest = %+v, %v; want empty checkpoint 5", cp, err)
		}
	})
}

func mustBegin(t *testing.T, s Storage, id int64) Writer {
	t.Helper()
	w, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Tasks write their state from their own goroutines.
func TestWriterConcurrentWrites(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		w := mustBegin(t, s, 1)
		const n = 16
		handles := make([]StateHandle, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				h, err := w.WriteState(OperatorOwner("op", i), fmt.Appendf(nil, "state %d", i))
				if err != nil {
					t.Error(err)
				}
				handles[i] = h
			})
		}
		wg.Wait()
		if err := w.Commit(Metadata{ID: 1, States: handles}); err != nil {
			t.Fatal(err)
		}
		cp, err := s.Latest()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got, ok, err := cp.State(OperatorOwner("op", i))
			if !ok || err != nil || string(got) != fmt.Sprintf("state %d", i) {
				t.Fatalf("State(op/%d) = %q, %v, %v", i, got, ok, err)
			}
		}
	})
}

// A caller reusing its buffers cannot change a checkpoint.
func TestStorageCopiesBlobs(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		w := mustBegin(t, s, 1)
		buf := []byte("abc")
		h, err := w.WriteState(OperatorOwner("op", 0), buf)
		if err != nil {
			t.Fatal(err)
		}
		buf[0] = 'X'
		if err := w.Commit(Metadata{ID: 1, States: []StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
		cp, err := s.Latest()
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := cp.State(OperatorOwner("op", 0))
		got[0] = 'Y'
		again, _, err := cp.State(OperatorOwner("op", 0))
		if err != nil || string(again) != "abc" {
			t.Fatalf("State after caller changes = %q, %v; want abc", again, err)
		}
	})
}

func TestStorageOptionsValidated(t *testing.T) {
	if _, err := NewMemoryStorage(WithRetained(0)); err == nil {
		t.Fatal("retained 0 accepted")
	}
	if _, err := NewDirStorage(t.TempDir(), WithLogger(nil)); err == nil {
		t.Fatal("nil logger accepted")
	}
	if _, err := NewDirStorage(""); err == nil {
		t.Fatal("empty directory accepted")
	}
}

// damageState flips one byte of a non-empty state blob of checkpoint id,
// the way a disk or an operator's mistake damages a checkpoint after it
// completed.
func damageState(t *testing.T, s Storage, id int64) {
	t.Helper()
	switch s := s.(type) {
	case *DirStorage:
		dir := filepath.Join(s.Dir(), chkDir(id))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".state") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 {
				continue
			}
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	case *MemoryStorage:
		s.mem.mu.Lock()
		defer s.mem.mu.Unlock()
		for k, b := range s.mem.objects {
			if strings.HasPrefix(k, chkDir(id)+"/") && strings.HasSuffix(k, ".state") && len(b) > 0 {
				b = slices.Clone(b)
				b[len(b)/2] ^= 0xff
				s.mem.objects[k] = b
				return
			}
		}
	case *S3Storage:
		f := fakeOf(s)
		for _, k := range f.keys(t, s.prefix+chkDir(id)+"/") {
			if !strings.HasSuffix(k, ".state") {
				continue
			}
			b := f.object(t, k)
			if len(b) == 0 {
				continue
			}
			b[len(b)/2] ^= 0xff
			f.putObject(t, k, b)
			return
		}
	}
	t.Fatalf("checkpoint %d has no non-empty state to damage", id)
}

// Restoring from an older checkpoint must never duplicate silently: a
// damaged newest checkpoint whose commit returned (so its sinks may have
// committed its output) is never passed over; Latest says which one is
// damaged and how to proceed.
func TestStorageDamagedReportedCheckpointIsNotPassedOver(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		commit(t, s, 1, testBlobs(1))
		commit(t, s, 2, testBlobs(2))
		damageState(t, s, 2)
		cp, err := s.Latest()
		if err == nil {
			t.Fatalf("Latest returned checkpoint %d (skipped %v), passing over damaged checkpoint 2 that was reported complete", cp.ID, cp.Skipped)
		}
		var de *DamagedCheckpointError
		if !errors.As(err, &de) || de.ID != 2 || de.Previous != 1 || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Latest: %v; want a *DamagedCheckpointError for checkpoint 2 (previous 1) matching ErrCorrupt", err)
		}
		for _, want := range []string{"checkpoint 2 is damaged", "resuming from an older checkpoint would write that output again", "start"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		t.Logf("refused: %v", err)
	})
}

// Rule (held checkpoints): a checkpoint held (Holder.Hold) outlives
// retention with its shared files while it is read, as a savepoint copy
// does off the master while the job's checkpoints go on; once released,
// the next commit's retention removes it.
func TestHeldCheckpointOutlivesRetention(t *testing.T) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		s := open(WithRetained(1))
		writeSharedCheckpoint(t, s, 1)
		h, ok := s.(Holder)
		if !ok {
			t.Fatalf("%T does not implement Holder", s)
		}
		release := h.Hold(1)
		commit(t, s, 2, testBlobs(2))
		commit(t, s, 3, testBlobs(3))
		c, err := s.Load(1)
		if err != nil {
			t.Fatalf("held checkpoint 1 after two commits with one retained: %v", err)
		}
		if err := c.CopyFile(c.Files()[0], filepath.Join(t.TempDir(), "f")); err != nil {
			t.Fatalf("shared file of held checkpoint 1: %v", err)
		}
		release()
		release() // a second release is a no-op
		commit(t, s, 4, testBlobs(4))
		if ids, err := s.List(); err != nil || !slices.Equal(ids, []int64{4}) {
			t.Fatalf("after release and a commit: %v %v, want [4]", ids, err)
		}
	})
}
