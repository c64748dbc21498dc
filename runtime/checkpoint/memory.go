package checkpoint

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// MemoryStorage keeps checkpoints in memory, for tests and for jobs that
// need no recovery across processes. It follows DirStorage's rules: a
// checkpoint exists only after Commit, ids are never reused, the newest
// retained checkpoints are kept, and blobs are copied in and out and
// verified against their checksums, so a caller that modifies a slice
// after WriteState or after State cannot change a checkpoint.
type MemoryStorage struct {
	cfg storageConfig

	mu       sync.Mutex
	complete map[int64]*memCheckpoint
	open     map[int64]bool
}

type memCheckpoint struct {
	meta  Metadata
	blobs map[string][]byte
}

var _ Storage = (*MemoryStorage)(nil)

// NewMemoryStorage returns an empty in-memory storage.
func NewMemoryStorage(opts ...StorageOption) (*MemoryStorage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	return &MemoryStorage{cfg: cfg, complete: map[int64]*memCheckpoint{}, open: map[int64]bool{}}, nil
}

func (s *MemoryStorage) Begin(id int64) (Writer, error) {
	if id <= 0 {
		return nil, fmt.Errorf("checkpoint storage: checkpoint id %d; ids start at 1", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.complete[id]; ok {
		return nil, &CheckpointError{ID: id, Err: ErrExists}
	}
	if s.open[id] {
		return nil, fmt.Errorf("checkpoint storage: checkpoint %d is already being written", id)
	}
	s.open[id] = true
	return &memWriter{s: s, id: id, log: newWriteLog(id), blobs: map[string][]byte{}}, nil
}

type memWriter struct {
	s   *MemoryStorage
	id  int64
	log *writeLog

	mu    sync.Mutex // guards blobs
	blobs map[string][]byte
}

func (w *memWriter) ID() int64 { return w.id }

func (w *memWriter) WriteState(owner Owner, data []byte) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data)}
	w.mu.Lock()
	w.blobs[h.File] = slices.Clone(data)
	w.mu.Unlock()
	w.log.record(h)
	return h, nil
}

func (w *memWriter) Commit(m Metadata) error {
	m, err := w.log.commit(m)
	if errors.Is(err, ErrWriterClosed) {
		return err
	}
	w.mu.Lock()
	blobs := w.blobs
	w.mu.Unlock()

	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, w.id)
	if err != nil {
		return err
	}
	s.complete[w.id] = &memCheckpoint{meta: m, blobs: blobs}
	ids := slices.Sorted(maps.Keys(s.complete))
	for _, old := range ids[:max(0, len(ids)-s.cfg.retained)] {
		delete(s.complete, old)
	}
	return nil
}

func (w *memWriter) Abort() error {
	if err := w.log.abort(); err != nil {
		return err
	}
	w.mu.Lock()
	w.blobs = nil
	w.mu.Unlock()
	w.s.mu.Lock()
	delete(w.s.open, w.id)
	w.s.mu.Unlock()
	return nil
}

func (s *MemoryStorage) List() ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.complete)), nil
}

func (s *MemoryStorage) Load(id int64) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(id)
}

func (s *MemoryStorage) Latest() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Memory cannot tear, and a commit either happened whole or not at
	// all, so every checkpoint here may have been reported complete: the
	// same walk as DirStorage's, with nothing that may be passed over.
	return findLatest(latestWalk{
		where:         "in memory",
		ids:           slices.Sorted(maps.Keys(s.complete)),
		load:          s.load,
		neverReported: func(int64) (bool, error) { return false, nil },
		remedy: func(int64, int64) string {
			return "checkpoints in memory cannot be repaired: start with new storage (sources start from their beginning)"
		},
		logger: s.cfg.logger,
	})
}

func (s *MemoryStorage) load(id int64) (*Checkpoint, error) {
	c, ok := s.complete[id]
	if !ok {
		return nil, &CheckpointError{ID: id, Err: ErrNotFound}
	}
	read := func(h StateHandle) ([]byte, error) {
		data, ok := c.blobs[h.File]
		if !ok {
			return nil, &CheckpointError{ID: id, File: h.File, Err: fmt.Errorf("%w: state of %s is missing", ErrCorrupt, h.Owner)}
		}
		if err := verifyBlob(h, data); err != nil {
			return nil, &CheckpointError{ID: id, File: h.File, Err: err}
		}
		return slices.Clone(data), nil
	}
	for _, h := range c.meta.States {
		if _, err := read(h); err != nil {
			return nil, err
		}
	}
	m := c.meta
	m.States = slices.Clone(m.States)
	return &Checkpoint{Metadata: m, read: read}, nil
}
