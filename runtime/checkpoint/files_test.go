package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// localFile writes content to a new file under t.TempDir and returns its
// path: what a state backend hands PutFile.
func localFile(t *testing.T, content string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "local-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// fileContent is the content the tests give shared file name.
func fileContent(name string) string { return "sst " + name + strings.Repeat("x", len(name)*7) }

func putFile(t *testing.T, s Storage, name string) FileHandle {
	t.Helper()
	h, err := s.PutFile(name, localFile(t, fileContent(name)))
	if err != nil {
		t.Fatalf("PutFile(%s): %v", name, err)
	}
	return h
}

func filesWritten(s Storage) int64 {
	switch s := s.(type) {
	case *DirStorage:
		return s.filesWritten.Load()
	case *MemoryStorage:
		return s.filesWritten.Load()
	case *S3Storage:
		return s.filesWritten.Load()
	}
	panic("unknown storage")
}

func storedNames(t *testing.T, s Storage) []string {
	t.Helper()
	fs, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

// orphan leaves shared file name in s as a process that crashed after
// putting it leaves it: stored, but never put by s.
func orphan(t *testing.T, s Storage, name string) {
	t.Helper()
	switch s := s.(type) {
	case *DirStorage:
		dir := filepath.Join(s.Dir(), sharedDir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fileContent(name)), 0o644); err != nil {
			t.Fatal(err)
		}
	case *MemoryStorage:
		s.mem.mu.Lock()
		s.mem.objects[sharedPath(name)] = []byte(fileContent(name))
		s.mem.mu.Unlock()
	case *S3Storage:
		fakeOf(s).putObject(t, s.prefix+sharedPath(name), []byte(fileContent(name)))
	}
}

// removeShared deletes shared file name behind the storage's back; with
// truncate it leaves it one byte short instead.
func removeShared(t *testing.T, s Storage, name string, truncate bool) {
	t.Helper()
	switch s := s.(type) {
	case *DirStorage:
		p := filepath.Join(s.Dir(), sharedDir, name)
		var err error
		if truncate {
			var st os.FileInfo
			if st, err = os.Stat(p); err == nil {
				err = os.Truncate(p, st.Size()-1)
			}
		} else {
			err = os.Remove(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	case *MemoryStorage:
		s.mem.mu.Lock()
		defer s.mem.mu.Unlock()
		key := sharedPath(name)
		if truncate {
			s.mem.objects[key] = s.mem.objects[key][:len(s.mem.objects[key])-1]
		} else {
			delete(s.mem.objects, key)
		}
	case *S3Storage:
		f, key := fakeOf(s), s.prefix+sharedPath(name)
		if truncate {
			b := f.object(t, key)
			f.putObject(t, key, b[:len(b)-1])
		} else {
			f.deleteObject(t, key)
		}
	}
}

// sharedLocation is where a message about shared file name of s must
// point: a DirStorage's full path.
func sharedLocation(s Storage, name string) string {
	if d, ok := s.(*DirStorage); ok {
		return filepath.Join(d.Dir(), sharedDir, name)
	}
	if s3, ok := s.(*S3Storage); ok {
		return s3.url(s3.prefix + sharedPath(name))
	}
	return name
}

// runScript drives s through a script of steps, one per line or ';':
//
//	begin N            Begin(N)
//	put a b            PutFile each, from a fresh local file
//	orphan a           a stored file this instance never put (a crashed process's)
//	write N a b        WriteState of owner op/N into checkpoint N, using the files put
//	commit N | abort N
//	delete a           DeleteFile
//	want a b           the stored shared files are exactly these
//	load N             Load(N) verifies, and every file of it copies back whole
func runScript(t *testing.T, s Storage, script string) {
	t.Helper()
	newScript(t, s).run(script)
}

// scriptRun keeps a script's writers and handles, so that a test can run
// one in steps with its own in between.
type scriptRun struct {
	t       *testing.T
	s       Storage
	writers map[int64]Writer
	handles map[string]FileHandle
	states  map[int64][]StateHandle
}

func newScript(t *testing.T, s Storage) *scriptRun {
	return &scriptRun{t: t, s: s, writers: map[int64]Writer{}, handles: map[string]FileHandle{}, states: map[int64][]StateHandle{}}
}

func (r *scriptRun) run(script string) {
	t, s, writers, handles, states := r.t, r.s, r.writers, r.handles, r.states
	t.Helper()
	id := func(f []string) int64 {
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("script: %q: %v", strings.Join(f, " "), err)
		}
		return n
	}
	for _, line := range strings.FieldsFunc(script, func(r rune) bool { return r == '\n' || r == ';' }) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "begin":
			w, err := s.Begin(id(f))
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			writers[id(f)] = w
		case "put":
			for _, name := range f[1:] {
				handles[name] = putFile(t, s, name)
			}
		case "orphan":
			for _, name := range f[1:] {
				orphan(t, s, name)
			}
		case "write":
			n := id(f)
			var fs []FileHandle
			for _, name := range f[2:] {
				fs = append(fs, handles[name])
			}
			h, err := writers[n].WriteState(OperatorOwner("op", len(states[n])), fmt.Appendf(nil, "state of %d", n), fs...)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			states[n] = append(states[n], h)
		case "commit":
			n := id(f)
			if err := writers[n].Commit(Metadata{ID: n, Timestamp: testTime, Fingerprint: "graph-v1", States: states[n]}); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case "abort":
			if err := writers[id(f)].Abort(); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case "delete":
			for _, name := range f[1:] {
				if err := s.DeleteFile(name); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
			}
		case "want":
			if got := storedNames(t, s); !slices.Equal(got, f[1:]) {
				t.Fatalf("after the steps before %q the storage holds shared files %v, want %v", line, got, f[1:])
			}
		case "load":
			cp, err := s.Load(id(f))
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			for _, h := range cp.Files() {
				dst := filepath.Join(t.TempDir(), h.Name)
				if err := cp.CopyFile(h, dst); err != nil {
					t.Fatalf("%s: CopyFile(%s): %v", line, h.Name, err)
				}
				if b, err := os.ReadFile(dst); err != nil || string(b) != fileContent(h.Name) {
					t.Fatalf("%s: copy of %s holds %q, %v", line, h.Name, b, err)
				}
			}
		default:
			t.Fatalf("script: unknown step %q", line)
		}
	}
}

