package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Rule: what a DirStorage writes is private to the job's user: files
// 0600, directories 0700 (state holds the job's data, and a restore
// trusts what it reads there). Before, they were 0644 and 0755, readable
// by every local user.
func TestDirStorageWritesPrivateFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	s, err := NewDirStorage(root, quiet)
	if err != nil {
		t.Fatal(err)
	}
	runScript(t, s, "begin 3; put 000042.sst; write 3 000042.sst; commit 3")
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v; want no access for group and others", path, perm)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 4 {
		t.Fatalf("walked %d entries of %s; want the root, a checkpoint, its files and a shared file", seen, root)
	}
}

// Rule: a directory storage whose root was removed under it (a process
// whose slot another one took over and cleaned up) fails its writes with
// an error naming the root, as it did before the blob adapters; creating
// the missing directories stops at the root, which it never recreates.
// Before, mkdirs recursed without end and the process died of a stack
// overflow.
func TestDirStorageWhoseRootIsGoneFailsItsWrites(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	b := &dirBlob{root: root, dirty: map[string]bool{}}
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.mkdirs(filepath.Join(root, "chk-1", "sub")) }()
	select {
	case err := <-done:
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), root) {
			t.Fatalf("mkdirs below a removed root: %v, want an error naming %s that wraps fs.ErrNotExist", err, root)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mkdirs below a removed root did not return")
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the removed root was recreated: %v", err)
	}
}

// Rule: the directories below a root given unclean ("dir/", "./dir") are
// created as below a clean one.
func TestDirStorageCreatesDirectoriesBelowAnUncleanRoot(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	for _, root := range []string{"a/", "./b", filepath.Join(base, "c") + "/"} {
		if err := os.MkdirAll(root, 0o700); err != nil {
			t.Fatal(err)
		}
		b := &dirBlob{root: root, dirty: map[string]bool{}}
		dir := filepath.Dir(b.path("chk-1/sub/file"))
		if err := b.mkdirs(dir); err != nil {
			t.Fatalf("root %q: mkdirs: %v", root, err)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Fatalf("root %q: %s not created: %v", root, dir, err)
		}
	}
}
