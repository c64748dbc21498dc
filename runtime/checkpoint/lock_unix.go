//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"syscall"
)

// flock takes an exclusive lock on f without waiting: false when another
// open file holds it.
func flock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}
