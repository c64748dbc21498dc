package checkpoint

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// each (Flink's layout), and the shared files of all of them in shared/:
//
//	chk-7/
//	  0001-source-0.state    state blobs, fsynced before the metadata
//	  0002-source-coordinator.state
//	  _metadata              written last: temp file, fsync, rename, fsync dir
//	  _committing            only while Commit runs (see below)
//	shared/
//	  000012.sst             shared files (PutFile), each stored once and
//	  000015.sst             listed by the metadata of every checkpoint using it
//	  .000017.sst.tmp-1234   a shared file being put: copy, fsync, rename, fsync dir
//	_lock                    while a job runs (Lock)
//
// A shared file is durable before PutFile returns, so before any metadata
// that lists it. Load and Latest check that each one a checkpoint lists is
// there with its recorded size (a stat: they may be large; CopyFile checks
// the checksum as it copies): a checkpoint missing one is damaged, as one
// missing a blob is. Commit deletes the shared files no completed
// checkpoint lists (see Storage for the rule and why it is safe), and
// temporary files no PutFile is writing.
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
	// held are the completed checkpoints retention keeps (Hold).
	held heldIDs
	// lock is the locked lock file while Lock holds it.
	lock *os.File

	// files orders puts of shared files and Begins, for the collection of
	// unused shared files; its lock is its own, so puts never wait for s.mu.
	files *fileBook
	// filesWritten counts shared files actually written (tests).
	filesWritten atomic.Int64
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
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint storage: create %s: %w", root, err)
	}
	return &DirStorage{root: root, cfg: cfg, open: map[int64]bool{}, held: heldIDs{}, files: newFileBook()}, nil
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
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: err}
	}
	// The new directory's entry must be durable before anything inside it
	// can be.
	if err := syncDir(s.root); err != nil {
		_ = os.RemoveAll(dir)
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: err}
	}
	s.open[id] = true
	s.files.begin(id)
	return &dirWriter{s: s, id: id, dir: dir, log: newWriteLog(id)}, nil
}

type dirWriter struct {
	s   *DirStorage
	id  int64
	dir string
	log *writeLog
}

func (w *dirWriter) ID() int64 { return w.id }

func (w *dirWriter) WriteState(owner Owner, data []byte, files ...FileHandle) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	sorted, err := w.s.checkFiles(w.id, owner, files)
	if err != nil {
		w.log.release(owner)
		return StateHandle{}, err
	}
	// The file is written outside any lock so tasks write in parallel.
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data), Files: sorted}
	if err := writeFileSync(filepath.Join(w.dir, name), data); err != nil {
		w.log.release(owner)
		return StateHandle{}, &CheckpointError{ID: w.id, File: filepath.Join(chkDir(w.id), name), Err: err}
	}
	w.log.record(h)
	h.Files = slices.Clone(h.Files)
	return h, nil
}

// checkFiles sorts the shared files of owner's state in checkpoint id and
// checks that each is stored with its handle's size.
func (s *DirStorage) checkFiles(id int64, owner Owner, files []FileHandle) ([]FileHandle, error) {
	sorted, err := sortFiles(files)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: state of %s: %w", id, owner, err)
	}
	for _, f := range sorted {
		path := filepath.Join(s.root, sharedDir, f.Name)
		st, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s, which is not stored; put it with PutFile first: %w", owner, f.Name, err)}
		case err != nil:
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s: %w", owner, f.Name, err)}
		case st.Size() != f.Size:
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s of %d bytes, but %s is %d bytes", owner, f.Name, f.Size, path, st.Size())}
		}
	}
	return sorted, nil
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
		w.s.files.end(w.id)
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
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
	w.s.files.end(w.id)
	if err != nil {
		return &CheckpointError{ID: w.id, File: chkDir(w.id), Err: err}
	}
	return nil
}

