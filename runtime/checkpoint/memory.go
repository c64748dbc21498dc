package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
)

// MemoryStorage keeps checkpoints in memory, for tests and for jobs that
// need no recovery across processes. It follows DirStorage's rules: a
// checkpoint exists only after Commit, ids are never reused, the newest
// retained checkpoints are kept, and blobs are copied in and out and
// verified against their checksums, so a caller that modifies a slice
// after WriteState or after State cannot change a checkpoint. Shared files
// are read into memory by PutFile and collected by Commit by the same rule.
type MemoryStorage struct {
	cfg storageConfig

	mu       sync.Mutex
	complete map[int64]*memCheckpoint
	open     map[int64]bool
	held     heldIDs // completed checkpoints retention keeps (Hold)
	files    map[string][]byte
	// records are RecordStorage's, by name.
	records map[string][]byte

	book *fileBook
	// filesWritten counts shared files actually stored (tests).
	filesWritten atomic.Int64
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
	return &MemoryStorage{cfg: cfg, complete: map[int64]*memCheckpoint{}, open: map[int64]bool{}, held: heldIDs{}, files: map[string][]byte{}, book: newFileBook()}, nil
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
	s.book.begin(id)
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

func (w *memWriter) WriteState(owner Owner, data []byte, files ...FileHandle) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	sorted, err := w.s.checkFiles(w.id, owner, files)
	if err != nil {
		w.log.release(owner)
		return StateHandle{}, err
	}
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data), Files: sorted}
	w.mu.Lock()
	w.blobs[h.File] = slices.Clone(data)
	w.mu.Unlock()
	w.log.record(h)
	h.Files = slices.Clone(h.Files)
	return h, nil
}

// checkFiles sorts the shared files of owner's state in checkpoint id and
// checks that each is stored with its handle's size.
func (s *MemoryStorage) checkFiles(id int64, owner Owner, files []FileHandle) ([]FileHandle, error) {
	sorted, err := sortFiles(files)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: state of %s: %w", id, owner, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range sorted {
		data, ok := s.files[f.Name]
		switch {
		case !ok:
			return nil, &CheckpointError{ID: id, File: f.Name, Err: fmt.Errorf("state of %s uses shared file %s, which is not stored: put it with PutFile first", owner, f.Name)}
		case int64(len(data)) != f.Size:
			return nil, &CheckpointError{ID: id, File: f.Name, Err: fmt.Errorf("state of %s uses shared file %s of %d bytes, but the stored one is %d bytes", owner, f.Name, f.Size, len(data))}
		}
	}
	return sorted, nil
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
	limit := s.book.end(w.id)
	if err != nil {
		return err
	}
	s.complete[w.id] = &memCheckpoint{meta: m, blobs: blobs}
	ids := slices.Sorted(maps.Keys(s.complete))
	for _, old := range s.held.notHeld(ids[:max(0, len(ids)-s.cfg.retained)]) {
		delete(s.complete, old)
	}
	// The rule of Storage: unused shared files go, except those put after
	// Begin of this or of an open checkpoint, and those being put.
	ms := make([]Metadata, 0, len(s.complete))
	for _, c := range s.complete {
		ms = append(ms, c.meta)
	}
	s.book.collect(slices.Sorted(maps.Keys(s.files)), referencedFiles(ms), limit, func(name string) error {
		delete(s.files, name)
		return nil
	})
	return nil
}

// PutFile reads the local file at path into memory as shared file name.
// See Storage.
func (s *MemoryStorage) PutFile(name, path string) (FileHandle, error) {
	if err := validateFileName(name); err != nil {
		return FileHandle{}, err
	}
	s.book.claim(name)
	h, err := s.putFile(name, path)
	outcome := stored
	if err != nil {
		outcome = unchanged
	}
	s.book.release(name, outcome)
	return h, err
}

func (s *MemoryStorage) putFile(name, path string) (FileHandle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return FileHandle{}, fmt.Errorf("checkpoint storage in memory: put shared file %s: %w", name, err)
	}
	h := FileHandle{Name: name, Size: int64(len(data)), CRC32C: checksum(data)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.files[name]; ok {
		if len(old) != len(data) {
			return FileHandle{}, fmt.Errorf("checkpoint storage in memory: put shared file %s from %s: already stored with %d bytes, the local file has %d; shared file names must be unique, and the stored file may be in use", name, path, len(old), len(data))
		}
		return h, nil
	}
	s.files[name] = data
	s.filesWritten.Add(1)
	return h, nil
}

// Files lists the shared files, with their checksums.
func (s *MemoryStorage) Files() ([]FileHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FileHandle, 0, len(s.files))
	for _, name := range slices.Sorted(maps.Keys(s.files)) {
		out = append(out, FileHandle{Name: name, Size: int64(len(s.files[name])), CRC32C: checksum(s.files[name])})
	}
	return out, nil
}

// DeleteFile removes shared file name. See Storage.
func (s *MemoryStorage) DeleteFile(name string) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	s.book.claim(name)
	s.mu.Lock()
	delete(s.files, name)
	s.mu.Unlock()
	s.book.release(name, gone)
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
	w.s.book.end(w.id)
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
	for _, f := range c.meta.Files() {
		data, ok := s.files[f.Name]
		if !ok {
			return nil, &CheckpointError{ID: id, File: f.Name, Err: fmt.Errorf("%w: %s is not in the storage (in memory)", ErrMissingFile, f.Name)}
		}
		if int64(len(data)) != f.Size {
			return nil, &CheckpointError{ID: id, File: f.Name, Err: fmt.Errorf("%w: shared file %s is %d bytes, the metadata says %d", ErrCorrupt, f.Name, len(data), f.Size)}
		}
	}
	copyFile := func(h FileHandle, dst string) error {
		s.mu.Lock()
		data, ok := s.files[h.Name]
		s.mu.Unlock()
		if !ok {
			return &CheckpointError{ID: id, File: h.Name, Err: fmt.Errorf("%w: %s is not in the storage (in memory)", ErrMissingFile, h.Name)}
		}
		// Stored slices are never changed in place, so reading one
		// without the lock is safe.
		return copyVerified(id, h, bytes.NewReader(data), h.Name+" (in memory)", dst)
	}
	m := c.meta
	m.States = slices.Clone(m.States)
	for i := range m.States {
		m.States[i].Files = slices.Clone(m.States[i].Files)
	}
	return &Checkpoint{Metadata: m, read: read, copyFile: copyFile}, nil
}

// Hold keeps checkpoint id from retention until release (Holder).
func (s *MemoryStorage) Hold(id int64) (release func()) { return s.held.hold(&s.mu, id) }
