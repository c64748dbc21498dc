package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// logBuffer collects what storage logs, so tests can check that nothing
// invalid is skipped silently.
type logBuffer struct{ bytes.Buffer }

func (b *logBuffer) logger() StorageOption {
	return WithLogger(slog.New(slog.NewTextHandler(&b.Buffer, nil)))
}

// twoCheckpoints commits checkpoints 1 and 2 in a fresh directory.
func twoCheckpoints(t *testing.T, opts ...StorageOption) (*DirStorage, Metadata, Metadata) {
	t.Helper()
	s, err := NewDirStorage(t.TempDir(), append([]StorageOption{quiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	m1 := commit(t, s, 1, testBlobs(1))
	m2 := commit(t, s, 2, testBlobs(2))
	return s, m1, m2
}

// wantFallback checks that Latest passed over checkpoint 2 as damaged with
// an error matching want, said so in the log, and returned checkpoint 1.
func wantFallback(t *testing.T, s *DirStorage, logs *logBuffer, m1 Metadata, want error) {
	t.Helper()
	logs.Reset()
	cp, err := s.Latest()
	if err != nil {
		t.Fatalf("Latest: %v, want checkpoint 1", err)
	}
	checkContent(t, cp, m1, testBlobs(1))
	if len(cp.Skipped) != 1 || !errors.Is(cp.Skipped[0], want) {
		t.Fatalf("Skipped = %v, want one error matching %v", cp.Skipped, want)
	}
	var ce *CheckpointError
	if !errors.As(cp.Skipped[0], &ce) || ce.ID != 2 {
		t.Fatalf("skipped error %v does not name checkpoint 2", cp.Skipped[0])
	}
	if !strings.Contains(logs.String(), "skipping damaged checkpoint that was never reported complete") || !strings.Contains(logs.String(), "checkpoint=2") {
		t.Fatalf("skipped checkpoint not logged; log: %q", logs.String())
	}
	if _, err := s.Load(2); !errors.Is(err, want) {
		t.Fatalf("Load(2): %v, want %v", err, want)
	}
}

// wantDamaged checks that Latest refuses damaged checkpoint 2, which may
// have been reported complete, with a *DamagedCheckpointError matching want
// that names the checkpoint and the way on; then, with checkpoint 2's
// commit marked as interrupted (never reported), that Latest passes over
// it to checkpoint 1.
func wantDamaged(t *testing.T, s *DirStorage, logs *logBuffer, m1 Metadata, want error) {
	t.Helper()
	_, err := s.Latest()
	var de *DamagedCheckpointError
	if !errors.As(err, &de) || de.ID != 2 || de.Previous != 1 || !errors.Is(err, want) {
		t.Fatalf("Latest: %v; want a *DamagedCheckpointError for checkpoint 2 matching %v", err, want)
	}
	for _, want := range []string{s.Dir(), chkDir(2), "move " + filepath.Join(s.Dir(), chkDir(2)) + " out of", "resume from checkpoint 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	interrupt(t, s, 2)
	defer os.Remove(filepath.Join(s.Dir(), chkDir(2), committingFile))
	wantFallback(t, s, logs, m1, want)
}

// Error messages say what to do and what follows: the remedy of a damaged
// checkpoint that may have been reported complete (resume from the one
// before it) warns that an exactly-once Kafka sink may then fail the job
// with a data-loss error for transactions of that older checkpoint that
// were in fact committed (their ids were reused), that an even older
// checkpoint fares no better, and names the way on: a fresh start from the
// older checkpoint's offsets as `splitflow checkpoints show` lists them.
func TestDamagedCheckpointRemedyWarnsOfDataLossReportOnOlderResume(t *testing.T) {
	s, _, _ := twoCheckpoints(t)
	if err := os.Remove(metadataPath(s, 2)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(metadataPath(s, 2), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.Latest()
	var de *DamagedCheckpointError
	if !errors.As(err, &de) || de.ID != 2 || de.Previous != 1 {
		t.Fatalf("Latest: %v; want a *DamagedCheckpointError for checkpoint 2 (previous 1)", err)
	}
	for _, want := range []string{
		"txn.DataLossError",
		"transactions of checkpoint 1 that were in fact committed",
		"an older checkpoint fares no better",
		"start afresh",
		"splitflow checkpoints show " + filepath.Join(s.Dir(), chkDir(1)),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

// interrupt leaves checkpoint id as a process leaves it that died after
// the metadata rename and before its commit returned.
func interrupt(t *testing.T, s *DirStorage, id int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir(), chkDir(id), committingFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func metadataPath(s *DirStorage, id int64) string {
	return filepath.Join(s.Dir(), chkDir(id), metadataFile)
}

// Atomic checkpoints: torn metadata is never accepted, whatever length the
// write reached.
func TestDirTornMetadataNeverAccepted(t *testing.T) {
	var logs logBuffer
	s, m1, _ := twoCheckpoints(t, logs.logger())
	path := metadataPath(s, 2)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(whole) {
		if err := os.WriteFile(path, whole[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		wantDamaged(t, s, &logs, m1, ErrCorrupt)
	}
}

// Atomic checkpoints: a single flipped bit anywhere in the metadata is
// caught.
func TestDirMetadataBitFlipDetected(t *testing.T) {
	var logs logBuffer
	s, m1, _ := twoCheckpoints(t, logs.logger())
	path := metadataPath(s, 2)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range whole {
		bad := slices.Clone(whole)
		bad[i] ^= 0x10
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		wantDamaged(t, s, &logs, m1, ErrCorrupt)
	}
}

// Atomic checkpoints: a data file that no longer matches its checksum (same
// length, one byte changed) or its length is caught.
func TestDirCorruptDataFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"byte flip", func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"extended", func(b []byte) []byte { return append(b, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			s, m1, m2 := twoCheckpoints(t, logs.logger())
			h := m2.States[len(m2.States)-1]
			if h.Size == 0 {
				t.Fatal("test needs a non-empty blob")
			}
			path := filepath.Join(s.Dir(), chkDir(2), h.File)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			wantDamaged(t, s, &logs, m1, ErrCorrupt)
		})
	}
}

func TestDirMissingDataFile(t *testing.T) {
	var logs logBuffer
	s, m1, m2 := twoCheckpoints(t, logs.logger())
	if err := os.Remove(filepath.Join(s.Dir(), chkDir(2), m2.States[0].File)); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, s, &logs, m1, ErrCorrupt)
}

// A checkpoint directory removed from under the storage is simply gone:
// Latest returns the previous one and Load says not found.
func TestDirMissingCheckpointDirectory(t *testing.T) {
	s, m1, _ := twoCheckpoints(t)
	if err := os.RemoveAll(filepath.Join(s.Dir(), chkDir(2))); err != nil {
		t.Fatal(err)
	}
	cp, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, m1, testBlobs(1))
	if _, err := s.Load(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load(2): %v, want ErrNotFound", err)
	}
}

// A crash after the data files and the temp metadata were written, before
// the rename, leaves a checkpoint that never completed: ignored, not an
// error, and cleaned up by the next commit.
func TestDirCrashBeforeMetadataRename(t *testing.T) {
	s, m1, _ := twoCheckpoints(t)
	dir2 := filepath.Join(s.Dir(), chkDir(2))
	if err := os.Rename(filepath.Join(dir2, metadataFile), filepath.Join(dir2, metadataTemp)); err != nil {
		t.Fatal(err)
	}
	cp, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, m1, testBlobs(1))
	if len(cp.Skipped) != 0 {
		t.Fatalf("incomplete checkpoint reported as invalid: %v", cp.Skipped)
	}
	if ids, _ := s.List(); !slices.Equal(ids, []int64{1}) {
		t.Fatalf("List = %v, want [1]", ids)
	}
	if _, err := s.Load(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load(2): %v, want ErrNotFound", err)
	}
	commit(t, s, 3, testBlobs(3))
	if _, err := os.Stat(dir2); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("incomplete chk-2 not cleaned up after checkpoint 3: %v", err)
	}
}

// A second attempt at an id that never completed starts clean.
func TestDirBeginReplacesIncompleteAttempt(t *testing.T) {
	s, err := NewDirStorage(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	w := mustBegin(t, s, 1)
	if _, err := w.WriteState(OperatorOwner("op", 0), []byte("old")); err != nil {
		t.Fatal(err)
	}
	// The process dies here: no Commit, no Abort. A new process:
	s2, err := NewDirStorage(s.Dir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	b := blobs{OperatorOwner("op", 0): []byte("new")}
	m := commit(t, s2, 1, b)
	cp, err := s2.Latest()
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, m, b)
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), chkDir(1)))
	if len(entries) != 2 {
		t.Fatalf("chk-1 holds %d files, want the new blob and _metadata", len(entries))
	}
}

// Metadata from a newer format is refused clearly, and Latest does not
// fall back past it to an older checkpoint.
func TestDirUnknownMetadataVersion(t *testing.T) {
	s, _, _ := twoCheckpoints(t)
	path := metadataPath(s, 2)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(b[4:8], metadataVersion+1)
	end := len(b) - crcLen
	binary.BigEndian.PutUint32(b[end:], checksum(b[:end]))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.Load(2)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), fmt.Sprintf("version %d", metadataVersion+1)) {
		t.Fatalf("Load(2): %v, want ErrUnsupportedVersion naming the version", err)
	}
	if _, err := s.Latest(); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Latest: %v, want ErrUnsupportedVersion", err)
	}
}

