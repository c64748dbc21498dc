// Package jobstorage opens a job's checkpoint storage and keeps it the
// job's: one job per storage in a process (Use), the storage's recorded
// owner across processes and restarts (ClaimOwner, ClaimDistributedRoot).
// Two jobs on one storage would delete each other's checkpoints and
// commit output twice (DESIGN.md: a checkpoint root belongs to one job).
// It also decides where the job's savepoints may go (targets.go), and
// holds a pending checkpoint's writer while its state files are written
// (pending.go).
package jobstorage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Open is the job's checkpoint storage: given, else the one dir names
// (a directory, or s3://bucket/prefix), else one in memory; each keeps
// retained checkpoints.
func Open(given checkpoint.Storage, dir string, retained int, log *slog.Logger) (checkpoint.Storage, error) {
	switch {
	case given != nil:
		return given, nil
	case dir != "":
		return checkpoint.OpenStorage(dir, checkpoint.WithRetained(retained), checkpoint.WithLogger(log))
	default:
		return checkpoint.NewMemoryStorage(checkpoint.WithRetained(retained), checkpoint.WithLogger(log))
	}
}

// inUse maps each DirStorage that a running job of this process uses
// to the job's name. Two jobs given one DirStorage object
// (WithCheckpointStorage) share its lock, so the lock alone cannot refuse
// the second, and the first one's end would release it under the second.
//
// prefixes maps each S3 prefix (s3://bucket/prefix) a running job of this
// process uses to the job's name: S3 has no lock (see checkpoint.S3Storage),
// so two processes on one prefix are the user's to prevent, but two jobs of
// one process are refused here, whatever storage objects they were given.
var inUse = struct {
	sync.Mutex
	jobs     map[*checkpoint.DirStorage]string
	prefixes map[string]string
}{jobs: map[*checkpoint.DirStorage]string{}, prefixes: map[string]string{}}

// A Claim is a job's use of its checkpoint storage in this process,
// until Release.
type Claim struct {
	log *slog.Logger
	// unlock releases the checkpoint directory's lock taken for the job,
	// nil when none was taken; dir is the DirStorage the job holds in
	// inUse, prefix the S3 prefix ("" for none).
	unlock func() error
	dir    *checkpoint.DirStorage
	prefix string
}

// Use makes job name the one of this process running on st: it fails
// with a *checkpoint.LockedError when another job of this process runs on
// it, or when a directory's lock cannot be taken (another process holds
// it). A storage its user locked beforehand stays locked after the job.
// Storages of other kinds are not claimed.
func Use(st checkpoint.Storage, name string, log *slog.Logger) (*Claim, error) {
	c := &Claim{log: log}
	inUse.Lock()
	defer inUse.Unlock()
	switch s := st.(type) {
	case *checkpoint.DirStorage:
		if holder, ok := inUse.jobs[s]; ok {
			return nil, &checkpoint.LockedError{Dir: s.Dir(), PID: os.Getpid(), Job: holder}
		}
		if !s.Locked() {
			if err := s.Lock(); err != nil {
				return nil, err
			}
			c.unlock = s.Unlock
		}
		inUse.jobs[s] = name
		c.dir = s
	case *checkpoint.S3Storage:
		url := s.URL()
		if holder, ok := inUse.prefixes[url]; ok {
			return nil, &checkpoint.LockedError{Dir: url, PID: os.Getpid(), Job: holder}
		}
		inUse.prefixes[url] = name
		c.prefix = url
	}
	return c, nil
}

// Release ends the claim; a nil or released claim releases nothing.
func (c *Claim) Release() {
	if c == nil {
		return
	}
	inUse.Lock()
	defer inUse.Unlock()
	if c.unlock != nil {
		if err := c.unlock(); err != nil {
			c.log.Warn("splitflow: cannot release the checkpoint directory's lock", "err", err)
		}
		c.unlock = nil
	}
	if c.dir != nil {
		delete(inUse.jobs, c.dir)
		c.dir = nil
	}
	if c.prefix != "" {
		delete(inUse.prefixes, c.prefix)
		c.prefix = ""
	}
}

// ClaimOwner makes the job the owner of its checkpoint root (a directory
// or an S3 prefix; checkpoint.ClaimOwner), which refuses a job of another
// name, or of one name on another Kafka cluster, whenever it starts: the
// directory's lock only excludes jobs running at the same time, and S3
// has none. renamedFrom (WithRenamedFrom) hands over a root of that job.
// Checkpoints in memory have no owner. A server without conditional
// writes cannot record an owner safely; the job runs, with a warning, as
// it did before owners were recorded.
func ClaimOwner(st checkpoint.Storage, me checkpoint.StorageOwner, renamedFrom string, log *slog.Logger) error {
	switch st.(type) {
	case *checkpoint.DirStorage, *checkpoint.S3Storage:
	default:
		return nil
	}
	from, err := checkpoint.ClaimOwner(st, me, renamedFrom)
	if errors.Is(err, checkpoint.ErrNoConditionalWrites) {
		log.Warn("splitflow: the checkpoint storage cannot record the job as its owner (no conditional writes): another job on it is not refused; run one job per root", "err", err)
		return nil
	}
	if from != nil {
		log.Info("splitflow: the checkpoint root of the job's previous name is now the job's (WithRenamedFrom); it resumes from its checkpoints", "previous", from.String(), "job", me.String())
	}
	return err
}

// ClaimDistributedRoot makes the distributed job, on the Kafka cluster
// its processes reach, the owner of its checkpoint root before anything
// is written under it: every process of the job is the same owner; a job
// of another name, or one of this name on another cluster (whose slots
// and logs would be mixed with this one's), is refused; renamedFrom
// (WithRenamedFrom) hands over a root of that job on this cluster.
func ClaimDistributedRoot(ctx context.Context, root, job string, cluster connector.Cluster, renamedFrom string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id, err := cluster.ClusterID(ctx)
	if err != nil {
		return err
	}
	st, err := checkpoint.OpenStorage(root, checkpoint.WithLogger(log))
	if err != nil {
		return fmt.Errorf("open the job's checkpoint root: %w", err)
	}
	return ClaimOwner(st, checkpoint.StorageOwner{Job: job, KafkaCluster: id}, renamedFrom, log)
}

// Name says where st keeps checkpoints, for errors.
func Name(st checkpoint.Storage) string {
	switch s := st.(type) {
	case *checkpoint.DirStorage:
		return s.Dir()
	case *checkpoint.S3Storage:
		return s.URL()
	}
	return fmt.Sprintf("the checkpoint storage (%T)", st)
}
