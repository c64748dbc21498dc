package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

const (
	dirPrefix    = "chk-"
	metadataFile = "_metadata"
	metadataTemp = metadataFile + ".tmp"
	// committingFile marks a commit under way: it exists, durably, before
	// the metadata is renamed into place and is removed before Commit
	// returns. Metadata beside it belongs to a commit that never returned,
	// so the checkpoint was never reported complete (see Latest).
	committingFile = "_committing"
)

// DirStorage keeps checkpoints in a directory, one subdirectory chk-<id>
// each (Flink's layout):
//
//	chk-7/
//	  0001-source-0.state    state blobs, fsynced before the metadata
//	  0002-source-coordinator.state
//	  _metadata              written last: temp file, fsync, rename, fsync dir
//	  _committing            only while Commit runs (see below)
//
// A checkpoint exists once chk-<id>/_metadata exists; a directory without
// it is a checkpoint that never completed (the process stopped between
// writing data and renaming the metadata) and is ignored, then deleted by
// the next commit. Because the rename is the commit point and happens only
// after every blob is durable, a crash at any instant leaves either the
// previous set of checkpoints or the previous set plus the new one.
//
// Commit creates chk-<id>/_committing before the rename and removes it
// after, before it returns. Metadata found beside _committing was written by
// a commit that never returned, so the checkpoint was never reported
// complete and no sink committed its transactions: only such a checkpoint
// may be passed over by Latest when it is damaged. Metadata without it
// (every checkpoint whose Commit returned, and every checkpoint written
// before the marker existed) may have been reported complete, and a
// damaged one stops Latest with a *DamagedCheckpointError.
//
// One DirStorage (one process) uses a directory at a time: it cleans up
// incomplete checkpoints it does not know to be in progress. Lock makes
// that rule hold: the engine locks the directory for as long as a job
// runs, and a second job on it fails at start naming the holder's pid.
type DirStorage struct {
	root string
	cfg  storageConfig

	mu sync.Mutex
	// open holds the ids with a live Writer, which cleanup must not touch.
	open map[int64]bool
	// lock is the locked lock file while Lock holds it.
	lock *os.File
}

var _ Storage = (*DirStorage)(nil)

// NewDirStorage opens (creating it if needed) a checkpoint directory.
func NewDirStorage(root string, opts ...StorageOption) (*DirStorage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	if root == "" {
		return nil, errors.New("checkpoint storage: empty directory; give the directory checkpoints are kept in")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint storage: create %s: %w", root, err)
	}
	return &DirStorage{root: root, cfg: cfg, open: map[int64]bool{}}, nil
}

// Dir returns the checkpoint directory.
func (s *DirStorage) Dir() string { return s.root }

func chkDir(id int64) string { return dirPrefix + strconv.FormatInt(id, 10) }

// Begin creates chk-<id>. Leftovers of an earlier attempt at the same id
// that never committed are removed first.
func (s *DirStorage) Begin(id int64) (Writer, error) {
	if id <= 0 {
		return nil, fmt.Errorf("checkpoint storage: checkpoint id %d; ids start at 1", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id] {
		return nil, fmt.Errorf("checkpoint storage: checkpoint %d is already being written", id)
	}
	dir := filepath.Join(s.root, chkDir(id))
	switch _, err := os.Lstat(filepath.Join(dir, metadataFile)); {
	case err == nil:
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: ErrExists}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: err}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: fmt.Errorf("remove leftovers: %w", err)}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: err}
	}
	// The new directory's entry must be durable before anything inside it
	// can be.
	if err := syncDir(s.root); err != nil {
		_ = os.RemoveAll(dir)
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: err}
	}
	s.open[id] = true
	return &dirWriter{s: s, id: id, dir: dir, log: newWriteLog(id)}, nil
}

type dirWriter struct {
	s   *DirStorage
	id  int64
	dir string
	log *writeLog
}

func (w *dirWriter) ID() int64 { return w.id }