// The collection rule of shared files (Storage): Commit(N) deletes, after
// retention, what no retained checkpoint uses, and never what one does;
// files put after Begin(N) (or after the Begin of a checkpoint still being
// written) may belong to a newer checkpoint and are kept.
func TestSharedFileCollection(t *testing.T) {
	cases := []struct {
		name     string
		retained int
		script   string
	}{
		{"GC never deletes a file a retained checkpoint references", 2, `
			begin 1; put a b; write 1 a b; commit 1; want a b
			begin 2; put c; write 2 b c; commit 2; want a b c
			begin 3; put d; write 3 c d; write 3 b; commit 3; want b c d
			load 2; load 3
			begin 4; write 4 d; commit 4; want b c d
			load 3; load 4`},
		{"GC deletes files no retained checkpoint references", 1, `
			begin 1; put a b; write 1 a; commit 1; want a b
			begin 2; write 2 a; commit 2; want a
			begin 3; put c; write 3 c; commit 3; want c
			load 3`},
		{"GC deletes orphans of a crashed process", 3, `
			orphan z y
			begin 1; put a; write 1 a; commit 1; want a
			load 1`},
		{"GC keeps orphans a checkpoint references", 3, `
			orphan a
			begin 1; put a; write 1 a; commit 1; want a
			load 1`},
		{"GC spares files put after Begin(N) for an in-flight N+1", 1, `
			begin 1; put a; write 1 a
			begin 2; put b
			commit 1; want a b
			write 2 a b; commit 2; want a b
			load 2`},
		{"GC spares files put after the Begin of an older checkpoint still being written", 1, `
			begin 1; put a
			begin 2; put b; write 2 b; commit 2; want a b
			write 1 a; abort 1
			begin 3; write 3 b; commit 3; want b`},
		{"a file put again after Begin(N) is spared like a new one", 1, `
			begin 1; put a; write 1 a; commit 1
			begin 2; put b; write 2 b; begin 3; put a; commit 2; want a b
			write 3 a b; commit 3; want a b
			load 3`},
		{"an aborted checkpoint collects nothing", 1, `
			begin 1; put a; write 1 a; commit 1
			begin 2; put b; write 2 b; abort 2; want a b
			begin 3; write 3 a; commit 3; want a`},
		{"DeleteFile removes a file; a missing one is no error", 1, `
			put a b; delete a; want b; delete a; want b`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
				runScript(t, open(WithRetained(c.retained)), c.script)
			})
		})
	}
}

