package pebblestate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

// Lay writes a DB directory from a checkpoint's files: the small ones
// given whole, the immutable ones by fetch (which copies a stored file to
// a local path, verifying it). dir must not exist.
func Lay(dir string, small map[string][]byte, immutable []string, fetch func(name, dst string) error) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("state: %s exists already", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state: create %s: %w", dir, err)
	}
	for name, data := range small {
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), data, 0o600); err != nil {
			return fmt.Errorf("state: write %s: %w", filepath.Join(dir, name), err)
		}
	}
	for _, name := range immutable {
		if err := fetch(name, filepath.Join(dir, filepath.Base(name))); err != nil {
			return err
		}
	}
	return nil
}

// DeleteOutside removes every key outside [lo, hi) from the DB (a
// rescaled subtask keeps the key groups it owns).
func (s *Store) DeleteOutside(lo, hi []byte) error {
	if err := s.settle(true); err != nil {
		return err
	}
	s.mat = 0
	b := s.db.NewBatch()
	defer b.Close()
	if len(lo) > 0 {
		// From 0x00, not from the empty key: every key starts with its
		// two-byte key group, and a range deletion starting at the empty
		// key breaks pebble's iterators over the DB (seen as invariant
		// violations under -race, in the key filter's build).
		if err := b.DeleteRange([]byte{0}, lo, nil); err != nil {
			return err
		}
	}
	if hi != nil {
		if err := b.DeleteRange(hi, bytes.Repeat([]byte{0xff}, 8), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: delete outside the owned key groups in %s: %w", s.cfg.Dir, err)
	}
	return nil
}

// CopyFrom copies every key in [lo, hi) of the DB laid out in dir into
// the store, each key rewritten by rewrite (nil: keep the key as it is),
// after applying delta (a delta checkpoint's entries, ApplyDelta) to that
// DB; without one it is opened read-only. Used on a restore that merges
// several old subtasks' state.
func (s *Store) CopyFrom(dir string, delta, lo, hi []byte, rewrite func(key []byte) ([]byte, error)) error {
	if err := s.settle(true); err != nil {
		return err
	}
	s.mat = 0
	cfg := Config{Cache: s.cfg.Cache, Logger: s.cfg.Logger, MemTableSize: s.cfg.MemTableSize}
	var src *pebble.DB
	var err error
	if len(delta) > 0 {
		src, err = applyDeltaTo(dir, cfg, delta, lo, hi)
	} else if src, err = pebble.Open(dir, dbOptions(cfg, true)); err != nil {
		err = fmt.Errorf("state: open restored state %s: %w", dir, err)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if rewrite != nil {
			if k, err = rewrite(k); err != nil {
				return err
			}
		}
		if err := b.Set(k, it.Value(), nil); err != nil {
			return err
		}
		s.filter.add(k)
		if b.Len() >= 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("state: read restored state %s: %w", dir, err)
	}
	return b.Commit(pebble.NoSync)
}
