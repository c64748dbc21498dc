package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
)

// blobAdapters runs fn over the Blob of each storage of this package: a
// directory, memory and S3 (gofakes3).
func blobAdapters(t *testing.T, fn func(t *testing.T, b Blob)) {
	storages(t, func(t *testing.T, open func(opts ...StorageOption) Storage) {
		switch s := open().(type) {
		case *DirStorage:
			fn(t, s.blob)
		case *MemoryStorage:
			fn(t, s.blob)
		case *S3Storage:
			fn(t, s.blob)
		default:
			t.Fatalf("unknown storage %T", s)
		}
	})
}

func readKey(t *testing.T, b Blob, key string) ([]byte, error) {
	t.Helper()
	r, err := b.Open(key, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func listKeys(t *testing.T, b Blob, prefix string) []string {
	t.Helper()
	objs, err := b.List(prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	var out []string
	for _, o := range objs {
		if strings.Contains(o.Key, "/.") { // an adapter's temporary file
			continue
		}
		out = append(out, fmt.Sprintf("%s=%d", o.Key, o.Size))
	}
	slices.Sort(out)
	return out
}

// Rule: every adapter keeps the contract of Blob that BlobStorage builds
// on: absent keys read as fs.ErrNotExist and delete as nil; Create stores
// and replaces; CreateIfAbsent refuses an existing key with fs.ErrExist,
// changing nothing; List shows what was created under a prefix, with
// sizes, and nothing deleted.
func TestBlobAdaptersKeepTheContract(t *testing.T) {
	blobAdapters(t, func(t *testing.T, b Blob) {
		if _, err := b.Open("chk-1/missing", 0); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open of a missing key = %v; want fs.ErrNotExist", err)
		}
		if _, err := b.Stat("chk-1/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Stat of a missing key = %v; want fs.ErrNotExist", err)
		}
		if err := b.Delete("chk-1/missing"); err != nil {
			t.Fatalf("Delete of a missing key = %v; want nil", err)
		}
		for key, data := range map[string]string{"chk-1/a": "first", "chk-1/b": "", "chk-12/c": "ccc", "shared/d": "dddd"} {
			if err := b.Create(key, strings.NewReader(data), int64(len(data))); err != nil {
				t.Fatalf("Create(%s): %v", key, err)
			}
		}
		if err := b.Create("chk-1/a", strings.NewReader("second"), 6); err != nil {
			t.Fatalf("Create over an existing key: %v", err)
		}
		if got, err := readKey(t, b, "chk-1/a"); err != nil || string(got) != "second" {
			t.Fatalf("chk-1/a = %q, %v; want the second Create's bytes", got, err)
		}
		if n, err := b.Stat("shared/d"); err != nil || n != 4 {
			t.Fatalf("Stat(shared/d) = %d, %v; want 4", n, err)
		}
		if got, want := listKeys(t, b, "chk-"), []string{"chk-1/a=6", "chk-1/b=0", "chk-12/c=3"}; !slices.Equal(got, want) {
			t.Fatalf("List(chk-) = %v; want %v", got, want)
		}
		if got, want := listKeys(t, b, "chk-1/"), []string{"chk-1/a=6", "chk-1/b=0"}; !slices.Equal(got, want) {
			t.Fatalf("List(chk-1/) = %v; want %v", got, want)
		}
		if got := listKeys(t, b, "records/"); len(got) != 0 {
			t.Fatalf("List(records/) of nothing = %v", got)
		}

		if err := b.CreateIfAbsent("records/r", []byte("mine")); err != nil {
			t.Fatalf("CreateIfAbsent of a new key: %v", err)
		}
		if err := b.CreateIfAbsent("records/r", []byte("theirs")); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("CreateIfAbsent of an existing key = %v; want fs.ErrExist", err)
		}
		if got, err := readKey(t, b, "records/r"); err != nil || string(got) != "mine" {
			t.Fatalf("records/r = %q, %v after a refused create; want the first bytes", got, err)
		}

		for _, key := range []string{"chk-1/a", "chk-1/b", "chk-12/c", "shared/d", "records/r"} {
			if err := b.Delete(key); err != nil {
				t.Fatalf("Delete(%s): %v", key, err)
			}
		}
		if got := listKeys(t, b, ""); len(got) != 0 {
			t.Fatalf("after deleting every key, List lists %v", got)
		}
		if err := b.CreateIfAbsent("records/r", []byte("again")); err != nil {
			t.Fatalf("CreateIfAbsent of a deleted key: %v", err)
		}
		if b.Location("") == "" || !strings.Contains(b.Location("records/r"), "records/r") {
			t.Fatalf("Location names nothing: %q, %q", b.Location(""), b.Location("records/r"))
		}
	})
}

// Rule: of concurrent CreateIfAbsent calls on one key exactly one
// succeeds, and the object holds its bytes (exactly-once rests on it).
func TestBlobAdaptersCreateIfAbsentHasOneWinner(t *testing.T) {
	blobAdapters(t, func(t *testing.T, b Blob) {
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { errs[i] = b.CreateIfAbsent("chk-3/_metadata", []byte(fmt.Sprintf("writer %d", i))) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("writers %d and %d both created the key", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, fs.ErrExist):
				t.Fatalf("writer %d: %v; want nil or fs.ErrExist", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer created the key")
		}
		if got, err := readKey(t, b, "chk-3/_metadata"); err != nil || string(got) != fmt.Sprintf("writer %d", winner) {
			t.Fatalf("the key holds %q, %v; want writer %d's bytes", got, err, winner)
		}
	})
}

// userBlob is a Blob as a user writes one, outside this package's
// adapters: only the exported methods.
type userBlob struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func (b *userBlob) Open(key string, _ int64) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (b *userBlob) Create(key string, r io.Reader, _ int64) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objects[key] = data
	return nil
}

func (b *userBlob) CreateIfAbsent(key string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[key]; ok {
		return fs.ErrExist
	}
	b.objects[key] = bytes.Clone(data)
	return nil
}

func (b *userBlob) Stat(key string) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[key]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return int64(len(data)), nil
}

func (b *userBlob) List(prefix string) ([]BlobObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BlobObject
	for k, v := range b.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, BlobObject{Key: k, Size: int64(len(v))})
		}
	}
	return out, nil
}

func (b *userBlob) Delete(key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.objects, key)
	return nil
}

func (b *userBlob) Location(key string) string { return "user:" + key }

// Rule: a user with another store writes only the Blob: NewBlobStorage
// gives a Storage and a RecordStorage with the same rules (here a
// checkpoint, retention, a shared file and a record).
func TestNewBlobStorageOnAUsersBlob(t *testing.T) {
	s, err := NewBlobStorage(&userBlob{objects: map[string][]byte{}}, quiet, WithRetained(1))
	if err != nil {
		t.Fatal(err)
	}
	runScript(t, s, "begin 1; put a.sst; write 1 a.sst; commit 1; begin 2; write 2; commit 2; want; load 2")
	cp, err := s.Latest()
	if err != nil || cp.ID != 2 {
		t.Fatalf("Latest = %v, %v; want checkpoint 2", cp, err)
	}
	if ids, err := s.List(); err != nil || !slices.Equal(ids, []int64{2}) {
		t.Fatalf("List = %v, %v; want [2] under retention 1", ids, err)
	}
	if err := s.CreateRecord("owner", []byte("job")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRecord("owner", []byte("another job")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second CreateRecord = %v; want ErrRecordExists", err)
	}
	if _, err := NewBlobStorage(nil); err == nil {
		t.Fatal("NewBlobStorage(nil) accepted")
	}
}