// Leftover temporary files of puts that never finished are garbage; a
// put under way keeps its own, and files that are not shared files are
// left alone.
func TestDirSharedTempFilesCollected(t *testing.T) {
	s, err := NewDirStorage(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(s.Dir(), sharedDir)
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".a.tmp-123", ".b.tmp-456", "_README", "not a shared file"} {
		if err := os.WriteFile(filepath.Join(shared, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.files.claim("b") // a put of b under way
	runScript(t, s, "begin 1; put c; write 1 c; commit 1; want c")
	s.files.release("b", unchanged)
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{".b.tmp-456", "_README", "c", "not a shared file"}; !slices.Equal(got, want) {
		t.Fatalf("shared/ holds %q after the commit, want %q", got, want)
	}
}

// Put once: a second PutFile of a stored name writes nothing and returns
// the same handle; one of another size is refused, since names are unique
// and the stored file may be in use.
func TestSharedFilePutOnce(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		content := fileContent("000007.sst")
		h1, err := s.PutFile("000007.sst", localFile(t, content))
		if err != nil {
			t.Fatal(err)
		}
		if want := (FileHandle{Name: "000007.sst", Size: int64(len(content)), CRC32C: checksum([]byte(content))}); h1 != want {
			t.Fatalf("PutFile returned %+v, want %+v", h1, want)
		}
		var before os.FileInfo
		if d, ok := s.(*DirStorage); ok {
			if before, err = os.Stat(filepath.Join(d.Dir(), sharedDir, h1.Name)); err != nil {
				t.Fatal(err)
			}
		}
		writes := filesWritten(s)
		h2, err := s.PutFile("000007.sst", localFile(t, content))
		if err != nil || h2 != h1 {
			t.Fatalf("second PutFile: %+v, %v; want %+v", h2, err, h1)
		}
		if n := filesWritten(s) - writes; n != 0 {
			t.Fatalf("the second PutFile of a stored file wrote it %d more time(s)", n)
		}
		if before != nil {
			after, err := os.Stat(filepath.Join(s.(*DirStorage).Dir(), sharedDir, h1.Name))
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
				t.Fatalf("the stored file was replaced by the second PutFile")
			}
		}
		_, err = s.PutFile("000007.sst", localFile(t, content+"more"))
		if err == nil || !strings.Contains(err.Error(), "000007.sst") || !strings.Contains(err.Error(), "already stored") {
			t.Fatalf("PutFile of another size under a stored name: %v, want an error naming the file", err)
		}
		if got := storedNames(t, s); !slices.Equal(got, []string{"000007.sst"}) {
			t.Fatalf("stored %v", got)
		}
	})
}

// PutFile is safe for concurrent use, with itself and with checkpoints
// being written and committed: puts of one name store it once.
func TestSharedFileConcurrentPuts(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open(WithRetained(1))
		names := []string{"a", "b", "c", "d"}
		paths := map[string]string{}
		for _, n := range names {
			paths[n] = localFile(t, fileContent(n))
		}
		for id := int64(1); id <= 3; id++ {
			w := mustBegin(t, s, id)
			var wg sync.WaitGroup
			hs := make([]FileHandle, 4*len(names))
			errs := make([]error, len(hs))
			for i := range hs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					hs[i], errs[i] = s.PutFile(names[i%len(names)], paths[names[i%len(names)]])
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			h, err := w.WriteState(OperatorOwner("op", 0), nil, hs[:len(names)]...)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(Metadata{ID: id, States: []StateHandle{h}}); err != nil {
				t.Fatal(err)
			}
		}
		if n := filesWritten(s); n != int64(len(names)) {
			t.Fatalf("%d files written for %d names", n, len(names))
		}
		runScript(t, s, "load 3")
	})
}