func (w *dirWriter) WriteState(owner Owner, data []byte) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	// The file is written outside any lock so tasks write in parallel.
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data)}
	if err := writeFileSync(filepath.Join(w.dir, name), data); err != nil {
		w.log.release(owner)
		return StateHandle{}, &CheckpointError{ID: w.id, File: filepath.Join(chkDir(w.id), name), Err: err}
	}
	w.log.record(h)
	return h, nil
}

// stateFileName is unique by sequence number; the owner part is only for
// people reading the directory, so it is reduced to safe characters.
func stateFileName(seq int, o Owner) string {
	uid := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, o.UID)
	if len(uid) > 64 {
		uid = uid[:64]
	}
	part := strconv.Itoa(o.Subtask)
	if o.IsCoordinator() {
		part = "coordinator"
	}
	return fmt.Sprintf("%04d-%s-%s.state", seq, uid, part)
}

func (w *dirWriter) Commit(m Metadata) error {
	m, err := w.log.commit(m)
	if errors.Is(err, ErrWriterClosed) {
		return err
	}
	if err == nil {
		err = w.persist(m)
	}
	if err != nil {
		// Not complete: make sure it never looks complete later, metadata
		// first so that a half-removed directory reads as incomplete.
		_ = os.Remove(filepath.Join(w.dir, metadataFile))
		if rmErr := os.RemoveAll(w.dir); rmErr != nil {
			w.s.cfg.logger.Warn("checkpoint storage: could not remove failed checkpoint", slog.Int64("checkpoint", w.id), slog.String("dir", w.dir), slog.Any("error", rmErr))
		}
		w.s.mu.Lock()
		delete(w.s.open, w.id)
		w.s.mu.Unlock()
		return err
	}
	w.s.committed(w.id)
	return nil
}

// persist is the commit point. Order matters:
//  1. create _committing (empty: only its name matters);
//  2. fsync the directory, so every blob's entry and _committing are
//     durable before the metadata can be (each blob's contents were
//     fsynced by WriteState);
//  3. write the metadata to a temp name and fsync it, so the final name
//     never refers to a partly written file;
//  4. rename it to _metadata: the checkpoint now exists;
//  5. remove _committing;
//  6. fsync the directory, so the rename and the removal survive a crash.
//     Only now may Commit return nil and sinks be told to commit.
//
// A crash between 4 and 6 leaves either no metadata (an incomplete
// checkpoint), or metadata beside _committing (complete, never reported),
// or metadata alone (looks reported, which errs on the side of refusing to
// pass over it). None of them can look never reported after Commit
// returned.
func (w *dirWriter) persist(m Metadata) error {
	fail := func(file string, err error) error {
		return &CheckpointError{ID: w.id, File: filepath.Join(chkDir(w.id), file), Err: err}
	}
	b, err := encodeMetadata(m)
	if err != nil {
		return fail(metadataFile, err)
	}
	// Empty, so only its name must be durable: the directory fsync below
	// makes it so, and the marker costs no fsync of its own.
	marker := filepath.Join(w.dir, committingFile)
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return fail(committingFile, err)
	}
	if err := syncDir(w.dir); err != nil {
		return fail("", err)
	}
	tmp := filepath.Join(w.dir, metadataTemp)
	if err := writeFileSync(tmp, b); err != nil {
		return fail(metadataTemp, err)
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, metadataFile)); err != nil {
		return fail(metadataFile, err)
	}
	if err := os.Remove(marker); err != nil {
		return fail(committingFile, err)
	}
	if err := syncDir(w.dir); err != nil {
		return fail("", err)
	}
	return nil
}

func (w *dirWriter) Abort() error {
	if err := w.log.abort(); err != nil {
		return err
	}
	err := os.RemoveAll(w.dir)
	w.s.mu.Lock()
	delete(w.s.open, w.id)
	w.s.mu.Unlock()
	if err != nil {
		return &CheckpointError{ID: w.id, File: chkDir(w.id), Err: err}
	}
	return nil
}

