package checkpoint

import (
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Rule: a checkpoint is untrusted input. CopyFile copies only the shared
// files the checkpoint's metadata lists, by a plain name: a handle read
// from a crafted state blob that names a file outside the storage's shared
// files ("../" in it), or one the checkpoint does not list, is refused as
// corrupt before anything is opened, and the refusal is the same whether
// or not such a file exists. Before, a DirStorage joined the name to its
// shared directory and copied whatever readable file it reached into the
// state directory, and its "does not exist" told a missing file from one
// that was there.
func TestCopyFileRefusesFilesTheCheckpointDoesNotList(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	s, err := NewDirStorage(root, quiet)
	if err != nil {
		t.Fatal(err)
	}
	runScript(t, s, "begin 3; put 000042.sst; write 3 000042.sst; commit 3")
	runScript(t, s, "begin 4; put 000043.sst; write 4 000043.sst; commit 4")
	cp, err := s.Load(3)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("a file outside the checkpoint storage")
	if err := os.WriteFile(filepath.Join(parent, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	crc := crc32.Checksum(secret, crc32.MakeTable(crc32.Castagnoli))
	cp4, err := s.Load(4)
	if err != nil {
		t.Fatal(err)
	}
	other := cp4.Files()[0]
	var msgs []string
	for _, h := range []FileHandle{
		{Name: "../../secret", Size: int64(len(secret)), CRC32C: crc},
		{Name: "../../absent", Size: int64(len(secret)), CRC32C: crc},
		{Name: filepath.Join(parent, "secret"), Size: int64(len(secret)), CRC32C: crc},
		other, // stored, but another checkpoint's
	} {
		dst := filepath.Join(t.TempDir(), "restored")
		err := cp.CopyFile(h, dst)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("CopyFile(%q): %v; want an error matching ErrCorrupt", h.Name, err)
		}
		if errors.Is(err, ErrMissingFile) {
			t.Fatalf("CopyFile(%q): %v; want no word on whether the file exists", h.Name, err)
		}
		if _, serr := os.Stat(dst); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("CopyFile(%q) wrote %s: %v", h.Name, dst, serr)
		}
		msgs = append(msgs, strings.ReplaceAll(err.Error(), h.Name, "NAME"))
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("the refusals of a file that exists and one that does not differ:\n%s\n%s", msgs[0], msgs[1])
	}
	if err := cp.CopyFile(cp.Files()[0], filepath.Join(t.TempDir(), "ok")); err != nil {
		t.Fatalf("CopyFile of the checkpoint's own file: %v", err)
	}
}
