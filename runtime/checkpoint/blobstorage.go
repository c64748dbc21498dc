package checkpoint

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

const (
	dirPrefix    = "chk-"
	metadataFile = "_metadata"
	// metadataTemp is the name an older DirStorage gave metadata before
	// renaming it into place; found in a checkpoint, it is not metadata.
	metadataTemp = metadataFile + ".tmp"
	// committingFile, followed by "-" and the writer's token, marks a
	// commit under way: it is created before the metadata and deleted
	// before Commit returns, so metadata beside the marker of its own
	// writer belongs to a commit that never returned, and the checkpoint
	// was never reported complete (see Latest). A bare committingFile is
	// the marker older DirStorage builds wrote, and counts too.
	committingFile = "_committing"
	markerPrefix   = committingFile + "-"
)

// BlobStorage keeps checkpoints in a Blob, in this layout (keys):
//
//	chk-7/3f9a0c1d-0001-source-0.state   state blobs; the writer's token first
//	chk-7/_committing-3f9a0c1d           only while Commit runs
//	chk-7/_metadata                      created last, conditionally
//	shared/000012.sst                    shared files (PutFile)
//	records/owner                        records (RecordStorage)
//
// Commit is, in order: every state blob created (WriteState; each durable
// when it returns), the writer's marker created, the metadata created
// with CreateIfAbsent (the checkpoint now exists, whole, and of two
// writers of one id only one completes it), the marker deleted; only then
// does Commit return nil and may sinks commit. Each writer names its
// state blobs and marker with a random token, so a writer that loses a
// race for an id overwrites nothing of the winner's and removes only what
// it wrote. A failed Commit deletes the metadata (its create may have
// succeeded with the answer lost), then what the writer wrote, so it
// leaves no completed checkpoint, or, when that delete fails, a whole one
// beside its marker: complete, never reported.
//
// Metadata beside its writer's marker belongs to a commit that never
// returned: only such a checkpoint may be passed over by Latest when it is
// damaged. Metadata without one (every checkpoint whose Commit returned)
// may have been reported complete, and a damaged one stops Latest with a
// *DamagedCheckpointError.
//
// A chk-<id>/ without metadata is a checkpoint that never completed; the
// next commit of a later id deletes it, unless this storage is writing it.
// One job uses a store at a time: its cleanup may delete another writer's
// checkpoints in progress and shared files (DirStorage's Lock and the
// owner record, ClaimOwner, keep that rule).
//
// Create a BlobStorage on a store of your own with NewBlobStorage.
type BlobStorage struct {
	blob  Blob
	where string
	cfg   storageConfig

	mu sync.Mutex
	// open holds the ids with a live Writer, which cleanup must not touch.
	open map[int64]bool
	// held are the completed checkpoints retention keeps (Hold).
	held heldIDs

	// files orders puts of shared files and Begins, for the collection of
	// unused shared files; its lock is its own, so puts never wait for mu.
	files *fileBook
	// sizes are the sizes of shared files this instance put or found
	// stored, so that WriteState checks them without a request each.
	sizesMu sync.Mutex
	sizes   map[string]int64
	// filesWritten counts shared files actually written (tests).
	filesWritten atomic.Int64
}

var (
	_ Storage       = (*BlobStorage)(nil)
	_ RecordStorage = (*BlobStorage)(nil)
	_ Holder        = (*BlobStorage)(nil)
)

// NewBlobStorage returns the checkpoint storage kept in b, which must keep
// the contract of Blob. The S3-specific options are ignored.
func NewBlobStorage(b Blob, opts ...StorageOption) (*BlobStorage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("checkpoint storage: nil Blob")
	}
	return newBlobStorage(b, cfg), nil
}

func newBlobStorage(b Blob, cfg storageConfig) *BlobStorage {
	return &BlobStorage{blob: b, where: b.Location(""), cfg: cfg, open: map[int64]bool{}, held: heldIDs{}, files: newFileBook(), sizes: map[string]int64{}}
}

