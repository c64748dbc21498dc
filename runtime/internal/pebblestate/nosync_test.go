package pebblestate

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The working DB is scratch (see noSyncFS): no file of it or of a
// snapshot's directory is synced, so a checkpoint never waits for the
// disk before its files are uploaded. Every sync of the file system under
// the store fails here; the store opens, spills, snapshots and restores
// from the snapshot all the same, and no sync reached the file system.
func TestScratchDBAndItsSnapshotsNeverSync(t *testing.T) {
	var syncs atomic.Int64
	inject := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			syncs.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	})
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "db"), BufferEntries: 64, FS: errorfs.Wrap(vfs.Default, inject)})
	if err != nil {
		t.Fatalf("open with failing syncs: %v", err)
	}
	defer s.Close()
	m := &model{flat: map[string]string{}}
	for i := range 1000 {
		k, v := fmt.Sprintf("\x00\x01k%04d", i), fmt.Sprintf("v%d", i)
		if err := s.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		m.flat[k] = v
	}
	snap, err := s.Freeze(filepath.Join(t.TempDir(), "chk"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := snap.Materialize()
	if err != nil {
		t.Fatalf("snapshot with failing syncs: %v", err)
	}
	restored := layTest(t, files)
	check(t, restored, m, 0)
	if err := s.Thaw(snap); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load(); n != 0 {
		t.Fatalf("the scratch DB synced %d times", n)
	}
}
