//go:build !unix

package checkpoint

import "os"

// flock is a no-op where flock(2) does not exist: the directory is not
// locked there.
func flock(*os.File) (bool, error) { return true, nil }
