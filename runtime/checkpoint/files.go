package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// Shared files: files stored once and used by any number of checkpoints,
// for state backends whose state is immutable files (the SST files of an
// LSM tree): a file is put when it first appears, and every later
// checkpoint that still uses it refers to it instead of writing it again.
//
// What may be deleted, and when, is the one hard question. Commit(N)
// deletes, after retention, every shared file that no completed checkpoint
// still on storage refers to, except files this Storage put after Begin(N)
// (and after the Begin of any checkpoint still being written) and files
// being put right now. Files the storage holds but this instance never put
// (left by a process that crashed) are garbage like any other unreferenced
// file.
//
// That is safe because of the contract callers keep (see Storage): a
// caller refers, in checkpoint M, to a file it put before Begin(N), N < M,
// only if checkpoint N refers to it too (or N never commits). A state
// backend keeps it naturally: it refers to a file uploaded earlier only if
// the file is still live in its database, and a file live at M and at the
// upload was live at every snapshot between them, N's included. So when
// Commit(N) finds a file unreferenced by N and put before Begin(N), no later
// checkpoint can come to refer to it: the backend dropped it before N's
// snapshot. A file put after Begin(N) may be in a checkpoint newer than N
// still being written, and is kept until a later commit decides.

// FileHandle names a shared file: one stored once and used by any number
// of checkpoints.
type FileHandle struct {
	// Name is the file's base name, unique in the storage: letters,
	// digits, '.', '_' and '-', not starting with '.' or '_' (the storage's
	// own temporary files do), at most 200 bytes.
	Name string
	// Size is the file's length in bytes.
	Size int64
	// CRC32C is the Castagnoli CRC-32 of the file, as StateHandle's.
	CRC32C uint32
}

func (h FileHandle) String() string { return fmt.Sprintf("%s (%d bytes)", h.Name, h.Size) }

// maxFileName bounds shared file names, well under every file system's
// limit of 255 bytes with the temporary file's prefix and suffix.
const maxFileName = 200

// sharedDir is where a BlobStorage keeps shared files, beside chk-<id>.
const sharedDir = "shared"

// ErrMissingFile: a shared file a checkpoint refers to is not in the
// storage. It matches ErrCorrupt: a checkpoint missing a file is damaged,
// as one missing a state blob is.
var ErrMissingFile = fmt.Errorf("%w: shared file missing", ErrCorrupt)

