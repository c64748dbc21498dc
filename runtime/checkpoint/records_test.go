package checkpoint

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func recordsOf(t *testing.T, s Storage) RecordStorage {
	t.Helper()
	r, ok := s.(RecordStorage)
	if !ok {
		t.Fatalf("%T does not implement RecordStorage", s)
	}
	return r
}

// A record is created once: a second create of its name fails with
// ErrRecordExists and leaves the first one's bytes; names list sorted,
// reads return what was written, a missing name is ErrNotFound, and a
// bad name is refused before anything is written.
func TestStorageRecordIsCreatedOnce(t *testing.T) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		r := recordsOf(t, open())
		if names, err := r.ListRecords(); err != nil || len(names) != 0 {
			t.Fatalf("ListRecords on an empty storage = %v, %v; want none", names, err)
		}
		for _, name := range []string{"log-0002", "log-0001"} {
			if err := r.CreateRecord(name, []byte("first "+name)); err != nil {
				t.Fatalf("CreateRecord(%s): %v", name, err)
			}
		}
		err := r.CreateRecord("log-0001", []byte("second writer"))
		if !errors.Is(err, ErrRecordExists) {
			t.Fatalf("second CreateRecord(log-0001) = %v; want ErrRecordExists", err)
		}
		names, err := r.ListRecords()
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"log-0001", "log-0002"}; !slices.Equal(names, want) {
			t.Fatalf("ListRecords = %v; want %v", names, want)
		}
		got, err := r.ReadRecord("log-0001")
		if err != nil || string(got) != "first log-0001" {
			t.Fatalf("ReadRecord(log-0001) = %q, %v; want the first writer's bytes", got, err)
		}
		if _, err := r.ReadRecord("log-0003"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadRecord of a missing record = %v; want ErrNotFound", err)
		}
		for _, bad := range []string{"", "a/b", ".hidden", "_mine"} {
			if err := r.CreateRecord(bad, nil); err == nil {
				t.Fatalf("CreateRecord(%q) succeeded; want an error naming the rule", bad)
			}
		}
		if names, _ := r.ListRecords(); len(names) != 2 {
			t.Fatalf("refused names left records behind: %v", names)
		}
	})
}

// Of writers racing to create one record, exactly one succeeds and the
// record holds its bytes; every other one gets ErrRecordExists. This is
// the race two claimants of a slot run.
func TestStorageRecordRaceHasOneWinner(t *testing.T) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		s := open()
		r := recordsOf(t, s)
		const writers = 8
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = r.CreateRecord("claim", fmt.Appendf(nil, "writer %d", i))
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("writers %d and %d both created the record", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, ErrRecordExists):
				t.Fatalf("writer %d: %v; want nil or ErrRecordExists", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer created the record")
		}
		got, err := r.ReadRecord("claim")
		if err != nil || string(got) != fmt.Sprintf("writer %d", winner) {
			t.Fatalf("record = %q, %v; want the winner's (writer %d)", got, err, winner)
		}
	})
}

// Records are beside checkpoints, not among them: they are not listed as
// checkpoints, and committing checkpoints (with retention and collection
// of unused files) leaves them alone.
func TestStorageRecordsSurviveRetention(t *testing.T) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		s := open(WithRetained(1))
		r := recordsOf(t, s)
		if err := r.CreateRecord("log-1", []byte("kept")); err != nil {
			t.Fatal(err)
		}
		for id := int64(1); id <= 3; id++ {
			commit(t, s, id, testBlobs(id))
		}
		ids, err := s.List()
		if err != nil || !slices.Equal(ids, []int64{3}) {
			t.Fatalf("List = %v, %v; want [3]", ids, err)
		}
		got, err := r.ReadRecord("log-1")
		if err != nil || string(got) != "kept" {
			t.Fatalf("ReadRecord after retention = %q, %v; want it kept", got, err)
		}
	})
}

// Records are durable where the storage is: a second storage opened on
// the same directory or prefix (another process) sees them and cannot
// create them again.
func TestStorageRecordsSeenByAnotherInstance(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		dir := t.TempDir()
		a, err := NewDirStorage(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewDirStorage(dir, quiet)
		if err != nil {
			t.Fatal(err)
		}
		checkSharedRecords(t, a, b)
	})
	t.Run("s3", func(t *testing.T) {
		f := newFakeS3(t)
		checkSharedRecords(t, f.open(t, "jobs/a"), f.open(t, "jobs/a"))
	})
}

