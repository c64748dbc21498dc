//go:build unix

package pebblestate

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// DefaultDir is the pebble backend's working directory when the job
// sets none: one per user in the OS temp directory, which every local
// user shares.
func DefaultDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("splitflow-state-%d", os.Getuid()))
}

// checkPrivateDir refuses dir, the default state directory, unless it is a
// directory (not a link) of this process's user; it closes it to group
// and others when they have access. Its name is known in advance, in a
// directory every local user may write: another user could have made it
// first, to read the job's state or to plant files a restore reads.
func checkPrivateDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%v)", dir, st.Mode().Type())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%s belongs to user %d, not to this process's user %d", dir, sys.Uid, os.Getuid())
	}
	if st.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}