// validateFileName says why name cannot be a shared file's name.
func validateFileName(name string) error {
	switch {
	case name == "":
		return errors.New("checkpoint storage: empty shared file name")
	case len(name) > maxFileName:
		return fmt.Errorf("checkpoint storage: shared file name %.40q... is %d bytes, at most %d are allowed", name, len(name), maxFileName)
	case name[0] == '.' || name[0] == '_':
		return fmt.Errorf("checkpoint storage: shared file name %q starts with %q, which the storage keeps for its own files", name, name[0])
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("checkpoint storage: shared file name %q holds %q; use letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}

// sortFiles returns files sorted by name, refusing a name given twice.
func sortFiles(files []FileHandle) ([]FileHandle, error) {
	if len(files) == 0 {
		return nil, nil
	}
	out := slices.Clone(files)
	slices.SortFunc(out, func(a, b FileHandle) int { return cmp.Compare(a.Name, b.Name) })
	for i, f := range out {
		if err := validateFileName(f.Name); err != nil {
			return nil, err
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("checkpoint storage: shared file %s has negative size %d", f.Name, f.Size)
		}
		if i > 0 && out[i-1].Name == f.Name {
			return nil, fmt.Errorf("checkpoint storage: shared file %s is listed twice", f.Name)
		}
	}
	return out, nil
}

// Files returns every shared file the checkpoint uses (the union over its
// owners), sorted by name.
func (m Metadata) Files() []FileHandle {
	var out []FileHandle
	for _, h := range m.States {
		out = append(out, h.Files...)
	}
	slices.SortFunc(out, func(a, b FileHandle) int { return cmp.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b FileHandle) bool { return a.Name == b.Name })
}

// checkFileAgreement refuses states that name one shared file with two
// different handles: a name is one file in the storage.
func checkFileAgreement(states []StateHandle) error {
	seen := map[string]FileHandle{}
	for _, h := range states {
		for _, f := range h.Files {
			if g, ok := seen[f.Name]; ok && g != f {
				return fmt.Errorf("shared file %s is listed as %d bytes crc32c %08x and as %d bytes crc32c %08x", f.Name, g.Size, g.CRC32C, f.Size, f.CRC32C)
			}
			seen[f.Name] = f
		}
	}
	return nil
}

// CopyFile copies shared file h to the local path dst (created or
// truncated), verifying its length and CRC-32C while copying. A file
// missing from the storage is an error matching ErrMissingFile (and so
// ErrCorrupt) that names where it was looked for; one of another length or
// checksum matches ErrCorrupt and names the file. On error dst is removed.
// dst is not fsynced: a restore interrupted by a crash starts again. Safe
// for concurrent use.
//
// The handle usually comes from a state blob, which a crafted checkpoint
// may fill with anything: a handle that is not one of the shared files
// the checkpoint's metadata lists, with the same size and checksum, is
// refused as corrupt before any storage is read, so that a name such as
// "../../etc/passwd" neither copies a file from outside the storage nor
// tells whether one exists.
func (c *Checkpoint) CopyFile(h FileHandle, dst string) error {
	if !c.lists(h) {
		return &CheckpointError{ID: c.ID, Err: fmt.Errorf("%w: a state names shared file %q (%d bytes, crc32c %08x), which the checkpoint's metadata does not list; the checkpoint is damaged or was crafted", ErrCorrupt, h.Name, h.Size, h.CRC32C)}
	}
	if c.copyFile == nil {
		return &CheckpointError{ID: c.ID, File: h.Name, Err: fmt.Errorf("%w: the checkpoint was not loaded from a storage", ErrMissingFile)}
	}
	return c.copyFile(h, dst)
}

// lists reports that h is one of the shared files c's metadata lists
// (whose names the metadata's decoder validated).
func (c *Checkpoint) lists(h FileHandle) bool {
	for _, st := range c.States {
		if slices.Contains(st.Files, h) {
			return true
		}
	}
	return false
}

// copyVerified copies src to dst as shared file h of checkpoint id,
// checking length and checksum; where names the source in messages.
func copyVerified(id int64, h FileHandle, src io.Reader, where, dst string) (err error) {
	out, err := os.Create(dst)
	if err != nil {
		return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("create %s: %w", dst, err)}
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("write %s: %w", dst, cerr)}
		}
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	crc := crc32.New(castagnoli)
	// One byte more than expected is read, so a longer file is told from
	// one of the right length.
	n, err := io.Copy(io.MultiWriter(out, crc), io.LimitReader(src, h.Size+1))
	if err != nil {
		return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("copy %s to %s: %w", where, dst, err)}
	}
	return verifyFile(id, h, n, crc, where)
}

func verifyFile(id int64, h FileHandle, n int64, crc hash.Hash32, where string) error {
	if n != h.Size {
		what := fmt.Sprintf("%d bytes", n)
		if n > h.Size {
			what = "longer"
		}
		return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("%w: shared file %s is %s, the checkpoint says %d", ErrCorrupt, where, what, h.Size)}
	}
	if got := crc.Sum32(); got != h.CRC32C {
		return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("%w: shared file %s has crc32c %08x, the checkpoint says %08x", ErrCorrupt, where, got, h.CRC32C)}
	}
	return nil
}