// Checkpoints exist but none can be used: that is not "start from
// scratch".
func TestDirNoValidCheckpoint(t *testing.T) {
	s, _, _ := twoCheckpoints(t)
	for _, id := range []int64{1, 2} {
		if err := os.WriteFile(metadataPath(s, id), []byte("SFCK"), 0o644); err != nil {
			t.Fatal(err)
		}
		interrupt(t, s, id)
	}
	_, err := s.Latest()
	var nv *NoValidCheckpointError
	if !errors.As(err, &nv) || len(nv.Skipped) != 2 || errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Latest: %v, want *NoValidCheckpointError with 2 corrupt checkpoints, not ErrNoCheckpoint", err)
	}
}

// Metadata can only point inside its own checkpoint directory.
func TestDirMetadataRejectsPathsOutside(t *testing.T) {
	m := Metadata{ID: 1, States: []StateHandle{{Owner: OperatorOwner("op", 0), File: "../chk-2/x.state"}}}
	b, err := encodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeMetadata(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode of a path outside the directory: %v, want ErrCorrupt", err)
	}
}

// Only the newest N are kept; files that are not checkpoints are left alone.
func TestDirRetentionRemovesDirectories(t *testing.T) {
	s, err := NewDirStorage(t.TempDir(), quiet, WithRetained(1))
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(s.Dir(), "chk-notanid")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		commit(t, s, id, testBlobs(id))
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"chk-3", "chk-notanid"}) {
		t.Fatalf("directory holds %v, want [chk-3 chk-notanid]", names)
	}
}