// What a checkpoint's states use comes back: each handle's files sorted,
// Checkpoint.Files their union, every file copied back whole, also after
// the directory is opened again.
func TestSharedFileRoundTrip(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		a, b, c := putFile(t, s, "a.sst"), putFile(t, s, "b.sst"), putFile(t, s, "c.sst")
		w := mustBegin(t, s, 1)
		h1, err := w.WriteState(OperatorOwner("kv", 0), []byte("manifest 0"), c, a)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(h1.Files, []FileHandle{a, c}) {
			t.Fatalf("handle lists %v, want them sorted: %v", h1.Files, []FileHandle{a, c})
		}
		h2, err := w.WriteState(OperatorOwner("kv", 1), []byte("manifest 1"), b, c)
		if err != nil {
			t.Fatal(err)
		}
		h3, err := w.WriteState(CoordinatorOwner("kv"), []byte("no files"))
		if err != nil {
			t.Fatal(err)
		}
		if h3.Files != nil {
			t.Fatalf("a state without files has Files %v", h3.Files)
		}
		m := Metadata{ID: 1, Timestamp: testTime, Fingerprint: "graph-v1", States: []StateHandle{h2, h1, h3}}
		if err := w.Commit(m); err != nil {
			t.Fatal(err)
		}
		h1.Files[0] = FileHandle{Name: "changed"} // the caller's copy
		check := func(s Storage) {
			cp, err := s.Latest()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cp.Files(), []FileHandle{a, b, c}) {
				t.Fatalf("Files() = %v, want %v", cp.Files(), []FileHandle{a, b, c})
			}
			for _, st := range cp.States {
				if st.Owner == OperatorOwner("kv", 0) && !slices.Equal(st.Files, []FileHandle{a, c}) {
					t.Fatalf("state of kv/0 uses %v, want %v", st.Files, []FileHandle{a, c})
				}
			}
			runScript(t, s, "load 1")
		}
		check(s)
		if d, ok := s.(*DirStorage); ok {
			again, err := NewDirStorage(d.Dir(), quiet)
			if err != nil {
				t.Fatal(err)
			}
			check(again)
		}
	})
}

// A checkpoint whose shared file is missing, or shorter than recorded, is
// damaged as one missing a blob is: Latest never falls back past it (it
// may have been reported complete) and never answers ErrNoCheckpoint; its
// error names the file where it was looked for and the checkpoint.
func TestSharedFileMissingMakesCheckpointDamaged(t *testing.T) {
	for _, c := range []struct {
		name     string
		truncate bool
		want     error
	}{
		{"missing", false, ErrMissingFile},
		{"short", true, ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
				s := open()
				runScript(t, s, "begin 1; put a; write 1 a; commit 1; begin 2; put b; write 2 a b; commit 2")
				removeShared(t, s, "b", c.truncate)
				_, err := s.Load(2)
				if !errors.Is(err, c.want) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Load(2): %v, want %v", err, c.want)
				}
				cp, err := s.Latest()
				if err == nil {
					t.Fatalf("Latest returned checkpoint %d, passing over checkpoint 2 whose shared file is %s", cp.ID, c.name)
				}
				var de *DamagedCheckpointError
				if !errors.As(err, &de) || de.ID != 2 || !errors.Is(err, c.want) || errors.Is(err, ErrNoCheckpoint) {
					t.Fatalf("Latest: %v; want a *DamagedCheckpointError for checkpoint 2 matching %v", err, c.want)
				}
				for _, want := range []string{sharedLocation(s, "b"), "checkpoint 2"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("Latest: %q does not say %q", err, want)
					}
				}
				if d, ok := s.(*DirStorage); ok {
					// The rule of Latest holds as for blobs: only a
					// checkpoint whose commit never returned is passed over.
					interrupt(t, d, 2)
					cp, err := s.Latest()
					if err != nil || cp.ID != 1 || len(cp.Skipped) != 1 || !errors.Is(cp.Skipped[0], c.want) {
						t.Fatalf("Latest with checkpoint 2's commit interrupted: %v, %v; want checkpoint 1, 2 skipped", cp, err)
					}
				}
			})
		})
	}
}

// CopyFile verifies while it copies: a flipped byte or a missing file is
// an error matching ErrCorrupt (ErrMissingFile for the missing one) naming
// the file, the missing one where it was looked for and the checkpoint,
// and leaves no file at dst.
func TestCopyFileDetectsDamage(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, s Storage, name string)
		want   error
	}{
		{"flipped byte", flipShared, ErrCorrupt},
		{"missing", func(t *testing.T, s Storage, name string) { removeShared(t, s, name, false) }, ErrMissingFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
				s := open()
				runScript(t, s, "begin 3; put 000042.sst; write 3 000042.sst; commit 3")
				cp, err := s.Latest()
				if err != nil {
					t.Fatal(err)
				}
				c.damage(t, s, "000042.sst")
				dst := filepath.Join(t.TempDir(), "restored.sst")
				err = cp.CopyFile(cp.Files()[0], dst)
				if !errors.Is(err, c.want) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("CopyFile: %v, want %v", err, c.want)
				}
				for _, want := range []string{"000042.sst", "checkpoint 3"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("CopyFile: %q does not say %q", err, want)
					}
				}
				if c.want == ErrMissingFile && !strings.Contains(err.Error(), sharedLocation(s, "000042.sst")) {
					t.Fatalf("CopyFile: %q does not say where the file was looked for, %s", err, sharedLocation(s, "000042.sst"))
				}
				if _, serr := os.Stat(dst); !errors.Is(serr, os.ErrNotExist) {
					t.Fatalf("a failed CopyFile left %s behind: %v", dst, serr)
				}
			})
		})
	}
}

