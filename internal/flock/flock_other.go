//go:build !unix

package flock

import "os"

// TryLock is a no-op where flock(2) does not exist: it always succeeds.
func TryLock(*os.File) (bool, error) { return true, nil }

// Supported says whether TryLock locks on this platform.
const Supported = false
