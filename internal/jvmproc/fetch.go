package jvmproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrNoRepo is RepoRoot's error when no directory above the working one
// holds a go.mod.
var ErrNoRepo = errors.New("no go.mod above the working directory")

// RepoRoot walks up from the working directory to the directory holding
// go.mod: tests run in their package directory, programs anywhere in the
// tree.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoRepo
		}
		dir = parent
	}
}

// Artifact is a download kept in a cache directory.
type Artifact struct {
	// Who names the caller at the start of the errors of Get's own
	// steps ("kafkatest").
	Who string
	// Cache is the cache directory; Lock, a file in it, serializes the
	// fetches of the artifact.
	Cache, Lock string
	// Dest is where the artifact is, once Complete(Dest).
	Dest     string
	Complete func(dir string) bool
	// Fetch downloads the artifact into tmp, a new directory in Cache
	// removed afterwards, and returns the directory within tmp to
	// publish as Dest. Its errors come back from Get as they are.
	Fetch func(tmp string) (string, error)
}

// Get makes Dest complete, fetching the artifact unless it is, and
// returns whether it fetched. It holds the exclusive lock of Lock while
// it fetches, so parallel test packages fetch once: a caller that waited
// finds Dest complete.
func (a Artifact) Get() (fetched bool, err error) {
	if a.Complete(a.Dest) {
		return false, nil
	}
	if err := os.MkdirAll(a.Cache, 0o755); err != nil {
		return false, fmt.Errorf("%s: create the cache %s: %w", a.Who, a.Cache, err)
	}
	f, err := os.OpenFile(a.Lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, fmt.Errorf("%s: cache lock: %w", a.Who, err)
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("%s: cache lock: %w", a.Who, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file drops the lock anyway
	if a.Complete(a.Dest) {                           // another package fetched while we waited
		return false, nil
	}
	tmp, err := os.MkdirTemp(a.Cache, "fetch-")
	if err != nil {
		return false, fmt.Errorf("%s: %w", a.Who, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // what is published is gone from it by then
	got, err := a.Fetch(tmp)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(a.Dest), 0o755); err != nil {
		return false, fmt.Errorf("%s: %w", a.Who, err)
	}
	if err := os.Rename(got, a.Dest); err != nil {
		return false, fmt.Errorf("%s: publish %s: %w", a.Who, a.Dest, err)
	}
	return true, nil
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