// blobStorage is the BlobStorage under a storage that embeds one.
func (s *BlobStorage) blobStorage() *BlobStorage { return s }

func chkDir(id int64) string { return dirPrefix + strconv.FormatInt(id, 10) }

func stateKey(id int64, name string) string { return chkDir(id) + "/" + name }

// sharedPath is a shared file's key, as CheckpointError.File gives it.
func sharedPath(name string) string { return sharedDir + "/" + name }

func token() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Begin checks that id has no metadata and starts a writer with a token
// of its own. Leftovers of an earlier attempt at id are not removed here:
// their names hold another token, so they are in nobody's way, and they
// may be another writer's work in progress. Retention removes them with
// the checkpoint, or a later commit as an incomplete one.
func (s *BlobStorage) Begin(id int64) (Writer, error) {
	if id <= 0 {
		return nil, fmt.Errorf("checkpoint storage: checkpoint id %d; ids start at 1", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id] {
		return nil, fmt.Errorf("checkpoint storage: checkpoint %d is already being written", id)
	}
	metaKey := stateKey(id, metadataFile)
	switch _, err := s.blob.Stat(metaKey); {
	case err == nil:
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: ErrExists}
	case !isNotExist(err):
		return nil, &CheckpointError{ID: id, File: metaKey, Err: err}
	}
	s.open[id] = true
	s.files.begin(id)
	return &blobWriter{s: s, id: id, token: token(), log: newWriteLog(id)}, nil
}

type blobWriter struct {
	s     *BlobStorage
	id    int64
	token string
	log   *writeLog

	mu      sync.Mutex
	written []string // keys created, for cleanup
	// exclusive is set once the metadata was created conditionally: no
	// other writer can complete this id any more.
	exclusive bool
}

func (w *blobWriter) ID() int64 { return w.id }

func (w *blobWriter) WriteState(owner Owner, data []byte, files ...FileHandle) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	sorted, err := w.s.checkFiles(w.id, owner, files)
	if err != nil {
		w.log.release(owner)
		return StateHandle{}, err
	}
	name = w.token + "-" + name
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data), Files: sorted}
	key := stateKey(w.id, name)
	w.mu.Lock()
	w.written = append(w.written, key)
	w.mu.Unlock()
	// Outside any lock: the runtime writes several states at once.
	if err := w.s.blob.Create(key, bytes.NewReader(data), int64(len(data))); err != nil {
		w.log.release(owner)
		return StateHandle{}, &CheckpointError{ID: w.id, File: key, Err: err}
	}
	w.log.record(h)
	h.Files = slices.Clone(h.Files)
	return h, nil
}

// checkFiles sorts the shared files of owner's state in checkpoint id and
// checks that each is stored with its handle's size: from what this
// instance put, or a Stat.
func (s *BlobStorage) checkFiles(id int64, owner Owner, files []FileHandle) ([]FileHandle, error) {
	sorted, err := sortFiles(files)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: state of %s: %w", id, owner, err)
	}
	for _, f := range sorted {
		s.sizesMu.Lock()
		size, ok := s.sizes[f.Name]
		s.sizesMu.Unlock()
		if !ok {
			size, err = s.blob.Stat(sharedPath(f.Name))
			switch {
			case isNotExist(err):
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s, which is not stored; put it with PutFile first: %w", owner, f.Name, err)}
			case err != nil:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s: %w", owner, f.Name, err)}
			}
		}
		if size != f.Size {
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s of %d bytes, but %s is %d bytes", owner, f.Name, f.Size, s.blob.Location(sharedPath(f.Name)), size)}
		}
	}
	return sorted, nil
}

// stateFileName is unique by sequence number; the owner part is only for
// people reading the storage, so it is reduced to safe characters.
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

