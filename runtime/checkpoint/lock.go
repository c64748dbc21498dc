package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/internal/flock"
)

// lockFile is the file a DirStorage locks; it holds the pid of the holder.
const lockFile = "_lock"

// LockedError is Lock's answer when another DirStorage, in this process or
// another, holds the directory's lock: two jobs running from one
// checkpoint directory would remove each other's checkpoints and commit
// their output twice. The engine answers with it too when a job of this
// process already runs on the same DirStorage (Job set), or on the same
// S3 prefix (Dir is then the s3:// URL).
type LockedError struct {
	Dir string
	// PID is the holder's process id as it wrote it in the lock file, 0
	// when it could not be read.
	PID int
	// Job, when set, is the running job of this process that uses the
	// same DirStorage object.
	Job string
}

func (e *LockedError) Error() string {
	if IsS3URL(e.Dir) {
		// Only jobs of one process are told apart on S3: it has no lock.
		return fmt.Sprintf("checkpoint storage %s is in use by job %q of process %d (this one); run one job per prefix: stop the other one, or give this one a prefix of its own", e.Dir, e.Job, e.PID)
	}
	holder := "another process"
	switch {
	case e.Job != "":
		holder = fmt.Sprintf("job %q of process %d (this one), which runs on the same storage", e.Job, e.PID)
	case e.PID > 0:
		holder = "process " + strconv.Itoa(e.PID)
		if e.PID == os.Getpid() {
			holder += " (this one: another storage on the same directory)"
		}
	}
	return fmt.Sprintf("checkpoint storage %s is in use by %s, which holds the lock on %s; two jobs must not run from one checkpoint directory: stop the other one, or give this one a directory of its own",
		e.Dir, holder, filepath.Join(e.Dir, lockFile))
}

// Lock takes the directory's lock, an OS file lock (flock(2)) on
// DIR/_lock that the kernel releases when the process ends, however it
// ends, and writes this process's id into the file. It fails with a
// *LockedError naming the holder when another DirStorage holds it (the
// lock belongs to an open file, so two DirStorages of one process exclude
// each other too). The engine holds it for as long as a job runs; tools
// that only read (List, Load, LatestForInspection) need no lock. On
// systems without flock, Lock does nothing.
func (s *DirStorage) Lock() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock != nil {
		return fmt.Errorf("checkpoint storage %s: already locked by this storage", s.root)
	}
	path := filepath.Join(s.root, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: open lock file: %w", s.root, err)
	}
	held, err := flock.TryLock(f)
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("checkpoint storage %s: lock %s: %w", s.root, path, err)
	}
	if !held {
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		_ = f.Close()
		return &LockedError{Dir: s.root, PID: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("checkpoint storage %s: write pid into %s: %w", s.root, path, err)
	}
	s.lock = f
	return nil
}

// Locked reports whether this storage holds the directory's lock.
func (s *DirStorage) Locked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock != nil
}

// Unlock releases the lock taken by Lock; the lock file stays, empty.
func (s *DirStorage) Unlock() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == nil {
		return errors.New("checkpoint storage " + s.root + ": not locked")
	}
	f := s.lock
	s.lock = nil
	err := f.Truncate(0)
	// Closing the file releases the lock.
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