func flipShared(t *testing.T, s Storage, name string) {
	t.Helper()
	switch s := s.(type) {
	case *DirStorage:
		p := filepath.Join(s.Dir(), sharedDir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	case *MemoryStorage:
		s.mem.mu.Lock()
		b := slices.Clone(s.mem.objects[sharedPath(name)])
		b[len(b)/2] ^= 0x01
		s.mem.objects[sharedPath(name)] = b
		s.mem.mu.Unlock()
	case *S3Storage:
		f, key := fakeOf(s), s.prefix+sharedPath(name)
		b := f.object(t, key)
		b[len(b)/2] ^= 0x01
		f.putObject(t, key, b)
	}
}

// WriteState refuses a shared file that is not in the storage, or not
// with the handle's size, naming it; the owner may write again after.
func TestWriteStateRefusesFileNotInStorage(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		a := putFile(t, s, "a.sst")
		w := mustBegin(t, s, 1)
		for _, c := range []struct {
			name  string
			files []FileHandle
			says  []string
		}{
			{"not stored", []FileHandle{a, {Name: "ghost.sst", Size: 3}}, []string{"ghost.sst", "not stored", sharedLocation(s, "ghost.sst")}},
			{"other size", []FileHandle{{Name: a.Name, Size: a.Size + 1, CRC32C: a.CRC32C}}, []string{"a.sst", "bytes"}},
			{"listed twice", []FileHandle{a, a}, []string{"a.sst", "twice"}},
			{"bad name", []FileHandle{{Name: "../chk-1/_metadata"}}, []string{"../chk-1/_metadata"}},
		} {
			_, err := w.WriteState(OperatorOwner("kv", 0), []byte("x"), c.files...)
			if err == nil {
				t.Fatalf("%s: WriteState accepted %v", c.name, c.files)
			}
			for _, want := range c.says {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: WriteState: %q does not say %q", c.name, err, want)
				}
			}
		}
		h, err := w.WriteState(OperatorOwner("kv", 0), []byte("x"), a)
		if err != nil {
			t.Fatalf("WriteState after refused ones: %v", err)
		}
		if err := w.Commit(Metadata{ID: 1, States: []StateHandle{h}}); err != nil {
			t.Fatal(err)
		}
	})
}

// A put that cannot be made is an error naming the path at fault: the
// local file, or where the storage could not write.
func TestPutFileFailureNamesPath(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open()
		missing := filepath.Join(t.TempDir(), "gone.sst")
		if _, err := s.PutFile("gone.sst", missing); err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("PutFile of a missing local file: %v, want an error naming %s", err, missing)
		}
		if _, err := s.PutFile(".hidden", localFile(t, "x")); err == nil {
			t.Fatal("PutFile accepted a name starting with '.'")
		}
		d, ok := s.(*DirStorage)
		if !ok {
			return
		}
		// shared/ that cannot be written into: a file in its place stops
		// writes for root too, which a mode of 0500 does not.
		shared := filepath.Join(d.Dir(), sharedDir)
		if err := os.WriteFile(shared, []byte("in the way"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.PutFile("a.sst", localFile(t, "x"))
		if err == nil || !strings.Contains(err.Error(), shared) {
			t.Fatalf("PutFile into a storage that cannot write it: %v, want an error naming %s", err, shared)
		}
		if _, err := s.Files(); err == nil {
			t.Fatal("Files() of a storage whose shared/ is a file: no error")
		}
		if err := os.Remove(shared); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(shared, "b.sst"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutFile("b.sst", localFile(t, "x")); err == nil || !strings.Contains(err.Error(), filepath.Join(shared, "b.sst")) {
			t.Fatalf("PutFile of a name a directory is in the way of: %v, want an error naming it", err)
		}
	})
}

