package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A savepoint is a checkpoint storage of its own holding one checkpoint,
// marked Savepoint in its metadata:
//
//	TARGET/savepoint-<id>-<yyyymmddThhmmssZ>/
//	  chk-<id>/_metadata, chk-<id>/*.state
//	  shared/*                 the shared files it uses, copied
//
// It is written by copying a completed checkpoint of a job's storage
// (WriteSavepoint): every state blob and every shared file is read from
// the job's storage, verified, and written again, so deleting the job's
// checkpoints leaves the savepoint whole, and no job's retention sees it.
// Files and then states are copied a few at a time
// (savepointCopyConcurrency). Its completion is the completion of its one
// checkpoint (the metadata written last, once every copy has returned, as
// in any storage), so a savepoint whose copy was
// interrupted is a directory without a completed checkpoint, which
// OpenRestorePoint refuses naming the path. Once the job that took it has
// committed the checkpoint's output, it adds the record "committed"
// (MarkSavepointCommitted), which OpenRestorePoint reads.

// savepointCopyConcurrency bounds the files (and then the states) one
// savepoint copies at once: on S3 each is a GET and a PUT or two whose
// round trips overlap those of the others, on a directory a read, a write
// and an fsync; more than a few would only contend for the same bandwidth
// and local disk.
const savepointCopyConcurrency = 4

