package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
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
