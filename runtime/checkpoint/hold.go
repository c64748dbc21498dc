package checkpoint

import "sync"

// Holder is implemented by a Storage that can keep a completed checkpoint
// from retention while something reads it (a savepoint's copy, which runs
// beside the job's later checkpoints). Every BlobStorage (DirStorage,
// S3Storage and MemoryStorage among them) implements it; the engine copies a savepoint of any other
// Storage on its master goroutine, between commits.
type Holder interface {
	// Hold keeps checkpoint id, and thereby the shared files it lists,
	// from the retention of every later Commit of this Storage until
	// release is called; the first Commit after that applies retention
	// to it as usual. Holds count: each needs its release. release may be
	// called from any goroutine, more than once. Hold does not check that
	// id exists, and does not survive the process: another Storage on the
	// same location does not see it.
	Hold(id int64) (release func())
}

// heldIDs counts the holds of each checkpoint id, under the lock of the
// Storage it belongs to.
type heldIDs map[int64]int

func (h heldIDs) hold(mu *sync.Mutex, id int64) func() {
	mu.Lock()
	h[id]++
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			if h[id]--; h[id] <= 0 {
				delete(h, id)
			}
			mu.Unlock()
		})
	}
}

// notHeld is ids without the held ones.
func (h heldIDs) notHeld(ids []int64) []int64 {
	var out []int64
	for _, id := range ids {
		if h[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}
