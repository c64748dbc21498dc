package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// CoordinatorSubtask is the Subtask of an Owner that is an operator
// coordinator rather than a parallel subtask (the same convention as the
// engine's operator errors).
const CoordinatorSubtask = -1

// Owner says whose state a blob is: one subtask of an operator, or the
// operator's coordinator (Subtask == CoordinatorSubtask). State is restored
// by operator UID, so the UID must be stable across job versions.
type Owner struct {
	UID     string
	Subtask int
}

// OperatorOwner is the owner of the state of subtask s of operator uid.
func OperatorOwner(uid string, s int) Owner { return Owner{UID: uid, Subtask: s} }

// CoordinatorOwner is the owner of the state of operator uid's coordinator
// (for a source, its split enumerator).
func CoordinatorOwner(uid string) Owner { return Owner{UID: uid, Subtask: CoordinatorSubtask} }

// IsCoordinator reports whether o is an operator coordinator.
func (o Owner) IsCoordinator() bool { return o.Subtask == CoordinatorSubtask }

func (o Owner) String() string {
	if o.IsCoordinator() {
		return fmt.Sprintf("%s/coordinator", o.UID)
	}
	return fmt.Sprintf("%s/%d", o.UID, o.Subtask)
}

func (o Owner) validate() error {
	if o.UID == "" {
		return errors.New("checkpoint: state owner has an empty operator UID")
	}
	if o.Subtask < CoordinatorSubtask {
		return fmt.Errorf("checkpoint: state owner %q has subtask %d; use a subtask >= 0 or CoordinatorSubtask", o.UID, o.Subtask)
	}
	return nil
}

// Compare orders owners by UID, then subtask (a coordinator first), the
// order of a checkpoint's states in its metadata.
func (a Owner) Compare(b Owner) int {
	return cmp.Or(cmp.Compare(a.UID, b.UID), cmp.Compare(a.Subtask, b.Subtask))
}

// StateHandle points at one state blob of a checkpoint. A Writer returns it
// from WriteState; the metadata lists every handle, so that a reader can
// tell a complete blob from a truncated, altered or missing one.
type StateHandle struct {
	Owner Owner
	// File is the blob's name inside its checkpoint (a base name, never a
	// path).
	File string
	// Size is the blob's length in bytes.
	Size int64
	// CRC32C is the Castagnoli CRC-32 of the blob.
	CRC32C uint32
	// Files are the shared files this owner's state uses beside its blob,
	// sorted by name, no name twice (see PutFile).
	Files []FileHandle
}

// equal compares handles (StateHandle holds a slice, so == does not).
func (h StateHandle) equal(o StateHandle) bool {
	return h.Owner == o.Owner && h.File == o.File && h.Size == o.Size && h.CRC32C == o.CRC32C && slices.Equal(h.Files, o.Files)
}

// Metadata describes one checkpoint. It is what Commit makes durable and
// what Load and Latest return after verification.
type Metadata struct {
	// ID is the checkpoint id; ids strictly increase over a job's life.
	ID int64
	// Timestamp is when the checkpoint was triggered, kept to the
	// millisecond.
	Timestamp time.Time
	// Fingerprint identifies the job graph that wrote the checkpoint. It is
	// the caller's: the engine compares it on restore to refuse state from
	// an incompatible job.
	Fingerprint string
	// States lists every state blob, sorted by owner.
	States []StateHandle
	// Savepoint marks a savepoint: a self-contained copy of a checkpoint
	// that the user asked for (WriteSavepoint), kept where the user said
	// and never removed by a job's retention.
	Savepoint bool
}

// Checkpoint is a completed, verified checkpoint: every blob its metadata
// lists was present with the recorded length and checksum when it was
// loaded, and every shared file it uses was present with its recorded
// length (its checksum is verified by CopyFile, as it is copied). Files
// (of Metadata) lists the shared files.
type Checkpoint struct {
	Metadata
	// Skipped lists the newer checkpoints Latest found invalid and passed
	// over to reach this one, newest first. Empty from Load.
	Skipped []error
	// OutputCommitted is set by OpenRestorePoint for a savepoint whose
	// job recorded that it committed every committable of this checkpoint
	// (MarkSavepointCommitted): a job started from it commits none of
	// them again, since their transactional ids may have been reused.
	OutputCommitted bool

	read     func(StateHandle) ([]byte, error)
	copyFile func(h FileHandle, dst string) error

	// verified holds the blobs read and verified by Load or Latest, by
	// file, so that restoring reads each blob from storage once however
	// many subtasks ask for it; nil once dropped (DropVerified).
	mu       sync.Mutex
	verified map[string][]byte
}