// fileBook is the bookkeeping of shared files both storages share: a
// sequence number that orders puts and Begins, the sequence number at
// which each file was last put by this instance, the checkpoints being
// written with their Begin's number, and the names being put or deleted
// now, which nobody else may touch meanwhile. Its methods are safe for
// concurrent use.
//
// Why names are claimed: a put that finds f stored returns f's handle
// without writing. Were a collection of Commit(N) deleting f at the same
// moment (f unused, last put before Begin(N)), the caller would hold the
// handle of a deleted file, WriteState would find it (it checks before
// the deletion), and the checkpoint listing it would be damaged. With
// claims, either the put holds f first, and the collection passes f over
// (when the put is done it counts as after Begin(N)); or the deletion
// holds it first, and the put waits, finds f gone and writes it again.
type fileBook struct {
	mu    sync.Mutex
	seq   uint64
	put   map[string]uint64
	begun map[int64]uint64
	busy  map[string]chan struct{}
}

func newFileBook() *fileBook {
	return &fileBook{put: map[string]uint64{}, begun: map[int64]uint64{}, busy: map[string]chan struct{}{}}
}

// claim waits until nobody is putting or deleting name, then claims it.
// The caller must call release.
func (b *fileBook) claim(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		ch, ok := b.busy[name]
		if !ok {
			break
		}
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
	}
	b.busy[name] = make(chan struct{})
}

// tryClaim claims name if nobody is putting or deleting it now and its
// last put (by this instance) was at or before seq; the garbage collector
// claims what it deletes this way.
func (b *fileBook) tryClaim(name string, seq uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.busy[name]; ok || b.put[name] > seq {
		return false
	}
	b.busy[name] = make(chan struct{})
	return true
}

// busyNow reports whether name is being put or deleted.
func (b *fileBook) busyNow(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.busy[name]
	return ok
}

// What became of a claimed name.
type claimOutcome int

const (
	// unchanged: nothing was stored or removed (a failed put or delete).
	unchanged claimOutcome = iota
	// stored: the file is in the storage, put (or found there) by this
	// instance now, which numbers the put.
	stored
	// gone: the file was deleted.
	gone
)

// release ends a claim.
func (b *fileBook) release(name string, o claimOutcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch o {
	case stored:
		b.seq++
		b.put[name] = b.seq
	case gone:
		delete(b.put, name)
	}
	close(b.busy[name])
	delete(b.busy, name)
}

// begin numbers Begin(id).
func (b *fileBook) begin(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	b.begun[id] = b.seq
}

// end forgets checkpoint id once it is committed or aborted, and returns
// the sequence number at or before which files put by this instance may be
// collected now: before Begin(id) and before the Begin of every
// checkpoint still being written.
func (b *fileBook) end(id int64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit, ok := b.begun[id]
	if !ok {
		limit = b.seq
	}
	delete(b.begun, id)
	for _, s := range b.begun {
		limit = min(limit, s)
	}
	return limit
}

// collect deletes the garbage among the stored shared files: those no
// completed checkpoint refers to and that tryClaim lets go (put by this
// instance at or before limit, or never). remove deletes one and says
// whether it is gone.
func (b *fileBook) collect(stored []string, referenced map[string]bool, limit uint64, remove func(name string) error) []error {
	var errs []error
	for _, name := range stored {
		if referenced[name] || !b.tryClaim(name, limit) {
			continue
		}
		if err := remove(name); err != nil {
			b.release(name, unchanged)
			errs = append(errs, err)
			continue
		}
		b.release(name, gone)
	}
	return errs
}

// referencedFiles is the set of shared files the given checkpoints use.
func referencedFiles(ms []Metadata) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for _, h := range m.States {
			for _, f := range h.Files {
				out[f.Name] = true
			}
		}
	}
	return out
}

// tempFileOf returns the shared file a Blob's temporary file
// (".<name>.tmp-<random>") is being written for.
func tempFileOf(base string) (string, bool) {
	rest, ok := strings.CutPrefix(base, ".")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, ".tmp-")
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}