func (w *blobWriter) Commit(m Metadata) error {
	m, err := w.log.commit(m)
	if errors.Is(err, ErrWriterClosed) {
		return err
	}
	// Metadata that does not pass the write log was never created.
	left := removeOwn
	if err == nil {
		left, err = w.persist(m)
	}
	if err != nil {
		switch left {
		case removeAll:
			w.cleanup(true)
		case removeOwn:
			w.cleanup(false)
		}
		w.end()
		return err
	}
	w.s.committed(m, w.exclusive)
	return nil
}

// persist is the commit point:
//  1. create _committing-<token>;
//  2. create _metadata if absent (every state blob's create returned
//     before Commit was called): the checkpoint now exists;
//  3. delete the marker. Only now may Commit return nil.
//
// When the metadata exists already: if its bytes are ours, an earlier
// attempt of this create stored it and only the answer was lost;
// otherwise another writer completed id first (cleanup then leaves the
// metadata). When it cannot be read back it may be ours, so nothing is
// removed. A crash between 2 and 3 leaves metadata beside the marker:
// complete, never reported.
func (w *blobWriter) persist(m Metadata) (onFailure failedCommit, err error) {
	s := w.s
	fail := func(file string, err error) error {
		return &CheckpointError{ID: w.id, File: stateKey(w.id, file), Err: err}
	}
	b, err := encodeMetadata(m)
	if err != nil {
		return removeOwn, fail(metadataFile, err)
	}
	marker := stateKey(w.id, markerPrefix+w.token)
	w.mu.Lock()
	w.written = append(w.written, marker)
	w.mu.Unlock()
	if err := s.blob.Create(marker, bytes.NewReader(nil), 0); err != nil {
		// No metadata was created: the one there, if any, is not ours.
		return removeOwn, fail(markerPrefix+w.token, err)
	}
	metaKey := stateKey(w.id, metadataFile)
	err = s.blob.CreateIfAbsent(metaKey, b)
	w.exclusive = !errors.Is(err, ErrNoConditionalWrites)
	if !w.exclusive {
		// The store cannot tell two writers apart (logged when it
		// opened): the last one wins.
		err = s.blob.Create(metaKey, bytes.NewReader(b), int64(len(b)))
	}
	if isExist(err) {
		got, gerr := readBlob(s.blob, metaKey, int64(len(b)))
		switch {
		case gerr != nil:
			// Unknown whose it is: it may be another writer's, or ours
			// with our state blobs and marker beside it, so that
			// removing any of them could leave metadata listing blobs
			// that are gone.
			return removeNothing, fail(metadataFile, fmt.Errorf("%w: its metadata exists and cannot be read back (%v): %w", ErrExists, gerr, err))
		case !bytes.Equal(got, b):
			return removeOwn, fail(metadataFile, fmt.Errorf("%w: another writer completed checkpoint %d first; one job per checkpoint storage", ErrExists, w.id))
		}
		err = nil
	}
	if err != nil {
		return removeAll, fail(metadataFile, err)
	}
	if err := s.blob.Delete(marker); err != nil {
		// The checkpoint is complete, but it looks never reported: a
		// commit that returns nil must not leave that, so fail it and
		// take the metadata back.
		return removeAll, fail(markerPrefix+w.token, err)
	}
	return removeAll, nil
}

// failedCommit is what a failed Commit may remove.
type failedCommit int

const (
	// removeAll: the metadata (it may be ours, stored with the answer
	// lost), then the writer's own blobs.
	removeAll failedCommit = iota
	// removeOwn: the writer's own blobs, not the metadata (another
	// writer's).
	removeOwn
	// removeNothing: whose the metadata is is unknown.
	removeNothing
)