// State returns the state blob of owner, verified against its checksum: the
// copy read when the checkpoint was verified, or, once that was dropped,
// read and verified again. ok is false when the checkpoint holds no state
// for owner (an operator added since, or one that had nothing to store).
// Safe for concurrent use; the caller owns the returned slice.
func (c *Checkpoint) State(owner Owner) (data []byte, ok bool, err error) {
	for _, h := range c.States {
		if h.Owner == owner {
			c.mu.Lock()
			b, cached := c.verified[h.File]
			c.mu.Unlock()
			if cached {
				return slices.Clone(b), true, nil
			}
			data, err := c.read(h)
			return data, err == nil, err
		}
	}
	return nil, false, nil
}

// DropVerified forgets the blobs kept from verification, once whoever
// restores from the checkpoint has taken what it needs; State reads from
// storage again after it.
func (c *Checkpoint) DropVerified() {
	c.mu.Lock()
	c.verified = nil
	c.mu.Unlock()
}

// Storage keeps completed checkpoints. A checkpoint is written through a
// Writer from Begin and exists (for Latest, Load and List) only once its
// Commit returned nil; Commit then also drops completed checkpoints beyond
// the retained count (WithRetained). Implementations are safe for
// concurrent use.
//
// Shared files (PutFile) are stored once and used by any number of
// checkpoints. Commit(N) deletes, after retention, the shared files that
// no completed checkpoint still stored refers to, except those this
// Storage put after Begin(N) or after the Begin of a checkpoint still being
// written, and those being put now. The contract for callers that makes
// this safe: a caller may refer, in checkpoint M, to a file it put before
// Begin(N) for some N < M only if checkpoint N, once committed, refers to
// it too (or N never commits). A state backend keeps it by referring only
// to files still live in its database: a file live when it was put and
// still live at M was live at every snapshot between. Files a job restored
// from a checkpoint count as put before its first Begin, and fall under
// the same contract. A caller unsure of a file may put it again: a stored
// file is not rewritten, and the put counts from then on.
type Storage interface {
	// Begin starts checkpoint id. It fails with ErrExists when id has
	// already been committed: ids are never reused.
	Begin(id int64) (Writer, error)
	// Latest returns the checkpoint a job resumes from: the newest
	// completed checkpoint, verified. It never falls back to an older
	// checkpoint when that could write output again:
	//   - a newest checkpoint that cannot be read (an I/O error) is an
	//     *UnreadableCheckpointError naming it and the cause;
	//   - a damaged one (ErrCorrupt) that may have been reported complete
	//     is a *DamagedCheckpointError saying how to proceed;
	//   - only a damaged one that was provably never reported complete (a
	//     commit that never returned) is passed over, logged and listed in
	//     Checkpoint.Skipped.
	// With no completed checkpoint at all it returns ErrNoCheckpoint; when
	// every completed checkpoint was passed over it returns a
	// *NoValidCheckpointError, which does not match ErrNoCheckpoint,
	// because starting from scratch then would silently replay or lose
	// data. The checkpoint returned counts as reported from then on: the
	// caller resumes from it, which commits what it prepared.
	Latest() (*Checkpoint, error)
	// Load returns checkpoint id after verifying it: ErrNotFound when it
	// was never committed or is gone, a *CheckpointError otherwise.
	Load(id int64) (*Checkpoint, error)
	// List returns the ids of committed checkpoints, oldest first, without
	// verifying them.
	List() ([]int64, error)
	// PutFile stores the local file at path as shared file name, durably,
	// and returns its handle, size and CRC-32C computed from the local
	// file. Put once: when a file of that name is already stored with the
	// local file's size it is not written again (the local file is read
	// for its checksum; the stored one is trusted to hold the same bytes,
	// which CopyFile verifies on restore); stored with another size, it is
	// an error, since names are unique and a stored file may be in use.
	// Safe for concurrent use, also while checkpoints are written and
	// committed; puts of one name wait for each other.
	PutFile(name, path string) (FileHandle, error)
	// Files lists every shared file stored now, sorted by name. CRC32C may
	// be 0 (unknown): the storages of this package would have to read
	// every file to tell it.
	Files() ([]FileHandle, error)
	// DeleteFile removes shared file name; a file that does not exist is
	// not an error. It is the caller's to know that no checkpoint it keeps
	// refers to the file: Commit already deletes the files none refers to.
	DeleteFile(name string) error
}