// v1Metadata is checkpoint 4's metadata as the first format version wrote
// it, before shared files: two states, of source's coordinator ("enum4")
// and of source/0 ("reader0").
const v1Metadata = "5346434b000000010000011c7b226964223a342c2274696d657374616d705f756e69785f6d696c6c69223a313736343539303430303030302c2266696e6765727072696e74223a2267726170682d7631222c22737461746573223a5b7b22756964223a22736f75726365222c227375627461736b223a2d312c22636f6f7264696e61746f72223a747275652c2266696c65223a22303030312d736f757263652d636f6f7264696e61746f722e7374617465222c2273697a65223a352c22637263333263223a3633303736343436347d2c7b22756964223a22736f75726365222c227375627461736b223a302c2266696c65223a22303030322d736f757263652d302e7374617465222c2273697a65223a372c22637263333263223a333233323932313133357d5d7d7a7e07cb"

// Metadata of an older format version still loads, with no shared files;
// a checkpoint that uses none is still written in version 1, so a build
// from before shared files can restore it; one that uses some is version
// 2.
func TestOldMetadataVersionLoads(t *testing.T) {
	s, err := NewDirStorage(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir(), chkDir(4))
	b, err := hex.DecodeString(v1Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{metadataFile: string(b), "0001-source-coordinator.state": "enum4", "0002-source-0.state": "reader0"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := s.Latest()
	if err != nil {
		t.Fatalf("Latest of version 1 metadata: %v", err)
	}
	if cp.ID != 4 || cp.Fingerprint != "graph-v1" || !cp.Timestamp.Equal(time.UnixMilli(1764590400000)) || len(cp.States) != 2 || cp.Files() != nil {
		t.Fatalf("loaded %+v", cp.Metadata)
	}
	if data, ok, err := cp.State(OperatorOwner("source", 0)); err != nil || !ok || string(data) != "reader0" {
		t.Fatalf("State(source/0) = %q, %v, %v", data, ok, err)
	}
	version := func(id int64) uint32 {
		b, err := os.ReadFile(metadataPath(s, id))
		if err != nil {
			t.Fatal(err)
		}
		return binary.BigEndian.Uint32(b[4:8])
	}
	runScript(t, s, "begin 5; write 5; commit 5; begin 6; put a; write 6 a; commit 6")
	if v := version(5); v != 1 {
		t.Errorf("a checkpoint without shared files is written in version %d, want 1", v)
	}
	if v := version(6); v != 2 {
		t.Errorf("a checkpoint with shared files is written in version %d, want 2", v)
	}
}

// Metadata whose shared files could not have been written by a Writer is
// corrupt: a name that is not a shared file's (a path out of shared/),
// files out of order or twice, one name with two handles.
func TestMetadataSharedFilesValidated(t *testing.T) {
	a := FileHandle{Name: "a.sst", Size: 3, CRC32C: 7}
	b := FileHandle{Name: "b.sst", Size: 4, CRC32C: 8}
	for _, c := range []struct {
		name   string
		states []StateHandle
	}{
		{"path out of shared/", []StateHandle{{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{{Name: "../chk-1/_metadata"}}}}},
		{"hidden name", []StateHandle{{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{{Name: ".a.sst.tmp-1"}}}}},
		{"not sorted", []StateHandle{{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{b, a}}}},
		{"twice", []StateHandle{{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{a, a}}}},
		{"negative size", []StateHandle{{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{{Name: "a.sst", Size: -1}}}}},
		{"two handles for one name", []StateHandle{
			{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{a}},
			{Owner: OperatorOwner("op", 1), File: "y.state", Files: []FileHandle{{Name: "a.sst", Size: 3, CRC32C: 9}}},
		}},
	} {
		enc, err := encodeMetadata(Metadata{ID: 1, States: c.states})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeMetadata(enc); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode: %v, want ErrCorrupt", c.name, err)
		}
	}
	ok := []StateHandle{
		{Owner: OperatorOwner("op", 0), File: "x.state", Files: []FileHandle{a, b}},
		{Owner: OperatorOwner("op", 1), File: "y.state", Files: []FileHandle{a}},
	}
	enc, err := encodeMetadata(Metadata{ID: 1, States: ok})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMetadata(enc)
	if err != nil || !slices.EqualFunc(m.States, ok, StateHandle.equal) || !slices.Equal(m.Files(), []FileHandle{a, b}) {
		t.Fatalf("decode: %+v, %v", m, err)
	}
	if !bytes.Contains(enc, []byte(`"files":[`)) {
		t.Fatalf("encoded without files: %s", enc)
	}
}

// BenchmarkDirPutFile puts a 64 MiB file (an SST of a large state) and
// copies it back, verified: the cost of a shared file's first checkpoint
// and of its restore.
func BenchmarkDirPutFile(b *testing.B) {
	const size = 64 << 20
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	local := filepath.Join(b.TempDir(), "local.sst")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := NewDirStorage(b.TempDir(), quiet)
	if err != nil {
		b.Fatal(err)
	}
	n := 0 // a new name every time, across the runs of b.N
	b.Run("put", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			n++
			if _, err := s.PutFile(fmt.Sprintf("%06d.sst", n), local); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put-again", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			if _, err := s.PutFile("000001.sst", local); err != nil {
				b.Fatal(err)
			}
		}
	})
	w, err := s.Begin(1)
	if err != nil {
		b.Fatal(err)
	}
	h, err := s.PutFile("000000.sst", local)
	if err != nil {
		b.Fatal(err)
	}
	st, err := w.WriteState(OperatorOwner("kv", 0), nil, h)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Commit(Metadata{ID: 1, States: []StateHandle{st}}); err != nil {
		b.Fatal(err)
	}
	cp, err := s.Load(1)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("copy", func(b *testing.B) {
		dst := filepath.Join(b.TempDir(), "restored.sst")
		b.SetBytes(size)
		for range b.N {
			if err := cp.CopyFile(h, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A put racing the collection of the same file leaves it stored: either
// the put comes first and counts as after Begin(N), or the collection
// deletes it first and the put, waiting for it, writes it again.
func TestSharedFilePutRacingCollectionLeavesItStored(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open(WithRetained(1))
		path := localFile(t, fileContent("f"))
		for id := int64(1); id <= 40; id++ {
			if _, err := s.PutFile("f", path); err != nil {
				t.Fatal(err)
			}
			w := mustBegin(t, s, id)
			h, err := w.WriteState(OperatorOwner("op", 0), nil)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var putErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, putErr = s.PutFile("f", path)
			}()
			if err := w.Commit(Metadata{ID: id, States: []StateHandle{h}}); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if putErr != nil {
				t.Fatal(putErr)
			}
			if got := storedNames(t, s); !slices.Equal(got, []string{"f"}) {
				t.Fatalf("round %d: after a put of f that returned, the storage holds %v", id, got)
			}
		}
	})
}

// bookOf is the shared-file bookkeeping of s.
func bookOf(s Storage) *fileBook {
	switch s := s.(type) {
	case *DirStorage:
		return s.files
	case *MemoryStorage:
		return s.files
	case *S3Storage:
		return s.files
	}
	panic("unknown storage")
}

// The collection never deletes a file whose put is under way (the put may
// have found it stored and be about to return its handle), and a put of
// a file being deleted waits for the deletion, then stores it again.
func TestSharedFileCollectionSparesPutsUnderWay(t *testing.T) {
	storages(t, func(t *testing.T, open func(...StorageOption) Storage) {
		s := open(WithRetained(1))
		sc := newScript(t, s)
		sc.run("put f g; begin 1; write 1")
		book := bookOf(s)
		book.claim("f") // a put of f under way, begun before Begin(1)
		sc.run("commit 1; want f")
		book.release("f", unchanged)

		sc.run("begin 2; write 2")
		if !book.tryClaim("f", ^uint64(0)) { // a deletion of f under way
			t.Fatal("f is busy")
		}
		writes := filesWritten(s)
		local := localFile(t, fileContent("f"))
		done := make(chan error, 1)
		go func() {
			_, err := s.PutFile("f", local)
			done <- err
		}()
		if err := s.DeleteFile("g"); err != nil { // other names do not wait
			t.Fatal(err)
		}
		removeShared(t, s, "f", false)
		book.release("f", gone)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := filesWritten(s) - writes; n != 1 {
			t.Fatalf("the put of f racing its deletion wrote it %d times, want once (after the deletion)", n)
		}
		sc.run("want f; write 2 f; commit 2; want f; load 2")
	})
}