// copyBounded runs copy(0..n-1), up to savepointCopyConcurrency at once.
// After the first error no further copy starts; it returns that error
// once every copy started has returned, so that nothing is still being
// written when the caller aborts or reports.
func copyBounded(n int, copy func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, savepointCopyConcurrency)
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := copy(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// SavepointPath is where the savepoint of checkpoint id taken at t goes
// under target (a directory or s3://bucket/prefix).
func SavepointPath(target string, id int64, t time.Time) string {
	name := fmt.Sprintf("savepoint-%d-%s", id, t.UTC().Format("20060102T150405Z"))
	if IsS3URL(target) {
		return strings.TrimSuffix(target, "/") + "/" + name
	}
	return filepath.Join(target, name)
}

// WriteSavepoint copies the completed checkpoint src into a new savepoint
// at path (a directory or s3://bucket/prefix that holds no checkpoint
// yet), verifying every blob and shared file as it reads them, and
// returns the savepoint's metadata. tmp is a local directory for the
// shared files on their way ("" for the OS default). opts configure the
// storage at path (WithLogger, the S3 options); retention does not matter
// there, since a savepoint holds one checkpoint. On error the savepoint
// is not complete: path may hold the parts copied so far and no metadata.
func WriteSavepoint(src *Checkpoint, path, tmp string, opts ...StorageOption) (Metadata, error) {
	parts := make([]SavepointPart, len(src.States))
	for i, h := range src.States {
		parts[i] = SavepointPart{Owner: h.Owner, From: src}
	}
	m := Metadata{ID: src.ID, Timestamp: src.Timestamp, Fingerprint: src.Fingerprint}
	return WriteSavepointOf(parts, m, path, tmp, opts...)
}

// SavepointPart is one state of a savepoint that WriteSavepointOf
// assembles: owner's state, copied from the state of From's owner From
// (verified, with its shared files), or Data when From is nil (a state
// made for the savepoint; it uses no shared file).
type SavepointPart struct {
	Owner Owner
	From  *Checkpoint
	// FromOwner is the state's owner in From (Owner when zero).
	FromOwner Owner
	Data      []byte
}

// WriteSavepointOf writes a new savepoint at path, as WriteSavepoint
// does, whose checkpoint is m (its States are filled in) made of parts:
// the savepoint of a distributed job is its slots' final checkpoints,
// each holding its slot's subtasks, put together. Shared files are
// copied once per name: every name a part uses must stand for one file
// (the pebble backend names its files after their instance).
func WriteSavepointOf(parts []SavepointPart, m Metadata, path, tmp string, opts ...StorageOption) (Metadata, error) {
	type file struct {
		from *Checkpoint
		h    FileHandle
	}
	var files []file
	seen := map[string]FileHandle{}
	handles := make([]StateHandle, len(parts))
	for i, p := range parts {
		if p.From == nil {
			continue
		}
		from := p.FromOwner
		if from == (Owner{}) {
			from = p.Owner
		}
		found := false
		for _, h := range p.From.States {
			if h.Owner == from {
				handles[i], found = h, true
				break
			}
		}
		if !found {
			return Metadata{}, fmt.Errorf("savepoint %s: checkpoint %d holds no state of %s", path, p.From.ID, from)
		}
		for _, f := range handles[i].Files {
			if old, ok := seen[f.Name]; ok {
				if old != f {
					return Metadata{}, fmt.Errorf("savepoint %s: two parts name different shared files %s", path, f.Name)
				}
				continue
			}
			seen[f.Name] = f
			files = append(files, file{p.From, f})
		}
	}
	dst, err := OpenStorage(path, opts...)
	if err != nil {
		return Metadata{}, fmt.Errorf("savepoint %s: %w", path, err)
	}
	if ids, err := dst.List(); err != nil {
		return Metadata{}, fmt.Errorf("savepoint %s: %w", path, err)
	} else if len(ids) > 0 {
		return Metadata{}, fmt.Errorf("savepoint %s: the path already holds checkpoint %d; give a path of its own for each savepoint", path, ids[len(ids)-1])
	}
	dir, err := os.MkdirTemp(tmp, "splitflow-savepoint-")
	if err != nil {
		return Metadata{}, fmt.Errorf("savepoint %s: local directory for shared files: %w", path, err)
	}
	defer os.RemoveAll(dir)
	// Shared files first, each once, however many owners use it: they must
	// be in the storage before a state that names them is written. Up to
	// savepointCopyConcurrency at once, each through its own local file.
	err = copyBounded(len(files), func(i int) error {
		f := files[i]
		local := filepath.Join(dir, strconv.Itoa(i))
		defer os.Remove(local) // at most savepointCopyConcurrency on the local disk
		if err := f.from.CopyFile(f.h, local); err != nil {
			return fmt.Errorf("savepoint %s: read shared file %s of checkpoint %d: %w", path, f.h.Name, f.from.ID, err)
		}
		if _, err := dst.PutFile(f.h.Name, local); err != nil {
			return fmt.Errorf("savepoint %s: write shared file %s: %w", path, f.h.Name, err)
		}
		return nil
	})
	if err != nil {
		return Metadata{}, err
	}
	w, err := dst.Begin(m.ID)
	if err != nil {
		return Metadata{}, fmt.Errorf("savepoint %s: %w", path, err)
	}
	m.Savepoint = true
	m.States = make([]StateHandle, len(parts))
	err = copyBounded(len(parts), func(i int) error {
		p := parts[i]
		data := p.Data
		if p.From != nil {
			d, ok, err := p.From.State(handles[i].Owner)
			if err == nil && !ok {
				err = fmt.Errorf("%w: state of %s listed but not found", ErrCorrupt, handles[i].Owner)
			}
			if err != nil {
				return fmt.Errorf("savepoint %s: read state of %s from checkpoint %d: %w", path, handles[i].Owner, p.From.ID, err)
			}
			data = d
		}
		nh, err := w.WriteState(p.Owner, data, handles[i].Files...)
		if err != nil {
			return fmt.Errorf("savepoint %s: write state of %s: %w", path, p.Owner, err)
		}
		m.States[i] = nh
		return nil
	})
	if err != nil {
		// Every WriteState has returned: Abort may run (Writer's contract).
		_ = w.Abort()
		return Metadata{}, err
	}
	slices.SortFunc(m.States, func(a, b StateHandle) int { return a.Owner.Compare(b.Owner) })
	if err := w.Commit(m); err != nil {
		return Metadata{}, fmt.Errorf("savepoint %s: %w", path, err)
	}
	return m, nil
}

// savepointCommittedRecord is the record (RecordStorage) of a savepoint
// that says the job which took it committed the output of its checkpoint:
// its data is the checkpoint's id.
const savepointCommittedRecord = "committed"

// MarkSavepointCommitted records in the savepoint at path that the job
// which took it committed every committable of its checkpoint id: every
// sink of the job committed the transactions of id and of every earlier
// checkpoint. That job then goes on and may reuse the transactional ids
// of those committables, so a job started from the savepoint must not
// commit them again (a reused Kafka id answers PRODUCER_FENCED, which
// would read as lost records); OpenRestorePoint reads the mark into
// Checkpoint.OutputCommitted. The mark is created once (a conditional
// create); one that exists already is no error. opts configure the
// storage at path, as for WriteSavepoint.
func MarkSavepointCommitted(path string, id int64, opts ...StorageOption) error {
	st, err := OpenStorage(path, opts...)
	if err != nil {
		return fmt.Errorf("savepoint %s: mark checkpoint %d committed: %w", path, id, err)
	}
	rs, ok := st.(RecordStorage)
	if !ok {
		return fmt.Errorf("savepoint %s: mark checkpoint %d committed: the storage keeps no records (%T)", path, id, st)
	}
	if err := rs.CreateRecord(savepointCommittedRecord, []byte(strconv.FormatInt(id, 10))); err != nil && !errors.Is(err, ErrRecordExists) {
		return fmt.Errorf("savepoint %s: mark checkpoint %d committed: %w", path, id, err)
	}
	return nil
}

// savepointCommitted reports whether st holds the mark that the output of
// its checkpoint id was committed by the job that took it.
func savepointCommitted(st Storage, id int64) (bool, error) {
	rs, ok := st.(RecordStorage)
	if !ok {
		return false, nil
	}
	data, err := rs.ReadRecord(savepointCommittedRecord)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the savepoint's mark that its output was committed: %w", err)
	}
	return string(data) == strconv.FormatInt(id, 10), nil
}