// Writer writes one checkpoint. WriteState may be called concurrently
// (each task writes its own state from its own goroutine); Commit and
// Abort are called once all WriteState calls have returned, and end the
// Writer: later calls fail with ErrWriterClosed.
type Writer interface {
	// ID is the checkpoint being written.
	ID() int64
	// WriteState stores the state blob of owner durably and returns its
	// handle. An owner writes at most once per checkpoint. files are the
	// shared files (from PutFile) the owner's state uses beside data, in
	// any order, each name once; every one must be in the storage with the
	// handle's size (an error naming the file otherwise; the checksum is
	// the caller's, from PutFile). The handle returned records them,
	// sorted by name.
	WriteState(owner Owner, data []byte, files ...FileHandle) (StateHandle, error)
	// Commit makes the checkpoint complete: m.ID must be ID(), and every
	// handle in m.States must have come from this Writer's WriteState. It
	// returns nil only once the metadata is durable; only then may sinks
	// be told to commit (atomic checkpoints). A failed Commit leaves no
	// completed checkpoint behind.
	Commit(m Metadata) error
	// Abort discards what was written.
	Abort() error
}

// writeLog is the bookkeeping both Writers share: each owner writes once,
// files are numbered in write order, and nothing is written after Commit or
// Abort. Its methods are safe for concurrent use.
type writeLog struct {
	id       int64
	mu       sync.Mutex
	seq      int
	reserved map[Owner]bool
	written  map[Owner]StateHandle
	closed   bool
}

func newWriteLog(id int64) *writeLog {
	return &writeLog{id: id, reserved: map[Owner]bool{}, written: map[Owner]StateHandle{}}
}

// reserve claims owner's one write and returns the file name to use.
func (l *writeLog) reserve(owner Owner) (string, error) {
	if err := owner.validate(); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", ErrWriterClosed
	}
	if l.reserved[owner] {
		return "", fmt.Errorf("checkpoint %d: %w: %s", l.id, ErrDuplicateState, owner)
	}
	l.reserved[owner] = true
	l.seq++
	return stateFileName(l.seq, owner), nil
}

// release gives back a reservation whose write failed.
func (l *writeLog) release(owner Owner) {
	l.mu.Lock()
	delete(l.reserved, owner)
	l.mu.Unlock()
}

// record notes a completed write.
func (l *writeLog) record(h StateHandle) {
	l.mu.Lock()
	l.written[h.Owner] = h
	l.mu.Unlock()
}

// commit ends the log and checks m against what was written.
func (l *writeLog) commit(m Metadata) (Metadata, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Metadata{}, ErrWriterClosed
	}
	l.closed = true
	return checkCommit(l.id, m, l.written)
}

// abort ends the log.
func (l *writeLog) abort() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrWriterClosed
	}
	l.closed = true
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// checkCommit validates m against the handles written through a Writer and
// returns m with its states sorted by owner, so that metadata is
// deterministic whatever order tasks acknowledged in.
func checkCommit(id int64, m Metadata, written map[Owner]StateHandle) (Metadata, error) {
	if m.ID != id {
		return m, fmt.Errorf("checkpoint %d: commit carries metadata of checkpoint %d", id, m.ID)
	}
	states := slices.Clone(m.States)
	slices.SortFunc(states, func(a, b StateHandle) int { return a.Owner.Compare(b.Owner) })
	for i, h := range states {
		if i > 0 && states[i-1].Owner == h.Owner {
			return m, fmt.Errorf("checkpoint %d: state of %s listed twice", id, h.Owner)
		}
		w, ok := written[h.Owner]
		if !ok || !w.equal(h) {
			return m, fmt.Errorf("checkpoint %d: %w: %s (%s) was not written by this checkpoint's writer", id, ErrUnknownHandle, h.Owner, h.File)
		}
		// The writer's own copy: the caller's Files slice may change after.
		states[i] = w
	}
	if err := checkFileAgreement(states); err != nil {
		return m, fmt.Errorf("checkpoint %d: %w", id, err)
	}
	m.States = states
	return m, nil
}

