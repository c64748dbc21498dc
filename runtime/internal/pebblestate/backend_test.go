package pebblestate

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// testCacheSize is the block cache of the backends these tests make.
const testCacheSize = 8 << 20

// A job's state directory is removed by the next job on the same state
// directory once the process that held it is gone, however it ended, and
// never while it runs: its lock file tells them apart (with no file locks,
// its pid).
func TestAbandonedStateDirRemovedInUseKept(t *testing.T) {
	work := t.TempDir()
	mk := func(name string, lock bool) string {
		dir := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Join(dir, "db"), 0o755); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(dir, LockFile), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	abandoned := mk("job-999999999-a", true)
	fresh := mk("job-999999998-b", false)
	running, err := NewBackend(work, false, testCacheSize)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	if _, err := os.Stat(abandoned); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abandoned state directory kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("a directory still being made was removed: %v", err)
	}
	next, err := NewBackend(work, false, testCacheSize)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Stat(running.root); err != nil {
		t.Fatalf("the state directory of a running job was removed: %v", err)
	}
}

// A state directory still being made (".new-", its lock file made but not
// yet locked, or locked and about to be renamed) is never taken for an
// abandoned one, whatever its lock file says, until it is a minute old:
// another job starting meanwhile, or another slot of the same distributed
// process, would remove it under its maker, whose rename then failed
// ("pebble state: lock ...: rename ...: no such file or directory") and
// failed the process. Many backends made at once in one work directory
// all start.
func TestStateDirBeingMadeIsNotRemovedByAnotherStart(t *testing.T) {
	work := t.TempDir()
	making := filepath.Join(work, ".new-job-999999997-c")
	if err := os.MkdirAll(making, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(making, LockFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	RemoveAbandonedDirs(work)
	if _, err := os.Stat(making); err != nil {
		t.Fatalf("a directory being made, its lock file not yet locked, was removed: %v", err)
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(making, old, old); err != nil {
		t.Fatal(err)
	}
	RemoveAbandonedDirs(work)
	if _, err := os.Stat(making); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory left half made two minutes ago was kept: %v", err)
	}

	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				b, err := NewBackend(work, false, testCacheSize)
				if err != nil {
					errs <- err
					return
				}
				if err := b.Close(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