// Restoring from an older checkpoint must never duplicate silently: a
// checkpoint that cannot be read (here a read that fails with EISDIR, as
// EIO or EMFILE would) is an error naming the path and the cause, never a
// reason to fall back, not even for a checkpoint never reported complete.
func TestDirReadErrorIsNotPassedOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		file func(m2 Metadata) string
	}{
		{"state file", func(m2 Metadata) string { return m2.States[0].File }},
		{"metadata", func(Metadata) string { return metadataFile }},
	} {
		for _, interrupted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/interrupted=%v", tc.name, interrupted), func(t *testing.T) {
				s, _, m2 := twoCheckpoints(t)
				path := filepath.Join(s.Dir(), chkDir(2), tc.file(m2))
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
				if interrupted {
					interrupt(t, s, 2)
				}
				cp, err := s.Latest()
				if err == nil {
					t.Fatalf("Latest returned checkpoint %d (skipped %v) although checkpoint 2 could not be read", cp.ID, cp.Skipped)
				}
				var ue *UnreadableCheckpointError
				if !errors.As(err, &ue) || ue.ID != 2 || errors.Is(err, ErrCorrupt) {
					t.Fatalf("Latest: %v; want an *UnreadableCheckpointError for checkpoint 2, not ErrCorrupt", err)
				}
				for _, want := range []string{path, "is a directory", "cannot read checkpoint 2", "fix the cause"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("error %q does not say %q", err, want)
					}
				}
			})
		}
	}
}

