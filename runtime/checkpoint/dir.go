package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// DirStorage keeps checkpoints in a directory: a BlobStorage whose keys
// are paths under it (Flink's layout, one subdirectory chk-<id> each):
//
//	chk-7/
//	  3f9a0c1d-0001-source-0.state   state blobs, each fsynced
//	  _committing-3f9a0c1d           only while Commit runs
//	  _metadata                      created last: temp file, fsync, link, fsync dir
//	shared/
//	  000012.sst                     shared files (PutFile), each stored once and
//	  000015.sst                     listed by the metadata of every checkpoint using it
//	  .000017.sst.tmp-1234           a file being written: copy, fsync, rename, fsync dir
//	records/owner                    records (RecordStorage)
//	_lock                            while a job runs (Lock)
//
// Every file is written under a temporary name, fsynced and renamed into
// place (link(2) for a create-if-absent, which refuses an existing name
// atomically where rename would replace it), then its directory is
// fsynced, so a crash at any instant leaves a file whole or absent. Files
// are 0600 and directories 0700: state holds the job's data, and a
// restore trusts what it reads there. A directory emptied by a deletion
// is removed.
//
// One DirStorage (one process) uses a directory at a time: it cleans up
// incomplete checkpoints it does not know to be in progress. Lock makes
// that rule hold: the engine locks the directory for as long as a job
// runs, and a second job on it fails at start naming the holder's pid.
type DirStorage struct {
	*BlobStorage
	root string

	// mu guards lock.
	mu sync.Mutex
	// lock is the locked lock file while Lock holds it.
	lock *os.File
}

var _ Storage = (*DirStorage)(nil)

// NewDirStorage opens (creating it if needed) a checkpoint directory.
func NewDirStorage(root string, opts ...StorageOption) (*DirStorage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	if root == "" {
		return nil, errors.New("checkpoint storage: empty directory; give the directory checkpoints are kept in")
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint storage: create %s: %w", root, err)
	}
	return &DirStorage{BlobStorage: newBlobStorage(&dirBlob{root: root, dirty: map[string]bool{}}, cfg), root: root}, nil
}

// Dir returns the checkpoint directory.
func (s *DirStorage) Dir() string { return s.root }

// dirBlob is a Blob on a directory: key a/b is the file ROOT/a/b.
//
// Create fsyncs the file and renames it into place but leaves its
// directory's fsync to the next CreateIfAbsent (which fsyncs every
// directory a Create renamed into first) or Delete: BlobStorage creates
// a checkpoint's state blobs, then its metadata with CreateIfAbsent, so a
// checkpoint costs one directory fsync rather than one a blob, and
// whatever its metadata lists is durable before the metadata is.
type dirBlob struct {
	root string

	mu sync.Mutex
	// dirty are the directories a Create renamed into since their last
	// fsync.
	dirty map[string]bool
}

func (b *dirBlob) path(key string) string { return filepath.Join(b.root, filepath.FromSlash(key)) }

// readStateFile reads a file whole; a variable so that tests can count
// reads.
var readStateFile = os.ReadFile

func (b *dirBlob) Open(key string, _ int64) (io.ReadCloser, error) {
	if strings.HasSuffix(key, ".state") || strings.HasSuffix(key, metadataFile) {
		// Small enough to read whole.
		data, err := readStateFile(b.path(key))
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	return os.Open(b.path(key))
}

// Create writes a temporary file beside key, fsyncs it and renames it to
// key; its directory is fsynced by the next CreateIfAbsent or Delete.
func (b *dirBlob) Create(key string, r io.Reader, size int64) error {
	if err := b.create(key, r, size, os.Rename); err != nil {
		return err
	}
	b.mu.Lock()
	b.dirty[filepath.Dir(b.path(key))] = true
	b.mu.Unlock()
	return nil
}

// CreateIfAbsent makes what Creates renamed durable, then writes key as
// Create does with link(2) for rename (link refuses an existing name
// atomically) and fsyncs its directory.
func (b *dirBlob) CreateIfAbsent(key string, data []byte) error {
	if err := b.syncDirty(); err != nil {
		return err
	}
	if err := b.create(key, bytes.NewReader(data), int64(len(data)), func(tmp, final string) error {
		if err := os.Link(tmp, final); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return err
			}
			return fmt.Errorf("link (the file system must support hard links for conditional creates): %w", err)
		}
		return os.Remove(tmp)
	}); err != nil {
		return err
	}
	return syncDir(filepath.Dir(b.path(key)))
}