// cleanup removes what the writer created, the metadata first when it may
// be this writer's, so that a failed Commit leaves no completed
// checkpoint. When that delete fails, nothing else is removed: metadata
// whose state blobs were deleted would be a damaged checkpoint that
// Latest must refuse to pass over, while the whole checkpoint beside its
// marker is complete and never reported, which resuming may use (sinks
// commit what it prepared).
func (w *blobWriter) cleanup(withMetadata bool) {
	s := w.s
	if withMetadata {
		if err := s.blob.Delete(stateKey(w.id, metadataFile)); err != nil {
			s.cfg.logger.Error("checkpoint storage: a failed checkpoint's metadata may be left, so its blobs are kept whole; it may be resumed from as a commit that never returned",
				slog.Int64("checkpoint", w.id), slog.String("storage", s.where), slog.Any("error", err))
			return
		}
	}
	w.mu.Lock()
	keys := slices.Clone(w.written)
	w.mu.Unlock()
	for _, k := range keys {
		if err := s.blob.Delete(k); err != nil {
			s.cfg.logger.Warn("checkpoint storage: could not remove a blob of a failed checkpoint; the next commit removes it",
				slog.Int64("checkpoint", w.id), slog.String("blob", s.blob.Location(k)), slog.Any("error", err))
		}
	}
}

func (w *blobWriter) Abort() error {
	if err := w.log.abort(); err != nil {
		return err
	}
	w.cleanup(false)
	w.end()
	return nil
}

// end forgets a checkpoint that did not complete.
func (w *blobWriter) end() {
	w.s.mu.Lock()
	delete(w.s.open, w.id)
	w.s.mu.Unlock()
	w.s.files.end(w.id)
}

// scanned is the checkpoints in the store: ids with metadata and without,
// oldest first, and every key of each.
type scanned struct {
	complete, incomplete []int64
	keys                 map[int64][]string
}

func (s *BlobStorage) scan() (scanned, error) {
	objs, err := s.blob.List(dirPrefix)
	if err != nil {
		return scanned{}, fmt.Errorf("checkpoint storage %s: %w", s.where, err)
	}
	sc := scanned{keys: map[int64][]string{}}
	hasMeta := map[int64]bool{}
	for _, o := range objs {
		dir, base, ok := strings.Cut(o.Key, "/")
		if !ok || strings.Contains(base, "/") {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(dir, dirPrefix), 10, 64)
		if err != nil || id <= 0 || chkDir(id) != dir {
			continue
		}
		sc.keys[id] = append(sc.keys[id], o.Key)
		if base == metadataFile {
			hasMeta[id] = true
		}
	}
	for id := range sc.keys {
		if hasMeta[id] {
			sc.complete = append(sc.complete, id)
		} else {
			sc.incomplete = append(sc.incomplete, id)
		}
	}
	slices.Sort(sc.complete)
	slices.Sort(sc.incomplete)
	return sc, nil
}

// committed applies retention after checkpoint m became durable: it keeps
// the newest retained completed checkpoints and removes older ones, and
// removes incomplete checkpoints older than m that no Writer is using
// (leftovers of a crash or of a failed removal) and, when m's metadata was
// created conditionally (exclusive), what earlier attempts at m's id left
// beside it (their writers cannot complete it any more);
// then it deletes the shared files no completed checkpoint uses
// (collectFiles). Failures are logged, not returned: the new checkpoint
// is complete whatever happens here.
func (s *BlobStorage) committed(m Metadata, exclusive bool) {
	id := m.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
	limit := s.files.end(id)
	defer s.collectFiles(limit)
	sc, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	var remove []int64
	if n := len(sc.complete) - s.cfg.retained; n > 0 {
		remove = append(remove, s.held.notHeld(sc.complete[:n])...)
	}
	for _, old := range sc.incomplete {
		if old < id && !s.open[old] {
			remove = append(remove, old)
		}
	}
	mine := map[string]bool{stateKey(id, metadataFile): true}
	for _, h := range m.States {
		mine[stateKey(id, h.File)] = true
	}
	var leftovers []string
	for _, k := range sc.keys[id] {
		if exclusive && !mine[k] {
			leftovers = append(leftovers, k)
		}
	}
	if err := s.deleteKeys(leftovers); err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot remove what an earlier attempt at a checkpoint left", slog.Int64("checkpoint", id), slog.String("storage", s.where), slog.Any("error", err))
	}
	for _, old := range remove {
		if err := s.removeCheckpoint(old, sc.keys[old]); err != nil {
			s.cfg.logger.Warn("checkpoint storage: cannot remove old checkpoint", slog.Int64("checkpoint", old), slog.String("storage", s.where), slog.Any("error", err))
		}
	}
}

