package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// sharedCheckpoints writes three checkpoints whose states share files, as
// an incremental state backend does: chk-1 uses a and b; chk-2 b (kv/0)
// and b, c (kv/1); chk-3 c and d. Each file is size bytes long, each blob
// 5.
func sharedCheckpoints(t *testing.T) (dir string, size int64) {
	t.Helper()
	dir = t.TempDir()
	st, err := checkpoint.NewDirStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	put := func(name string) checkpoint.FileHandle {
		p := filepath.Join(local, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte(name[:1]), 100), 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := st.PutFile(name, p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	plan := []struct {
		id   int64
		uses [][]string
	}{
		{1, [][]string{{"a.sst", "b.sst"}}},
		{2, [][]string{{"b.sst"}, {"b.sst", "c.sst"}}},
		{3, [][]string{{"c.sst", "d.sst"}}},
	}
	for _, p := range plan {
		w, err := st.Begin(p.id)
		if err != nil {
			t.Fatal(err)
		}
		var hs []checkpoint.StateHandle
		for sub, names := range p.uses {
			var fs []checkpoint.FileHandle
			for _, n := range names {
				fs = append(fs, put(n))
			}
			h, err := w.WriteState(checkpoint.OperatorOwner("kv", sub), []byte("blob!"), fs...)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		if err := w.Commit(checkpoint.Metadata{ID: p.id, Timestamp: time.Now(), Fingerprint: "kv-job", States: hs}); err != nil {
			t.Fatal(err)
		}
	}
	return dir, 100
}

// checkpoints show lists each owner's shared files and the other retained
// checkpoints that use each; ls counts them in each checkpoint's size,
// and what is new in it.
func TestCheckpointsShowSharedFiles(t *testing.T) {
	dir, size := sharedCheckpoints(t)
	text := show(t, filepath.Join(dir, "chk-2"))
	t.Logf("show chk-2:\n%s", text)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^states     2$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^shared files: 2, %d bytes; 0 bytes of them in no other retained checkpoint$`, 2*size)),
		regexp.MustCompile(`(?m)^OWNER +SHARED FILE +BYTES +CRC32C +ALSO IN$`),
		regexp.MustCompile(`(?m)^kv/0 +b\.sst +100 +[0-9a-f]{8} +chk-1$`),
		regexp.MustCompile(`(?m)^kv/1 +b\.sst +100 +[0-9a-f]{8} +chk-1$`),
		regexp.MustCompile(`(?m)^kv/1 +c\.sst +100 +[0-9a-f]{8} +chk-3$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("show output lacks %s", want)
		}
	}
	if t.Failed() {
		t.Fatalf("show output:\n%s", text)
	}
	text = show(t, filepath.Join(dir, "chk-3"))
	if !regexp.MustCompile(`(?m)^kv/0 +d\.sst +100 +[0-9a-f]{8} +none$`).MatchString(text) || !strings.Contains(text, "100 bytes of them in no other retained checkpoint") {
		t.Fatalf("show of chk-3 does not say d.sst is in no other checkpoint:\n%s", text)
	}

	var r showReport
	if err := json.Unmarshal([]byte(show(t, filepath.Join(dir, "chk-2"), "--json")), &r); err != nil {
		t.Fatal(err)
	}
	if r.SharedFiles != 2 || r.SharedBytes != 2*size || len(r.Files) != 2 || len(r.Files[1].SharedFiles) != 2 ||
		r.Files[1].SharedFiles[1].Name != "c.sst" || !slices.Equal(r.Files[1].SharedFiles[1].AlsoIn, []int64{3}) {
		t.Fatalf("json report: %+v", r)
	}

	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("ls:\n%s", out.String())
	// Blobs of 5 bytes; chk-2 holds two, uses b and c, of which c is new.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^CHECKPOINT +TAKEN +STATES +FILES +BYTES +NEW +STATUS$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^chk-1 +\S+ +1 +2 +%d +%d +ok$`, 5+2*size, 5+2*size)),
		regexp.MustCompile(fmt.Sprintf(`(?m)^chk-2 +\S+ +2 +2 +%d +%d +ok$`, 10+2*size, 10+size)),
		regexp.MustCompile(fmt.Sprintf(`(?m)^chk-3 +\S+ +1 +2 +%d +%d +ok, latest`, 5+2*size, 5+size)),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("ls output lacks %s", want)
		}
	}
}

// A checkpoint whose shared file is gone is damaged: ls says a restart
// fails there, naming the file's path, and does not resume from an older
// one.
func TestCheckpointsLsMissingSharedFile(t *testing.T) {
	dir, _ := sharedCheckpoints(t)
	missing := filepath.Join(dir, "shared", "d.sst")
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"checkpoints", "ls", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DAMAGED: a restart fails here", "a restart fails: checkpoint storage " + dir + ": checkpoint 3 is damaged", missing} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("ls output does not say %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "a restart resumes here") {
		t.Fatalf("ls says a restart resumes from an older checkpoint:\n%s", out.String())
	}
}