// syncDirty fsyncs the directories Creates renamed into.
func (b *dirBlob) syncDirty() error {
	b.mu.Lock()
	dirs := make([]string, 0, len(b.dirty))
	for d := range b.dirty {
		dirs = append(dirs, d)
	}
	clear(b.dirty)
	b.mu.Unlock()
	var errs []error
	for _, d := range dirs {
		if err := syncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Not durable: fsync them again next time.
		b.mu.Lock()
		for _, d := range dirs {
			b.dirty[d] = true
		}
		b.mu.Unlock()
		return err
	}
	return nil
}

func (b *dirBlob) create(key string, r io.Reader, size int64, publish func(tmp, final string) error) error {
	final := b.path(key)
	dir := filepath.Dir(final)
	var tmp *os.File
	// A deletion may remove the directory once empty, between its
	// creation and the temporary file's: then create it again.
	for attempt := 0; ; attempt++ {
		if err := b.mkdirs(dir); err != nil {
			return err
		}
		var err error
		tmp, err = os.CreateTemp(dir, "."+filepath.Base(final)+".tmp-*")
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return err
		}
	}
	n, err := io.Copy(tmp, r)
	if err != nil {
		err = fmt.Errorf("copy to %s: %w", tmp.Name(), err)
	} else if n != size {
		err = fmt.Errorf("copy to %s: %d bytes, want %d", tmp.Name(), n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(tmp.Name(), final)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// mkdirs creates dir and its parents below the root, 0700, each new
// entry made durable in its parent before anything inside it can be.
// The root itself is never created here: a root removed under a running
// storage (a slot another process took over and cleaned up) fails the
// write, naming the root.
func (b *dirBlob) mkdirs(dir string) error {
	if !b.below(dir) {
		return nil
	}
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(dir)
		if !b.below(parent) {
			return fmt.Errorf("checkpoint storage %s is gone: %w", b.root, err)
		}
		if err := b.mkdirs(parent); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o700)
	}
	switch {
	case err == nil:
		return syncDir(filepath.Dir(dir))
	case errors.Is(err, fs.ErrExist):
		return nil
	default:
		return err
	}
}

// below reports whether dir is strictly inside the root.
func (b *dirBlob) below(dir string) bool {
	rel, err := filepath.Rel(b.root, dir)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func (b *dirBlob) Stat(key string) (int64, error) {
	st, err := os.Stat(b.path(key))
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is in the way: not a regular file", b.path(key))
	}
	return st.Size(), nil
}

// List walks the directories the prefix may be in, two levels deep (every
// key of BlobStorage's layout is a directory and a file). Temporary files
// are listed too (".<name>.tmp-*"), so that those a crash left are found;
// so is anything in the way of a key (a directory where a file belongs),
// so that reading it fails rather than the key looking absent.
func (b *dirBlob) List(prefix string) ([]BlobObject, error) {
	start := b.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = b.path(prefix[:i])
		switch st, err := os.Stat(start); {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list %s: %w", b.path(prefix), err)
		case !st.IsDir():
			return nil, fmt.Errorf("list %s: %s is not a directory", b.path(prefix), start)
		}
	}
	var out []BlobObject
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone since, or never there
			}
			return err
		}
		if path == b.root {
			return nil
		}
		rel, err := filepath.Rel(b.root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() && !strings.Contains(key, "/") {
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || !strings.Contains(key, "/") {
			return nil
		}
		var size int64
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted since the listing
			}
			if err != nil {
				return err
			}
			size = info.Size()
		}
		out = append(out, BlobObject{Key: key, Size: size})
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", b.path(prefix), err)
	}
	return out, nil
}

// Delete removes the file and fsyncs its directory; a directory below the
// root left empty goes too.
func (b *dirBlob) Delete(key string) error { return b.deleteKeys([]string{key}) }

// deleteKeys removes the files, then fsyncs each directory once
// (batchDeleter): retention deletes a checkpoint at a time.
func (b *dirBlob) deleteKeys(keys []string) error {
	var errs []error
	dirs := map[string]bool{}
	for _, key := range keys {
		path := b.path(key)
		if err := os.Remove(path); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		dirs[filepath.Dir(path)] = true
	}
	for dir := range dirs {
		if dir != b.root {
			if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
				dir = filepath.Dir(dir)
			}
		}
		if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b *dirBlob) Location(key string) string {
	if key == "" {
		return b.root
	}
	return b.path(key)
}

// syncName fsyncs the directory of key (nameSyncer).
func (b *dirBlob) syncName(key string) error { return syncDir(filepath.Dir(b.path(key))) }

// syncDir makes the entries of directory name durable (created, renamed
// and removed files), which fsync of the files themselves does not.
func syncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