// committed applies retention after checkpoint id became durable: it keeps
// the newest retained completed checkpoints and removes older ones, and
// removes incomplete directories older than id that no Writer is using
// (leftovers of a crash or of a failed removal). Failures are logged, not
// returned: the new checkpoint is complete whatever happens here.
func (s *DirStorage) committed(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
	complete, incomplete, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup", slog.String("dir", s.root), slog.Any("error", err))
		return
	}
	var remove []int64
	if n := len(complete) - s.cfg.retained; n > 0 {
		remove = append(remove, complete[:n]...)
	}
	for _, old := range incomplete {
		if old < id && !s.open[old] {
			remove = append(remove, old)
		}
	}
	for _, old := range remove {
		dir := filepath.Join(s.root, chkDir(old))
		// Metadata first: a directory whose removal is interrupted must read
		// as incomplete, not as a corrupt checkpoint.
		err := os.Remove(filepath.Join(dir, metadataFile))
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			err = os.RemoveAll(dir)
		}
		if err != nil {
			s.cfg.logger.Warn("checkpoint storage: cannot remove old checkpoint", slog.Int64("checkpoint", old), slog.String("dir", dir), slog.Any("error", err))
		}
	}
}

// scan lists chk-<id> directories, split into those with metadata and those
// without, each oldest first.
func (s *DirStorage) scan() (complete, incomplete []int64, err error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint storage: list %s: %w", s.root, err)
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || id <= 0 || chkDir(id) != e.Name() {
			continue
		}
		switch _, err := os.Lstat(filepath.Join(s.root, e.Name(), metadataFile)); {
		case err == nil:
			complete = append(complete, id)
		case errors.Is(err, fs.ErrNotExist):
			incomplete = append(incomplete, id)
		default:
			return nil, nil, fmt.Errorf("checkpoint storage: %w", err)
		}
	}
	slices.Sort(complete)
	slices.Sort(incomplete)
	return complete, incomplete, nil
}

func (s *DirStorage) List() ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	complete, _, err := s.scan()
	return complete, err
}

func (s *DirStorage) Load(id int64) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(id)
}

func (s *DirStorage) Latest() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	complete, incomplete, err := s.scan()
	if err != nil {
		return nil, err
	}
	cp, err := findLatest(s.walk(complete))
	if err != nil {
		return nil, err
	}
	if err := s.markReported(cp.ID); err != nil {
		return nil, err
	}
	for _, id := range incomplete {
		if id > cp.ID && !s.open[id] {
			s.cfg.logger.Info("checkpoint storage: ignoring incomplete checkpoint (no metadata: it never completed)", slog.Int64("checkpoint", id))
		}
	}
	return cp, nil
}

// LatestForInspection returns what Latest would, without changing the
// directory: for tools that only look (cmd/splitflow's checkpoints ls).
func (s *DirStorage) LatestForInspection() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	complete, _, err := s.scan()
	if err != nil {
		return nil, err
	}
	return findLatest(s.walk(complete))
}

// markReported removes the interrupted-commit mark of checkpoint id, which
// Latest is handing out to be resumed from: resuming commits what it
// prepared, so from now on it counts as reported complete and is never
// passed over, whatever happens to it later.
func (s *DirStorage) markReported(id int64) error {
	dir := filepath.Join(s.root, chkDir(id))
	switch err := os.Remove(filepath.Join(dir, committingFile)); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint storage %s: checkpoint %d: %w", s.root, id, &CheckpointError{ID: id, File: filepath.Join(chkDir(id), committingFile), Err: err})
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint storage %s: checkpoint %d: %w", s.root, id, &CheckpointError{ID: id, File: chkDir(id), Err: err})
	}
	return nil
}