// committed applies retention after checkpoint id became durable: it keeps
// the newest retained completed checkpoints and removes older ones, and
// removes incomplete directories older than id that no Writer is using
// (leftovers of a crash or of a failed removal); then it deletes the
// shared files no completed checkpoint uses (collectFiles). Failures are
// logged, not returned: the new checkpoint is complete whatever happens
// here.
func (s *DirStorage) committed(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
	limit := s.files.end(id)
	defer s.collectFiles(limit)
	complete, incomplete, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup", slog.String("dir", s.root), slog.Any("error", err))
		return
	}
	var remove []int64
	if n := len(complete) - s.cfg.retained; n > 0 {
		remove = append(remove, s.held.notHeld(complete[:n])...)
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
			shared := filepath.Join(s.root, sharedDir)
			if previous == 0 {
				return fmt.Sprintf("restore %s (and the shared files it lists, in %s) from a backup; or, to start afresh and accept that sources start from their beginning again, empty %s", dir, shared, s.root)
			}
			// Resuming from previous commits its committables again. An
			// exactly-once Kafka sink may have reused their transactional
			// ids once id completed, and then reports them as lost though
			// they were committed; every restart does so again.
			prev := filepath.Join(s.root, chkDir(previous))
			return fmt.Sprintf("restore %s (and the shared files it lists, in %s) from a backup; or, accepting that the output since checkpoint %d is written again, move %s out of %s and start again to resume from checkpoint %d. "+
				"An exactly-once Kafka sink may then fail the job with a *txn.DataLossError for transactions of checkpoint %d that were in fact committed (their ids were reused after checkpoint %d), "+
				"at every restart; an older checkpoint fares no better. If so, start afresh on an empty checkpoint directory, the sources starting at the offsets `splitflow checkpoints show %s` lists (operator state starts empty)",
				dir, shared, previous, dir, s.root, previous, previous, id, prev)
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
	m, err := s.readMetadata(id)
	if err != nil {
		return nil, err
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
	// Shared files may be large: they are only looked up here, and their
	// checksums verified as CopyFile copies them.
	for _, f := range m.Files() {
		path := filepath.Join(s.root, sharedDir, f.Name)
		st, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, path)}
		case err != nil:
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: err}
		case st.Size() != f.Size:
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: shared file %s is %d bytes, the metadata says %d", ErrCorrupt, path, st.Size(), f.Size)}
		}
	}
	copyFile := func(h FileHandle, dst string) error {
		path := filepath.Join(s.root, sharedDir, h.Name)
		src, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, path)}
		}
		if err != nil {
			return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: err}
		}
		defer src.Close()
		return copyVerified(id, h, src, path, dst)
	}
	return &Checkpoint{Metadata: m, read: read, copyFile: copyFile, verified: verified}, nil
}