// removeCheckpoint deletes the keys of checkpoint id, the metadata first,
// alone: a removal cut short reads as incomplete, not as a damaged
// checkpoint.
func (s *BlobStorage) removeCheckpoint(id int64, keys []string) error {
	meta := stateKey(id, metadataFile)
	var rest []string
	for _, k := range keys {
		if k != meta {
			rest = append(rest, k)
		}
	}
	if slices.Contains(keys, meta) {
		if err := s.blob.Delete(meta); err != nil {
			return err
		}
	}
	return s.deleteKeys(rest)
}

func (s *BlobStorage) deleteKeys(keys []string) error {
	if bd, ok := s.blob.(batchDeleter); ok {
		return bd.deleteKeys(keys)
	}
	var errs []error
	for _, k := range keys {
		if err := s.blob.Delete(k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// collectFiles deletes the shared files that no completed checkpoint
// still stored uses, except files this instance put after limit (see
// Storage and fileBook.end) and files being put now, and the temporary
// files of puts that are not under way (left by a crash; an adapter that
// writes through temporary names lists them as ".<name>.tmp-*"). Every
// completed checkpoint's metadata must be read for that: when one cannot
// be, nothing is deleted, since the files it uses are unknown. Called
// with s.mu held, after retention.
func (s *BlobStorage) collectFiles(limit uint64) {
	objs, err := s.blob.List(sharedDir + "/")
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list shared files for cleanup", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	if len(objs) == 0 {
		return
	}
	sc, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup of shared files", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	ms := make([]Metadata, 0, len(sc.complete))
	for _, id := range sc.complete {
		m, err := s.readMetadata(id)
		if err != nil {
			s.cfg.logger.Warn("checkpoint storage: not deleting unused shared files, since the shared files of a checkpoint are unknown", slog.Int64("checkpoint", id), slog.Any("error", err))
			return
		}
		ms = append(ms, m)
	}
	var names []string
	for _, o := range objs {
		name := strings.TrimPrefix(o.Key, sharedDir+"/")
		if of, ok := tempFileOf(name); ok {
			// A temporary file whose put is under way is the put's; any
			// other was left by a put that never finished.
			if s.files.tryClaim(of, ^uint64(0)) {
				if err := s.blob.Delete(o.Key); err != nil {
					s.cfg.logger.Warn("checkpoint storage: cannot remove a leftover temporary file", slog.String("file", s.blob.Location(o.Key)), slog.Any("error", err))
				}
				s.files.release(of, unchanged)
			}
			continue
		}
		if validateFileName(name) == nil {
			names = append(names, name)
		}
	}
	errs := s.files.collect(names, referencedFiles(ms), limit, func(name string) error {
		err := s.blob.Delete(sharedPath(name))
		if err == nil {
			s.forgetSize(name)
		}
		return err
	})
	for _, err := range errs {
		s.cfg.logger.Warn("checkpoint storage: cannot remove an unused shared file", slog.Any("error", err))
	}
}

func (s *BlobStorage) forgetSize(name string) {
	s.sizesMu.Lock()
	delete(s.sizes, name)
	s.sizesMu.Unlock()
}

func (s *BlobStorage) List() ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	return sc.complete, err
}

func (s *BlobStorage) Load(id int64) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(id)
}