// latestWalk is what findLatest needs of a storage: its completed
// checkpoint ids (oldest first), how to load and verify one, whether one
// was provably never reported complete, and what to tell the user to do
// about a damaged one.
type latestWalk struct {
	where         string
	ids           []int64
	load          func(id int64) (*Checkpoint, error)
	neverReported func(id int64) (bool, error)
	remedy        func(id, previous int64) string
	logger        *slog.Logger
}

// findLatest is Latest's rule, the same for every Storage. Newest first:
//   - a checkpoint that verifies is the answer;
//   - one in a format this build does not know stops the walk: a newer
//     build wrote it, and falling back would rewind the job behind output
//     already committed;
//   - one that is damaged (ErrCorrupt: torn or altered metadata, a state
//     file missing, of the wrong length or checksum) is passed over only
//     when the storage can tell that it was never reported complete: no
//     sink committed anything of it. Otherwise its sinks may have
//     committed its output, and resuming from an older checkpoint would
//     write that output again: a *DamagedCheckpointError;
//   - one that cannot be read (any other error: EIO, EMFILE, permissions)
//     is an error, never a reason to fall back.
func findLatest(w latestWalk) (*Checkpoint, error) {
	if len(w.ids) == 0 {
		return nil, ErrNoCheckpoint
	}
	var skipped []error
	for i := len(w.ids) - 1; i >= 0; i-- {
		id := w.ids[i]
		cp, err := w.load(id)
		if err == nil {
			cp.Skipped = skipped
			return cp, nil
		}
		switch {
		case errors.Is(err, ErrUnsupportedVersion):
			return nil, err
		case errors.Is(err, ErrCorrupt):
			never, rerr := w.neverReported(id)
			if rerr != nil {
				return nil, &UnreadableCheckpointError{Storage: w.where, ID: id, Err: rerr}
			}
			if !never {
				var previous int64
				if i > 0 {
					previous = w.ids[i-1]
				}
				return nil, &DamagedCheckpointError{Storage: w.where, ID: id, Previous: previous, Remedy: w.remedy(id, previous), Err: err}
			}
			w.logger.Error("checkpoint storage: skipping damaged checkpoint that was never reported complete (its commit did not return)",
				slog.String("storage", w.where), slog.Int64("checkpoint", id), slog.Any("error", err))
			skipped = append(skipped, err)
		default:
			return nil, &UnreadableCheckpointError{Storage: w.where, ID: id, Err: err}
		}
	}
	return nil, &NoValidCheckpointError{Skipped: skipped}
}

// StorageOption configures NewDirStorage, NewMemoryStorage, NewS3Storage
// and NewBlobStorage (the WithS3 options only NewS3Storage).
type StorageOption interface{ applyStorage(*storageConfig) }

type storageOptionFunc func(*storageConfig)

func (f storageOptionFunc) applyStorage(c *storageConfig) { f(c) }

type storageConfig struct {
	retained int
	logger   *slog.Logger
	// s3 is S3Storage's; the other storages ignore it.
	s3 s3Config
}

func defaultStorageConfig() storageConfig {
	return storageConfig{retained: 3, logger: slog.Default(), s3: defaultS3Config()}
}

func (c *storageConfig) validate() error {
	if c.retained < 1 {
		return fmt.Errorf("checkpoint storage: retained checkpoints is %d; keep at least 1, or there is nothing to restore from", c.retained)
	}
	if c.logger == nil {
		return errors.New("checkpoint storage: nil logger; pass slog.New(slog.DiscardHandler) to drop logs")
	}
	return nil
}

func newStorageConfig(opts []StorageOption) (storageConfig, error) {
	c := defaultStorageConfig()
	for _, o := range opts {
		o.applyStorage(&c)
	}
	return c, c.validate()
}

// WithRetained keeps the newest n completed checkpoints (default 3; Flink's
// state.checkpoints.num-retained). Older ones are deleted only after a newer
// checkpoint's metadata is durable.
func WithRetained(n int) StorageOption {
	return storageOptionFunc(func(c *storageConfig) { c.retained = n })
}

// WithLogger is where storage reports invalid checkpoints it skips and
// cleanup it could not do (default slog.Default()).
func WithLogger(l *slog.Logger) StorageOption {
	return storageOptionFunc(func(c *storageConfig) { c.logger = l })
}
