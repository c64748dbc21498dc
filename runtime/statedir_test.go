package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Rule: the pebble backend's default working directory is the user's
// own: its name carries the user id, and a directory of that name that
// is a link, or another user's, is refused, naming it; one of the user's
// own open to others is closed to them. Before, every user's jobs shared
// /tmp/splitflow-state, which the first to start made 0755: another local
// user could make it first, or link it elsewhere, and read the job's
// state or plant files.
func TestDefaultStateDirIsTheUsersOwn(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	sc := defaultStateConfig()
	sc.backend = kindPebble
	dir := sc.workDir()
	if dir == filepath.Join(tmp, "splitflow-state") || filepath.Dir(dir) != tmp {
		t.Fatalf("default state directory %s; want one per user in %s", dir, tmp)
	}

	// A link planted under the name is refused.
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := newPebbleBackend(&sc); err == nil {
		_ = b.Close()
		t.Fatalf("a default state directory linked to %s was used", elsewhere)
	} else if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "state.Pebble") {
		t.Fatalf("refusal %q does not name %s and state.Pebble", err, dir)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}

	// Another user's directory is refused (only root can make one here).
	if os.Getuid() == 0 {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 4321, 4321); err != nil {
			t.Fatal(err)
		}
		if b, err := newPebbleBackend(&sc); err == nil {
			_ = b.Close()
			t.Fatal("a default state directory of user 4321 was used")
		} else if !strings.Contains(err.Error(), "4321") {
			t.Fatalf("refusal %q does not name the owner", err)
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}

	// The user's own, open to others, is closed and used.
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	b, err := newPebbleBackend(&sc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o700 {
		t.Fatalf("default state directory has mode %v; want 0700", perm)
	}
}