// collectFiles deletes the shared files that no completed checkpoint
// still in the directory uses, except files this instance put after limit
// (see Storage and fileBook.end) and files being put now, and the
// temporary files of puts that are not under way (left by a crash). Every
// completed checkpoint's metadata must be read for that: when one cannot
// be, nothing is deleted, since the files it uses are unknown. Called with
// s.mu held, after retention.
func (s *DirStorage) collectFiles(limit uint64) {
	dir := filepath.Join(s.root, sharedDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list shared files for cleanup", slog.String("dir", dir), slog.Any("error", err))
		return
	}
	complete, _, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup of shared files", slog.String("dir", s.root), slog.Any("error", err))
		return
	}
	ms := make([]Metadata, 0, len(complete))
	for _, id := range complete {
		m, err := s.readMetadata(id)
		if err != nil {
			s.cfg.logger.Warn("checkpoint storage: not deleting unused shared files, since the shared files of a checkpoint are unknown", slog.Int64("checkpoint", id), slog.Any("error", err))
			return
		}
		ms = append(ms, m)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if of, ok := tempFileOf(name); ok && e.Type().IsRegular() {
			// A temporary file whose put is under way is the put's; any
			// other was left by a put that never finished.
			if s.files.tryClaim(of, ^uint64(0)) {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					s.cfg.logger.Warn("checkpoint storage: cannot remove a leftover temporary file", slog.String("file", filepath.Join(dir, name)), slog.Any("error", err))
				}
				s.files.release(of, unchanged)
			}
			continue
		}
		if validateFileName(name) == nil && e.Type().IsRegular() {
			names = append(names, name)
		}
	}
	errs := s.files.collect(names, referencedFiles(ms), limit, func(name string) error {
		err := os.Remove(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	for _, err := range errs {
		s.cfg.logger.Warn("checkpoint storage: cannot remove an unused shared file", slog.Any("error", err))
	}
}

// readMetadata reads and decodes checkpoint id's metadata, verifying only
// the metadata itself.
func (s *DirStorage) readMetadata(id int64) (Metadata, error) {
	metaName := filepath.Join(chkDir(id), metadataFile)
	b, err := os.ReadFile(filepath.Join(s.root, metaName))
	if errors.Is(err, fs.ErrNotExist) {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: ErrNotFound}
	}
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	m, err := decodeMetadata(b)
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	if m.ID != id {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%w: metadata of checkpoint %d in the directory of %d", ErrCorrupt, m.ID, id)}
	}
	return m, nil
}

// ReadMetadata returns checkpoint id's metadata, checked against its own
// checksum only: its state blobs and shared files are not looked at. For
// tools that show a checkpoint without restoring from it (cmd/splitflow);
// Load verifies.
func (s *DirStorage) ReadMetadata(id int64) (Metadata, error) {
	return s.readMetadata(id)
}

// PutFile copies the local file at path to shared/.<name>.tmp-*,
// computing its size and CRC-32C as it copies, fsyncs it, renames it to
// shared/<name> and fsyncs shared/. See Storage.
func (s *DirStorage) PutFile(name, path string) (FileHandle, error) {
	if err := validateFileName(name); err != nil {
		return FileHandle{}, err
	}
	s.files.claim(name)
	h, err := s.putFile(name, path)
	outcome := stored
	if err != nil {
		outcome = unchanged
	}
	s.files.release(name, outcome)
	return h, err
}

func (s *DirStorage) putFile(name, path string) (FileHandle, error) {
	fail := func(err error) (FileHandle, error) {
		return FileHandle{}, fmt.Errorf("checkpoint storage %s: put shared file %s from %s: %w", s.root, name, path, err)
	}
	src, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return fail(err)
	}
	if !info.Mode().IsRegular() {
		return fail(fmt.Errorf("%s is not a regular file", path))
	}
	dir := filepath.Join(s.root, sharedDir)
	final := filepath.Join(dir, name)
	switch st, err := os.Stat(final); {
	case err == nil:
		if !st.Mode().IsRegular() {
			return fail(fmt.Errorf("%s is in the way: not a regular file", final))
		}
		if st.Size() != info.Size() {
			return fail(fmt.Errorf("%s is already stored with %d bytes, the local file has %d; shared file names must be unique, and the stored file may be in use", final, st.Size(), info.Size()))
		}
		crc := crc32.New(castagnoli)
		n, err := io.Copy(crc, src)
		if err != nil {
			return fail(err)
		}
		if n != st.Size() {
			return fail(fmt.Errorf("%s changed while it was read: %d bytes, then %d", path, st.Size(), n))
		}
		// The file's contents were fsynced before its rename, but a process
		// that crashed after the rename may not have fsynced the directory:
		// the name must be durable before metadata can list it.
		if err := syncDir(dir); err != nil {
			return fail(err)
		}
		return FileHandle{Name: name, Size: n, CRC32C: crc.Sum32()}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return fail(err)
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		// The new directory's entry must be durable before anything
		// inside it can be.
		if err := syncDir(s.root); err != nil {
			return fail(err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fail(err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fail(err)
	}
	crc := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(tmp, crc), src)
	if err != nil {
		err = fmt.Errorf("copy to %s: %w", tmp.Name(), err)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	s.filesWritten.Add(1)
	return FileHandle{Name: name, Size: n, CRC32C: crc.Sum32()}, nil
}

// Files lists shared/: the regular files with shared file names, CRC32C
// 0 (unknown; it would take reading every file).
func (s *DirStorage) Files() ([]FileHandle, error) {
	dir := filepath.Join(s.root, sharedDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage: list shared files: %w", err)
	}
	var out []FileHandle
	for _, e := range entries {
		if validateFileName(e.Name()) != nil || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage: list shared files: %w", err)
		}
		out = append(out, FileHandle{Name: e.Name(), Size: info.Size()})
	}
	return out, nil
}

// DeleteFile removes shared/<name>. See Storage.
func (s *DirStorage) DeleteFile(name string) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	s.files.claim(name)
	err := os.Remove(filepath.Join(s.root, sharedDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	outcome := gone
	if err != nil {
		outcome = unchanged
		err = fmt.Errorf("checkpoint storage: delete shared file: %w", err)
	}
	s.files.release(name, outcome)
	return err
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
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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

// Hold keeps checkpoint id from retention until release (Holder).
func (s *DirStorage) Hold(id int64) (release func()) { return s.held.hold(&s.mu, id) }