// OpenRestorePoint loads, verified, the checkpoint a job is to start from:
// path is a savepoint (a storage holding one checkpoint, as WriteSavepoint
// writes it), any checkpoint storage (its newest checkpoint, as a restart
// would choose it), or one checkpoint of a storage (DIR/chk-N,
// s3://bucket/prefix/chk-N, such as a retained checkpoint of another
// job). A path that does not exist, holds no completed checkpoint, or
// whose checkpoint is damaged is an error naming the path: never a fresh
// start. Nothing is written to path.
func OpenRestorePoint(path string, opts ...StorageOption) (*Checkpoint, error) {
	if path == "" {
		return nil, errors.New("restore: empty savepoint or checkpoint path")
	}
	root, id := path, int64(0)
	base := path
	if IsS3URL(path) {
		trimmed := strings.TrimSuffix(path, "/")
		if i := strings.LastIndex(trimmed, "/"); i > len("s3://") {
			root, base = trimmed[:i], trimmed[i+1:]
		}
	} else {
		root, base = filepath.Dir(filepath.Clean(path)), filepath.Base(filepath.Clean(path))
	}
	if s, ok := strings.CutPrefix(base, dirPrefix); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			id = n
		}
	}
	if id == 0 {
		root = path
	}
	if !IsS3URL(root) {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", path, err)
		}
	}
	st, err := OpenStorageForInspection(root, opts...)
	if err != nil {
		return nil, fmt.Errorf("restore from %s: %w", path, err)
	}
	var chk *Checkpoint
	if id > 0 {
		chk, err = st.Load(id)
	} else {
		chk, err = st.Latest()
	}
	switch {
	case errors.Is(err, ErrNoCheckpoint) || errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("restore from %s: no completed savepoint or checkpoint there (a savepoint whose copy did not finish has none): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("restore from %s: %w", path, err)
	}
	if chk.Savepoint {
		if chk.OutputCommitted, err = savepointCommitted(st, chk.ID); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", path, err)
		}
	}
	return chk, nil
}
