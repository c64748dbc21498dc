package pebblestate

import "github.com/cockroachdb/pebble/v2/vfs"

// noSyncFS is the file system of the working DB and of its snapshots'
// directories: every write reaches the OS's page cache, and no sync
// waits for the disk.
//
// Nothing relies on these files surviving a crash of the process or the
// machine. The DB is scratch, laid anew from a checkpoint after any
// failure (Open refuses a directory that exists; OpenRestored opens what
// Lay wrote), and a snapshot's files become part of a checkpoint only
// once the checkpoint storage has copied them and made its copies
// durable. A sync here would only make a checkpoint wait for the disk:
// a Pebble flush syncs the new SST, the MANIFEST and the directory, and a
// Pebble checkpoint syncs every file it copies and both directories, one
// after the other, in the time between a barrier and the checkpoint's
// completion that every record emitted at the barrier waits for.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.Create(name, c))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.ReuseForWrite(oldname, newname, c))
}

// Unwrap is the file system underneath, for Pebble's vfs.Root.
func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func noSyncFile(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSync{f}, nil
}

// noSync is a file of noSyncFS.
type noSync struct{ vfs.File }

func (noSync) Sync() error                { return nil }
func (noSync) SyncData() error            { return nil }
func (noSync) SyncTo(int64) (bool, error) { return true, nil }