func checkSharedRecords(t *testing.T, a, b RecordStorage) {
	t.Helper()
	if err := a.CreateRecord("claim-7", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateRecord("claim-7", []byte("b")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second instance created an existing record: %v", err)
	}
	names, err := b.ListRecords()
	if err != nil || !slices.Equal(names, []string{"claim-7"}) {
		t.Fatalf("second instance lists %v, %v; want [claim-7]", names, err)
	}
}

// A record PUT that S3 stored but answered 500 is retried by the SDK; the
// retry meets its own bytes (412, read back, equal) and the create
// succeeds, as Commit's metadata PUT does.
func TestS3RecordPutStoredButAnsweredErrorIsOurs(t *testing.T) {
	f := newFakeS3(t)
	s := f.open(t, "job", WithS3Client(f.client(3)))
	var once atomic.Bool
	f.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if isKey(r, http.MethodPut, "/records/claim") && once.CompareAndSwap(false, true) {
			next.ServeHTTP(httptest.NewRecorder(), r)
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	if err := s.CreateRecord("claim", []byte("ours")); err != nil {
		t.Fatalf("CreateRecord: %v; the retried PUT found its own record", err)
	}
	f.setFault(nil)
	if !once.Load() {
		t.Fatal("the fault never fired: the test checked nothing")
	}
	if err := s.CreateRecord("claim", []byte("someone else")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("a different writer's create = %v; want ErrRecordExists", err)
	}
}

// On a server that ignores If-None-Match a record cannot decide a race, so
// CreateRecord refuses, saying why, and writes nothing.
func TestS3RecordsRefusedWithoutConditionalWrites(t *testing.T) {
	f := newFakeS3(t)
	f.ignoreConditional = true
	s, err := NewS3Storage("s3://"+f.bucket+"/job", WithS3Client(f.client(3)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	err = s.CreateRecord("claim", []byte("x"))
	if !errors.Is(err, ErrNoConditionalWrites) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("CreateRecord = %v; want ErrNoConditionalWrites naming If-None-Match", err)
	}
	if keys := f.keys(t, "job/records/"); len(keys) != 0 {
		t.Fatalf("a refused create wrote %v", keys)
	}
}

// BenchmarkRecords: the cost of the slot log's operations, a create per
// checkpoint and a whole read of a 100-record log at a claim, on a
// directory and on S3 (in-process server; requests counted per op).
func BenchmarkRecords(b *testing.B) {
	open := map[string]func(b *testing.B) RecordStorage{
		"dir": func(b *testing.B) RecordStorage {
			s, err := NewDirStorage(b.TempDir(), quiet)
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"s3": func(b *testing.B) RecordStorage { return newFakeS3(b).open(b, "job") },
	}
	for _, name := range []string{"dir", "s3"} {
		b.Run(name+"/create", func(b *testing.B) {
			r := open[name](b)
			before := requestsOf(r)
			i := 0
			for b.Loop() {
				i++
				if err := r.CreateRecord(fmt.Sprintf("log-%019d", i), []byte(`{"version":1,"kind":"checkpoint","epoch":3,"member":"m","checkpoint":42}`)); err != nil {
					b.Fatal(err)
				}
			}
			reportRequests(b, r, before)
		})
		b.Run(name+"/read-100", func(b *testing.B) {
			r := open[name](b)
			for i := range 100 {
				if err := r.CreateRecord(fmt.Sprintf("log-%019d", i+1), []byte(`{"version":1,"kind":"claim","epoch":3,"member":"m"}`)); err != nil {
					b.Fatal(err)
				}
			}
			before := requestsOf(r)
			for b.Loop() {
				names, err := r.ListRecords()
				if err != nil {
					b.Fatal(err)
				}
				for _, n := range names {
					if _, err := r.ReadRecord(n); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRequests(b, r, before)
		})
	}
}

func reportRequests(b *testing.B, r RecordStorage, before int64) {
	if _, ok := r.(*S3Storage); ok {
		b.ReportMetric(float64(requestsOf(r)-before)/float64(b.N), "requests/op")
	}
}

func requestsOf(r RecordStorage) int64 {
	if s, ok := r.(*S3Storage); ok {
		return s.Requests()
	}
	return 0
}

// A deleted record is gone from the listing and from reads, deleting a
// missing one is no error, and the name can be created again (the log
// that deletes records tells a recreated name from the original itself).
func TestStorageRecordDeleteThenRecreate(t *testing.T) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		r := recordsOf(t, open())
		for _, name := range []string{"log-0001", "log-0002"} {
			if err := r.CreateRecord(name, []byte(name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.DeleteRecord("log-0001"); err != nil {
			t.Fatalf("DeleteRecord: %v", err)
		}
		if err := r.DeleteRecord("log-0001"); err != nil {
			t.Fatalf("DeleteRecord of a missing record: %v", err)
		}
		if names, err := r.ListRecords(); err != nil || !slices.Equal(names, []string{"log-0002"}) {
			t.Fatalf("ListRecords = %v, %v; want log-0002 only", names, err)
		}
		if _, err := r.ReadRecord("log-0001"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadRecord of a deleted record = %v; want ErrNotFound", err)
		}
		if err := r.CreateRecord("log-0001", []byte("again")); err != nil {
			t.Fatalf("CreateRecord of a deleted name: %v", err)
		}
		if b, err := r.ReadRecord("log-0001"); err != nil || string(b) != "again" {
			t.Fatalf("ReadRecord = %q, %v; want the new bytes", b, err)
		}
		if err := r.DeleteRecord("../x"); err == nil {
			t.Fatal("DeleteRecord of a bad name succeeded")
		}
	})
}