func (s *BlobStorage) Latest() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return nil, err
	}
	cp, err := findLatest(s.walk(sc))
	if err != nil {
		return nil, err
	}
	// Resuming commits what it prepared: from now on it counts as
	// reported, whatever happens to it later, so its markers go.
	for _, k := range sc.keys[cp.ID] {
		if _, base, _ := strings.Cut(k, "/"); isMarker(base) {
			if err := s.blob.Delete(k); err != nil {
				return nil, fmt.Errorf("checkpoint storage %s: checkpoint %d: %w", s.where, cp.ID, &CheckpointError{ID: cp.ID, File: k, Err: err})
			}
		}
	}
	for _, id := range sc.incomplete {
		if id > cp.ID && !s.open[id] {
			s.cfg.logger.Info("checkpoint storage: ignoring incomplete checkpoint (no metadata: it never completed)", slog.Int64("checkpoint", id))
		}
	}
	return cp, nil
}

func isMarker(base string) bool {
	return base == committingFile || strings.HasPrefix(base, markerPrefix)
}

// LatestForInspection returns what Latest would, changing nothing: for
// tools that only look (cmd/splitflow's checkpoints ls).
func (s *BlobStorage) LatestForInspection() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return nil, err
	}
	return findLatest(s.walk(sc))
}

// CommitInterrupted reports whether checkpoint id's metadata is beside the
// commit marker of the writer that wrote it (a commit that never
// returned): such a checkpoint was never reported complete, so a damaged
// one is passed over by Latest.
func (s *BlobStorage) CommitInterrupted(id int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return false, err
	}
	return s.neverReported(sc, id)
}

// neverReported: a marker of the writer whose state blobs the metadata
// lists is there (or the bare marker of an older DirStorage). Metadata
// that cannot be decoded counts as never reported only beside a marker.
func (s *BlobStorage) neverReported(sc scanned, id int64) (bool, error) {
	var tokens []string
	for _, k := range sc.keys[id] {
		_, base, _ := strings.Cut(k, "/")
		if base == committingFile {
			return true, nil
		}
		if t, ok := strings.CutPrefix(base, markerPrefix); ok {
			tokens = append(tokens, t)
		}
	}
	if len(tokens) == 0 {
		return false, nil
	}
	m, err := s.readMetadata(id)
	if err != nil || len(m.States) == 0 {
		return true, nil
	}
	tok, _, _ := strings.Cut(m.States[0].File, "-")
	return slices.Contains(tokens, tok), nil
}

func (s *BlobStorage) walk(sc scanned) latestWalk {
	return latestWalk{
		where:         s.where,
		ids:           sc.complete,
		load:          s.load,
		logger:        s.cfg.logger,
		neverReported: func(id int64) (bool, error) { return s.neverReported(sc, id) },
		remedy: func(id, previous int64) string {
			dir := s.blob.Location(chkDir(id))
			shared := s.blob.Location(sharedDir)
			if previous == 0 {
				return fmt.Sprintf("restore %s (and the shared files it lists, in %s) from a backup; or, to start afresh and accept that sources start from their beginning again, remove everything in %s", dir, shared, s.where)
			}
			// Resuming from previous commits its committables again. An
			// exactly-once Kafka sink may have reused their transactional
			// ids once id completed, and then reports them as lost though
			// they were committed; every restart does so again.
			return fmt.Sprintf("restore %s (and the shared files it lists, in %s) from a backup; or, accepting that the output since checkpoint %d is written again, move %s out of %s (or delete it) and start again to resume from checkpoint %d. "+
				"An exactly-once Kafka sink may then fail the job with a *txn.DataLossError for transactions of checkpoint %d that were in fact committed (their ids were reused after checkpoint %d), "+
				"at every restart; an older checkpoint fares no better. If so, start afresh on an empty checkpoint storage, the sources starting at the offsets `splitflow checkpoints show %s` lists (operator state starts empty)",
				dir, shared, previous, dir, s.where, previous, previous, id, s.blob.Location(chkDir(previous)))
		},
	}
}

