//go:build !unix

package pebblestate

import (
	"os"
	"path/filepath"
)

// DefaultDir is the pebble backend's working directory when the job
// sets none. Outside Unix the OS temp directory is the user's own.
func DefaultDir() string { return filepath.Join(os.TempDir(), "splitflow-state") }

// checkPrivateDir has nothing to check where the temp directory is the
// user's own.
func checkPrivateDir(string) error { return nil }