// walk describes the completed checkpoints of the directory to findLatest.
func (s *DirStorage) walk(complete []int64) latestWalk {
	return latestWalk{
		where:  s.root,
		ids:    complete,
		load:   s.load,
		logger: s.cfg.logger,
		neverReported: func(id int64) (bool, error) {
			switch _, err := os.Lstat(filepath.Join(s.root, chkDir(id), committingFile)); {
			case err == nil:
				return true, nil
			case errors.Is(err, fs.ErrNotExist):
				return false, nil
			default:
				return false, &CheckpointError{ID: id, File: filepath.Join(chkDir(id), committingFile), Err: err}
			}
		},
		remedy: func(id, previous int64) string {
			dir := filepath.Join(s.root, chkDir(id))
			if previous == 0 {
				return fmt.Sprintf("restore %s from a backup; or, to start afresh and accept that sources start from their beginning again, empty %s", dir, s.root)
			}
			// Resuming from previous commits its committables again. An
			// exactly-once Kafka sink may have reused their transactional
			// ids once id completed, and then reports them as lost though
			// they were committed; every restart does so again.
			prev := filepath.Join(s.root, chkDir(previous))
			return fmt.Sprintf("restore %s from a backup; or, accepting that the output since checkpoint %d is written again, move %s out of %s and start again to resume from checkpoint %d. "+
				"An exactly-once Kafka sink may then fail the job with a *txn.DataLossError for transactions of checkpoint %d that were in fact committed (their ids were reused after checkpoint %d), "+
				"at every restart; an older checkpoint fares no better. If so, start afresh on an empty checkpoint directory, the sources starting at the offsets `splitflow checkpoints show %s` lists (operator state starts empty)",
				dir, previous, dir, s.root, previous, previous, id, prev)
		},
	}
}

// CommitInterrupted reports whether checkpoint id's metadata was found
// beside the mark of a commit that never returned: such a checkpoint was
// never reported complete, so a damaged one is passed over by Latest.
func (s *DirStorage) CommitInterrupted(id int64) (bool, error) {
	return s.walk(nil).neverReported(id)
}

// load reads and verifies checkpoint id: metadata checksum and version,
// then every blob's presence, length and checksum.
func (s *DirStorage) load(id int64) (*Checkpoint, error) {
	dir := filepath.Join(s.root, chkDir(id))
	metaName := filepath.Join(chkDir(id), metadataFile)
	b, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &CheckpointError{ID: id, File: metaName, Err: ErrNotFound}
	}
	if err != nil {
		return nil, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	m, err := decodeMetadata(b)
	if err != nil {
		return nil, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	if m.ID != id {
		return nil, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%w: metadata of checkpoint %d in the directory of %d", ErrCorrupt, m.ID, id)}
	}
	read := func(h StateHandle) ([]byte, error) {
		data, err := readStateFile(filepath.Join(dir, h.File))
		if err == nil {
			err = verifyBlob(h, data)
		} else if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: state file of %s is missing", ErrCorrupt, h.Owner)
		}
		if err != nil {
			return nil, &CheckpointError{ID: id, File: filepath.Join(chkDir(id), h.File), Err: err}
		}
		return data, nil
	}
	// Every blob is read and verified now, so that a damaged checkpoint is
	// found before anything restores from it, and kept, so that restoring
	// does not read it again.
	verified := make(map[string][]byte, len(m.States))
	for _, h := range m.States {
		data, err := read(h)
		if err != nil {
			return nil, err
		}
		verified[h.File] = data
	}
	return &Checkpoint{Metadata: m, read: read, verified: verified}, nil
}

// readStateFile reads a state blob; a variable so that tests can count
// reads.
var readStateFile = os.ReadFile

func verifyBlob(h StateHandle, data []byte) error {
	if int64(len(data)) != h.Size {
		return fmt.Errorf("%w: state of %s is %d bytes, metadata says %d", ErrCorrupt, h.Owner, len(data), h.Size)
	}
	if got := checksum(data); got != h.CRC32C {
		return fmt.Errorf("%w: state of %s has crc32c %08x, metadata says %08x", ErrCorrupt, h.Owner, got, h.CRC32C)
	}
	return nil
}

// writeFileSync creates name (which must not exist for state files; the
// metadata temp file may be left from a failed attempt) and fsyncs it.
func writeFileSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes the entries of directory name durable (created, renamed
// and removed files), which fsync of the files themselves does not.
func syncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