// readMetadata reads and decodes checkpoint id's metadata, verifying only
// the metadata itself.
func (s *BlobStorage) readMetadata(id int64) (Metadata, error) {
	metaName := stateKey(id, metadataFile)
	b, err := readBlob(s.blob, metaName, 0)
	if isNotExist(err) {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: ErrNotFound}
	}
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	m, err := decodeMetadata(b)
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%s: %w", s.blob.Location(metaName), err)}
	}
	if m.ID != id {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%w: metadata of checkpoint %d in the place of %d", ErrCorrupt, m.ID, id)}
	}
	return m, nil
}

// ReadMetadata returns checkpoint id's metadata, checked against its own
// checksum only: its state blobs and shared files are not looked at. For
// tools that show a checkpoint without restoring from it (cmd/splitflow);
// Load verifies.
func (s *BlobStorage) ReadMetadata(id int64) (Metadata, error) { return s.readMetadata(id) }

// loadConcurrency bounds the state blobs read at once while a checkpoint
// is verified.
const loadConcurrency = 8

// load reads and verifies checkpoint id: metadata checksum and version,
// every state blob's presence, length and checksum (read at once,
// loadConcurrency at a time, and kept, so that restoring does not read
// them again), and the presence and size of every shared file from one
// listing (they may be large: their checksums are verified as CopyFile
// copies them).
func (s *BlobStorage) load(id int64) (*Checkpoint, error) {
	m, err := s.readMetadata(id)
	if err != nil {
		return nil, err
	}
	read := func(h StateHandle) ([]byte, error) {
		key := stateKey(id, h.File)
		data, err := readBlob(s.blob, key, h.Size)
		if err == nil {
			err = verifyBlob(h, data)
			if err != nil {
				err = fmt.Errorf("%s: %w", s.blob.Location(key), err)
			}
		} else if isNotExist(err) {
			err = fmt.Errorf("%w: state blob of %s, %s, is missing", ErrCorrupt, h.Owner, s.blob.Location(key))
		}
		if err != nil {
			return nil, &CheckpointError{ID: id, File: key, Err: err}
		}
		return data, nil
	}
	verified := make(map[string][]byte, len(m.States))
	var vmu sync.Mutex
	errs := make([]error, len(m.States))
	sem := make(chan struct{}, loadConcurrency)
	var wg sync.WaitGroup
	for i, h := range m.States {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			data, err := read(h)
			if err != nil {
				errs[i] = err
				return
			}
			vmu.Lock()
			verified[h.File] = data
			vmu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if files := m.Files(); len(files) > 0 {
		objs, err := s.blob.List(sharedDir + "/")
		if err != nil {
			return nil, &CheckpointError{ID: id, File: sharedDir, Err: err}
		}
		stored := make(map[string]int64, len(objs))
		for _, o := range objs {
			stored[strings.TrimPrefix(o.Key, sharedDir+"/")] = o.Size
		}
		for _, f := range files {
			where := s.blob.Location(sharedPath(f.Name))
			size, ok := stored[f.Name]
			switch {
			case !ok:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, where)}
			case size != f.Size:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: shared file %s is %d bytes, the metadata says %d", ErrCorrupt, where, size, f.Size)}
			}
		}
	}
	copyFile := func(h FileHandle, dst string) error {
		key := sharedPath(h.Name)
		where := s.blob.Location(key)
		src, err := s.blob.Open(key, h.Size)
		if isNotExist(err) {
			return &CheckpointError{ID: id, File: key, Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, where)}
		}
		if err != nil {
			return &CheckpointError{ID: id, File: key, Err: err}
		}
		defer src.Close()
		return copyVerified(id, h, src, where, dst)
	}
	return &Checkpoint{Metadata: m, read: read, copyFile: copyFile, verified: verified}, nil
}

