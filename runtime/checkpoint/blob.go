package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Blob is the store a BlobStorage keeps its files in: named objects under
// '/'-separated keys, each written whole and never changed in place. It
// is all a new kind of checkpoint storage has to provide; the layout,
// the metadata, the commit protocol, retention, shared files, records and
// the checks of what is read are BlobStorage's, the same for every store.
// DirStorage, S3Storage and MemoryStorage are BlobStorages on the three
// adapters of this package.
//
// Keys are made of the names BlobStorage chooses (letters, digits, '.',
// '_', '-') joined by '/'; an adapter may map them to paths or object keys
// as it likes. Methods are safe for concurrent use, by several processes
// on one store too.
//
// The contract, which exactly-once rests on:
//   - Create and CreateIfAbsent are atomic and durable: a reader sees the
//     whole object or none (never a prefix), and the object survives a
//     crash of the process and of the machine once CreateIfAbsent returns
//     nil, and once Create returns nil or, at the latest, once a later
//     CreateIfAbsent or Delete of the same Blob returns nil (an adapter
//     may batch the durability of creates, as a directory's fsync of
//     several renames: BlobStorage publishes a checkpoint by a
//     CreateIfAbsent after all of its creates).
//   - CreateIfAbsent creates key only if no object of that name exists,
//     deciding atomically between concurrent creators: exactly one of
//     them succeeds, the others get an error wrapping fs.ErrExist and
//     change nothing. A checkpoint becomes complete by the conditional
//     create of its metadata, and the owner of a checkpoint root, a slot
//     of a distributed job and a savepoint's committed mark are decided
//     by conditional creates of records: were a second creator able to
//     replace the first one's object, two processes would each believe
//     they own a slot or completed a checkpoint, and both would commit
//     output (written twice) or one would restore state the other
//     replaced. An adapter whose transport retries a create whose answer
//     was lost may meet its own earlier attempt: fs.ErrExist is right
//     there too (BlobStorage reads the object back and accepts its own
//     bytes). A store that cannot create conditionally returns an error
//     wrapping ErrNoConditionalWrites: checkpoints then still complete
//     (with Create: the last writer of an id wins, so one job per store),
//     and records refuse.
//   - List shows every object whose Create returned before List was
//     called (read-after-write consistent listings): retention and the
//     slot ownership log decide from listings.
//   - Open, Stat and Delete of a key that does not exist: Open and Stat
//     return an error wrapping fs.ErrNotExist, Delete returns nil.
type Blob interface {
	// Open reads object key. size is the length the caller expects (0
	// when it does not know), which an adapter may use to bound the
	// transfer's time.
	Open(key string, size int64) (io.ReadCloser, error)
	// Create stores size bytes read from r as object key, replacing any
	// object of that name.
	Create(key string, r io.Reader, size int64) error
	// CreateIfAbsent stores data as object key unless it exists (see
	// above).
	CreateIfAbsent(key string, data []byte) error
	// Stat returns the length of object key.
	Stat(key string) (size int64, err error)
	// List returns every object whose key starts with prefix (a plain
	// string prefix, not only whole '/' segments), in any order.
	List(prefix string) ([]BlobObject, error)
	// Delete removes object key, durably.
	Delete(key string) error
	// Location names key for people (messages, logs): a path, a URL.
	// Location("") names the store itself.
	Location(key string) string
}

// BlobObject is one object a Blob lists.
type BlobObject struct {
	Key  string
	Size int64
}

// batchDeleter is an adapter that deletes many keys in fewer requests
// than one each (S3's DeleteObjects).
type batchDeleter interface {
	deleteKeys(keys []string) error
}

// nameSyncer is an adapter whose objects can be visible before their
// names are durable (a rename whose directory was not fsynced yet, or
// not before a crash of the process): syncName makes key's name durable,
// so that PutFile returns only once its file is, and before a shared file
// found stored may be listed by a checkpoint's metadata.
type nameSyncer interface {
	syncName(key string) error
}

// readBlob reads object key whole.
func readBlob(b Blob, key string, size int64) ([]byte, error) {
	r, err := b.Open(key, size)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", b.Location(key), err)
	}
	return data, nil
}

// isNotExist and isExist read a Blob's answers.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
func isExist(err error) bool    { return errors.Is(err, fs.ErrExist) }
