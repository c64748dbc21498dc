//go:build !unix

package runtime

import (
	"os"
	"path/filepath"
)

// defaultStateDir is the pebble backend's working directory when the job
// sets none. Outside Unix the OS temp directory is the user's own.
func defaultStateDir() string { return filepath.Join(os.TempDir(), "splitflow-state") }

// checkPrivateDir has nothing to check where the temp directory is the
// user's own.
func checkPrivateDir(string) error { return nil }
