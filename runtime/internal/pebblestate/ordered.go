package pebblestate

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Ordered maps: entries under a prefix read in the order of their user
// keys, from a given user key on, which is what a timer queue kept in the
// DB needs (its user keys start with the timer's big-endian timestamp).
// They share the map entries' place in the write buffer, so the buffer's
// bound, Freeze and Materialize cover them as every other write; unlike
// MapPut's entries they are never looked up by key, so they stay out of
// the key filter (which would otherwise fill with entries written once and
// deleted soon after).

// OrderedPut sets entry ukey, with an empty value, of the ordered map
// under prefix.
func (s *Store) OrderedPut(prefix, ukey []byte) error {
	return s.setEntry(prefix, ukey, entry{v: []byte{}}, false)
}

// OrderedSet sets entry ukey of the ordered map under prefix to val,
// which the store copies; like OrderedPut it stays out of the key filter.
// A list state appends through it: its user keys grow with every append,
// so an append writes one entry and reads nothing.
func (s *Store) OrderedSet(prefix, ukey, val []byte) error {
	return s.setEntry(prefix, ukey, entry{v: bytes.Clone(val)}, false)
}

// OrderedGet returns entry ukey of the ordered map under prefix: the
// write buffers' version if they hold one, the DB's otherwise (ordered
// entries are not in the key filter, so the DB is always asked).
func (s *Store) OrderedGet(prefix, ukey []byte) ([]byte, bool, error) {
	for _, b := range s.buffers() {
		if g := b.groups[string(prefix)]; g != nil {
			if e, ok := g.m[string(ukey)]; ok {
				return e.v, !e.del, nil
			}
			if g.cleared {
				return nil, false, nil
			}
		}
	}
	s.fk = append(append(s.fk[:0], prefix...), ukey...)
	return s.dbGet(s.fk)
}

// OrderedDelete removes entry ukey of the ordered map under prefix.
func (s *Store) OrderedDelete(prefix, ukey []byte) error {
	return s.setEntry(prefix, ukey, entry{del: true}, false)
}

// MapScanAfter calls yield with the entries of the map under prefix whose
// user key is greater than after (every entry for an empty after), in
// ascending byte order of the user key, until it returns false; the
// slices are valid during the call. Buffered entries of the prefix are
// merged with the DB's: its cost is that of the entries read plus the
// prefix's buffered entries, never that of the whole map.
func (s *Store) MapScanAfter(prefix, after []byte, yield func(k, v []byte) bool) (err error) {
	buffered := map[string]entry{}
	fromDB := true
	for _, b := range s.buffers() { // newest first
		g := b.groups[string(prefix)]
		if g == nil {
			continue
		}
		for k, e := range g.m {
			if k <= string(after) {
				continue
			}
			if _, newer := buffered[k]; !newer {
				buffered[k] = e
			}
		}
		if g.cleared {
			fromDB = false // older buffers' and the DB's entries are gone
			break
		}
	}
	keys := make([]string, 0, len(buffered))
	for k := range buffered {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var it *pebble.Iterator
	ok := false
	if fromDB {
		lower := append(append(append(make([]byte, 0, len(prefix)+len(after)+1), prefix...), after...), 0)
		it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: PrefixEnd(prefix)})
		if err != nil {
			return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
		}
		defer func() {
			if cerr := it.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("state: scan %s: %w", s.cfg.Dir, cerr)
			}
		}()
		ok = it.First()
	}
	i := 0
	for {
		var dbKey []byte
		if ok {
			dbKey = it.Key()[len(prefix):]
		}
		if i < len(keys) && (!ok || keys[i] <= string(dbKey)) {
			k := keys[i]
			i++
			if ok && k == string(dbKey) {
				ok = it.Next() // the buffer's entry shadows the DB's
			}
			if e := buffered[k]; !e.del && !yield([]byte(k), e.v) {
				return nil
			}
			continue
		}
		if !ok {
			break
		}
		if !yield(dbKey, it.Value()) {
			return nil
		}
		ok = it.Next()
	}
	if it != nil {
		if err := it.Error(); err != nil {
			return fmt.Errorf("state: scan %s: %w", s.cfg.Dir, err)
		}
	}
	return nil
}
