package pebblestate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/splitflow/splitflow/internal/flock"
)

// Backend is a job's pebble backend while it runs: its working directory
// and the block cache all its DBs share. Its methods may be called from
// any goroutine.
type Backend struct {
	mu   sync.Mutex
	root string
	// lock is root's lock file, locked for as long as the job runs, so
	// that another process can tell the directory is in use.
	lock   *os.File
	cache  *pebble.Cache
	seq    int
	stores map[*Store]bool
}

// NewBackend makes a job's directory under work, locked while the job
// runs, and a block cache of cacheSize bytes, after removing the
// directories of jobs whose process is gone. defaultDir says work is the
// default state directory, which must then be this user's own.
func NewBackend(work string, defaultDir bool, cacheSize int64) (*Backend, error) {
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("pebble state: create the state directory %s: %w", work, err)
	}
	if defaultDir {
		if err := checkPrivateDir(work); err != nil {
			return nil, fmt.Errorf("pebble state: the default state directory is not this user's own: %w; remove it, or give a directory to state.Pebble", err)
		}
	}
	RemoveAbandonedDirs(work)
	// The directory is made and locked under a name no other job looks
	// at, then renamed: a job starting meanwhile never sees it unlocked.
	tmp, err := os.MkdirTemp(work, fmt.Sprintf(".new-job-%d-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pebble state: the state directory %s is not writable: %w", work, err)
	}
	root := filepath.Join(work, strings.TrimPrefix(filepath.Base(tmp), ".new-"))
	lock, err := os.OpenFile(filepath.Join(tmp, LockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		_, err = flock.TryLock(lock)
	}
	if err == nil {
		err = os.Rename(tmp, root)
	}
	if err != nil {
		if lock != nil {
			_ = lock.Close()
		}
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("pebble state: lock %s: %w", root, err)
	}
	return &Backend{root: root, lock: lock, cache: pebble.NewCache(cacheSize), stores: map[*Store]bool{}}, nil
}

// Dir is the job's directory, which holds every DB of the job.
func (b *Backend) Dir() string { return b.root }

// Cache is the block cache the job's stores share (Config.Cache).
func (b *Backend) Cache() *pebble.Cache { return b.cache }

// Opened and Closed keep the set of open stores, for Usage.
func (b *Backend) Opened(s *Store) {
	b.mu.Lock()
	b.stores[s] = true
	b.mu.Unlock()
}

func (b *Backend) Closed(s *Store) {
	b.mu.Lock()
	delete(b.stores, s)
	b.mu.Unlock()
}

// Open counts the open stores.
func (b *Backend) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.stores)
}

// Usage is the disk use of the open stores and the block cache's size
// in use.
func (b *Backend) Usage() (disk, cache int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.stores {
		disk += int64(s.DiskUsage())
	}
	return disk, b.cache.Metrics().Size
}

// LockFile, in a job's state directory, is locked while the job runs.
const LockFile = "_lock"

// RemoveAbandonedDirs removes the directories of jobs whose process
// is gone (killed before it could clean up): those whose lock file can be
// locked. Where there are no file locks, those whose pid names no live
// process. A directory without a lock file is older than the lock file: it
// is removed once it is a minute old. A directory still being made
// (".new-") is removed once it is a minute old, whatever its lock file
// says: its maker creates the lock file, then locks it, then renames the
// directory, and a directory removed between the first two failed the
// rename (slots of a distributed process start their backends together).
func RemoveAbandonedDirs(work string) {
	es, err := os.ReadDir(work)
	if err != nil {
		return
	}
	for _, e := range es {
		name, making := strings.CutPrefix(e.Name(), ".new-")
		rest, ok := strings.CutPrefix(name, "job-")
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(work, e.Name())
		if making && olderThanAMinute(dir) || !making && abandonedStateDir(dir, rest) {
			_ = os.RemoveAll(dir)
		}
	}
}

func olderThanAMinute(dir string) bool {
	info, err := os.Stat(dir)
	return err == nil && time.Since(info.ModTime()) > time.Minute
}

func abandonedStateDir(dir, rest string) bool {
	if !flock.Supported {
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		return err == nil && pid != os.Getpid() && !processAlive(pid)
	}
	f, err := os.Open(filepath.Join(dir, LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return olderThanAMinute(dir)
	}
	if err != nil {
		return false
	}
	defer f.Close()
	free, err := flock.TryLock(f)
	return err == nil && free
}

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// DBDir is a new directory name for a DB of operator uid's subtask.
func (b *Backend) DBDir(uid string, subtask int) string {
	b.mu.Lock()
	b.seq++
	n := b.seq
	b.mu.Unlock()
	return filepath.Join(b.root, fmt.Sprintf("%s-%d-%d", sanitizeName(uid), subtask, n))
}

// Close drops the cache and the job's directory, once every task closed
// its DB.
func (b *Backend) Close() error {
	b.cache.Unref()
	err := os.RemoveAll(b.root)
	_ = b.lock.Close()
	return err
}

func sanitizeName(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			out[i] = '_'
		}
	}
	if len(out) > 64 {
		out = out[:64]
	}
	return string(out)
}