// PutFile stores the local file at path as shared/<name>, unless it is
// stored already with the local file's size. See Storage.
func (s *BlobStorage) PutFile(name, path string) (FileHandle, error) {
	if err := validateFileName(name); err != nil {
		return FileHandle{}, err
	}
	s.files.claim(name)
	h, err := s.putFile(name, path)
	outcome := stored
	if err != nil {
		outcome = unchanged
	} else {
		s.sizesMu.Lock()
		s.sizes[name] = h.Size
		s.sizesMu.Unlock()
	}
	s.files.release(name, outcome)
	return h, err
}

func (s *BlobStorage) putFile(name, path string) (FileHandle, error) {
	key := sharedPath(name)
	fail := func(err error) (FileHandle, error) {
		return FileHandle{}, fmt.Errorf("checkpoint storage %s: put shared file %s from %s: %w", s.where, name, path, err)
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
	// The checksum is the local file's, computed before the copy: the
	// stored copy is verified against it when restored.
	crc := crc32.New(castagnoli)
	n, err := io.Copy(crc, src)
	if err != nil {
		return fail(err)
	}
	if n != info.Size() {
		return fail(fmt.Errorf("%s changed while it was read: %d bytes, then %d", path, info.Size(), n))
	}
	h := FileHandle{Name: name, Size: n, CRC32C: crc.Sum32()}
	switch size, err := s.blob.Stat(key); {
	case err == nil:
		if size != n {
			return fail(fmt.Errorf("%s is already stored with %d bytes, the local file has %d; shared file names must be unique, and the stored file may be in use", s.blob.Location(key), size, n))
		}
		// Stored by a process that may have crashed before its name was
		// durable: it must be before metadata can list it.
		if ns, ok := s.blob.(nameSyncer); ok {
			if err := ns.syncName(key); err != nil {
				return fail(err)
			}
		}
		return h, nil
	case !isNotExist(err):
		return fail(err)
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	if err := s.blob.Create(key, io.NewSectionReader(src, 0, n), n); err != nil {
		return fail(err)
	}
	// Durable before PutFile returns, as Storage says, on an adapter that
	// defers it too.
	if ns, ok := s.blob.(nameSyncer); ok {
		if err := ns.syncName(key); err != nil {
			return fail(err)
		}
	}
	s.filesWritten.Add(1)
	return h, nil
}

// Files lists shared/, CRC32C 0 (unknown without reading every file).
func (s *BlobStorage) Files() ([]FileHandle, error) {
	objs, err := s.blob.List(sharedDir + "/")
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: list shared files: %w", s.where, err)
	}
	var out []FileHandle
	for _, o := range objs {
		name := strings.TrimPrefix(o.Key, sharedDir+"/")
		if validateFileName(name) == nil {
			out = append(out, FileHandle{Name: name, Size: o.Size})
		}
	}
	slices.SortFunc(out, func(a, b FileHandle) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteFile removes shared/<name>. See Storage.
func (s *BlobStorage) DeleteFile(name string) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	s.files.claim(name)
	err := s.blob.Delete(sharedPath(name))
	outcome := gone
	if err != nil {
		outcome = unchanged
		err = fmt.Errorf("checkpoint storage %s: delete shared file: %w", s.where, err)
	} else {
		s.forgetSize(name)
	}
	s.files.release(name, outcome)
	return err
}

// Hold keeps checkpoint id from retention until release (Holder).
func (s *BlobStorage) Hold(id int64) (release func()) { return s.held.hold(&s.mu, id) }

func verifyBlob(h StateHandle, data []byte) error {
	if int64(len(data)) != h.Size {
		return fmt.Errorf("%w: state of %s is %d bytes, metadata says %d", ErrCorrupt, h.Owner, len(data), h.Size)
	}
	if got := checksum(data); got != h.CRC32C {
		return fmt.Errorf("%w: state of %s has crc32c %08x, metadata says %08x", ErrCorrupt, h.Owner, got, h.CRC32C)
	}
	return nil
}
