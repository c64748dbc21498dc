package checkpoint

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
)

// MemoryStorage keeps checkpoints in memory, for tests and for jobs that
// need no recovery across processes: a BlobStorage on a map, so it follows
// the rules of every storage (a checkpoint exists only after Commit, ids
// are never reused, the newest retained checkpoints are kept, shared files
// and records are kept by the same rules). Objects are copied in and out
// and verified against their checksums, so a caller that modifies a slice
// after WriteState or after State cannot change a checkpoint. Shared files
// are read into memory by PutFile.
type MemoryStorage struct {
	*BlobStorage
	mem *memBlob
}

var _ Storage = (*MemoryStorage)(nil)

// NewMemoryStorage returns an empty in-memory storage.
func NewMemoryStorage(opts ...StorageOption) (*MemoryStorage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &memBlob{objects: map[string][]byte{}}
	return &MemoryStorage{BlobStorage: newBlobStorage(b, cfg), mem: b}, nil
}

// memBlob is a Blob in a map. Stored slices are never changed in place:
// every write stores a new one.
type memBlob struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func (b *memBlob) Open(key string, _ int64) (io.ReadCloser, error) {
	b.mu.Lock()
	data, ok := b.objects[key]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", b.Location(key), fs.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (b *memBlob) Create(key string, r io.Reader, size int64) error {
	data, err := io.ReadAll(io.LimitReader(r, size))
	if err != nil {
		return fmt.Errorf("create %s: %w", b.Location(key), err)
	}
	b.mu.Lock()
	b.objects[key] = data
	b.mu.Unlock()
	return nil
}

func (b *memBlob) CreateIfAbsent(key string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[key]; ok {
		return fmt.Errorf("create %s: %w", b.Location(key), fs.ErrExist)
	}
	b.objects[key] = bytes.Clone(data)
	return nil
}

func (b *memBlob) Stat(key string) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[key]
	if !ok {
		return 0, fmt.Errorf("%s: %w", b.Location(key), fs.ErrNotExist)
	}
	return int64(len(data)), nil
}

func (b *memBlob) List(prefix string) ([]BlobObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BlobObject
	for k, data := range b.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, BlobObject{Key: k, Size: int64(len(data))})
		}
	}
	return out, nil
}

func (b *memBlob) Delete(key string) error {
	b.mu.Lock()
	delete(b.objects, key)
	b.mu.Unlock()
	return nil
}

func (b *memBlob) Location(key string) string {
	if key == "" {
		return "in memory"
	}
	return key + " (in memory)"
}
