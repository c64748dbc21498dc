package pebblestate

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ScanDB calls visit with the DB's entries from lower (inclusive) to
// upper (exclusive) in key order, without the write buffers: for a sweep
// that looks for candidates in the DB and checks each one again through
// Get or MapGet before removing it. visit returns a key to seek to (nil:
// the next entry) and whether to go on; the slices are valid during the
// call only.
func (s *Store) ScanDB(lower, upper []byte, visit func(k, v []byte) (seek []byte, more bool)) (err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("state: scan %s: %w", s.cfg.Dir, cerr)
		}
	}()
	for ok := it.First(); ok; {
		seek, more := visit(it.Key(), it.Value())
		if !more {
			return nil
		}
		if seek != nil {
			ok = it.SeekGE(seek)
		} else {
			ok = it.Next()
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
	}
	return nil
}