// A checkpoint resumed from counts as reported from then on (resuming
// commits what it prepared): Latest clears the mark of its interrupted
// commit, so that damage found later stops the job instead of passing
// over it. A commit that returned leaves no mark.
func TestDirResumedCheckpointCountsAsReported(t *testing.T) {
	var logs logBuffer
	s, m1, m2 := twoCheckpoints(t, logs.logger())
	for _, id := range []int64{1, 2} {
		if _, err := os.Stat(filepath.Join(s.Dir(), chkDir(id), committingFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("checkpoint %d: a returned commit left its mark: %v", id, err)
		}
	}
	interrupt(t, s, 2)
	if never, err := s.CommitInterrupted(2); !never || err != nil {
		t.Fatalf("CommitInterrupted(2) = %v, %v; want true", never, err)
	}
	cp, err := s.LatestForInspection()
	if err != nil || cp.ID != 2 {
		t.Fatalf("LatestForInspection = %v, %v; want checkpoint 2", cp, err)
	}
	if never, _ := s.CommitInterrupted(2); !never {
		t.Fatal("LatestForInspection changed the directory")
	}
	cp, err = s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	checkContent(t, cp, m2, testBlobs(2))
	if never, err := s.CommitInterrupted(2); never || err != nil {
		t.Fatalf("after Latest handed out checkpoint 2: CommitInterrupted = %v, %v; want false", never, err)
	}
	damageState(t, s, 2)
	wantDamaged(t, s, &logs, m1, ErrCorrupt)
}

// State I/O on restore: each blob is read and verified once, when Latest
// verifies the checkpoint, however many subtasks then ask for it (a keyed
// operator's every new subtask reads every old subtask's blob); after
// DropVerified it is read again, verified.
func TestDirRestoreReadsEachBlobOnce(t *testing.T) {
	s, _, m2 := twoCheckpoints(t)
	var mu sync.Mutex
	reads := map[string]int{}
	readStateFile = func(name string) ([]byte, error) {
		mu.Lock()
		reads[filepath.Base(name)]++
		mu.Unlock()
		return os.ReadFile(name)
	}
	defer func() { readStateFile = os.ReadFile }()
	cp, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	const subtasks = 4
	var wg sync.WaitGroup
	for range subtasks {
		wg.Go(func() {
			for owner, data := range testBlobs(2) {
				got, ok, err := cp.State(owner)
				if !ok || err != nil || !bytes.Equal(got, data) {
					t.Errorf("State(%s) = %q, %v, %v", owner, got, ok, err)
				}
			}
		})
	}
	wg.Wait()
	for _, h := range m2.States {
		if n := reads[h.File]; n != 1 {
			t.Errorf("%s read %d times by Latest and %d restoring subtasks, want once", h.File, n, subtasks)
		}
	}
	cp.DropVerified()
	if _, _, err := cp.State(m2.States[0].Owner); err != nil {
		t.Fatal(err)
	}
	if n := reads[m2.States[0].File]; n != 2 {
		t.Errorf("after DropVerified, %s read %d times in all, want 2", m2.States[0].File, n)
	}
}
