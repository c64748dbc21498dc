package pebblestate

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A delta is a snapshot's frozen write buffer written out: what a delta
// checkpoint stores over the files of its base (Snapshot.Base), so that
// the checkpoint need not wait for the buffer to be applied, the DB
// flushed and checkpointed and the new files stored. Layout:
//
//	uvarint(n) n x (uvarint(len) key, op)                    value entries
//	uvarint(g) g x (uvarint(len) prefix, cleared (0 or 1),   map entries by prefix
//	  uvarint(m) m x (uvarint(len) user key, op))
//
// where op is 0 (deleted) or 1 followed by uvarint(len) value. A restore
// applies it as the buffer would have been applied (applyBuffer): value
// entries, then per prefix its clear (a range deletion over the prefix)
// before its entries.

// AppendDelta appends the snapshot's buffer, in the delta layout, to dst.
// Any goroutine: the frozen buffer is only read.
func (sn *Snapshot) AppendDelta(dst []byte) []byte {
	b := sn.buf
	op := func(out []byte, e entry) []byte {
		if e.del {
			return append(out, 0)
		}
		out = append(out, 1)
		return append(binary.AppendUvarint(out, uint64(len(e.v))), e.v...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.flat)))
	for k, e := range b.flat {
		dst = append(binary.AppendUvarint(dst, uint64(len(k))), k...)
		dst = op(dst, e)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.groups)))
	for p, g := range b.groups {
		dst = append(binary.AppendUvarint(dst, uint64(len(p))), p...)
		cleared := byte(0)
		if g.cleared {
			cleared = 1
		}
		dst = append(dst, cleared)
		dst = binary.AppendUvarint(dst, uint64(len(g.m)))
		for uk, e := range g.m {
			dst = append(binary.AppendUvarint(dst, uint64(len(uk))), uk...)
			dst = op(dst, e)
		}
	}
	return dst
}

// inRange reports lo <= k < hi (hi nil: no upper bound).
func inRange(k, lo, hi []byte) bool {
	return bytes.Compare(k, lo) >= 0 && (hi == nil || bytes.Compare(k, hi) < 0)
}

// decodeDelta reads a delta into a buffer, keeping the value entries and
// the map prefixes in [lo, hi) (hi nil: no upper bound): every key of a
// key group starts with it, so a rescaled subtask keeps its key groups'
// entries as it keeps their DB keys.
func decodeDelta(d, lo, hi []byte) (*buffer, error) {
	b := newBuffer()
	r := blobReader{b: d}
	readEntry := func() entry {
		switch r.byte() {
		case 0:
			return entry{del: true}
		case 1:
			return entry{v: bytes.Clone(r.bytes())}
		default:
			if r.err == nil {
				r.err = fmt.Errorf("pebble state delta: an entry of unknown kind")
			}
			return entry{}
		}
	}
	for range r.count() {
		k := r.bytes()
		e := readEntry()
		if r.err == nil && inRange(k, lo, hi) {
			b.flat[string(k)] = e
			b.n++
		}
	}
	for range r.count() {
		p := r.bytes()
		g := &group{m: map[string]entry{}}
		switch r.byte() {
		case 0:
		case 1:
			g.cleared = true
		default:
			if r.err == nil {
				r.err = fmt.Errorf("pebble state delta: a map's cleared flag is not 0 or 1")
			}
		}
		for range r.count() {
			uk := r.bytes()
			g.m[string(uk)] = readEntry()
		}
		if r.err == nil && inRange(p, lo, hi) {
			b.groups[string(p)] = g
			b.n += 1 + len(g.m)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("pebble state delta: %d bytes after its last entry", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("pebble state delta: %w", r.err)
	}
	return b, nil
}

// ApplyDelta writes the entries of delta (AppendDelta's layout) in
// [lo, hi) to the DB (hi nil: no upper bound): a restore of a delta
// checkpoint, once its base's files are laid out and opened, before
// BuildFilter.
func (s *Store) ApplyDelta(delta, lo, hi []byte) error {
	if len(delta) == 0 {
		return nil
	}
	if err := s.settle(true); err != nil {
		return err
	}
	s.mat = 0
	b, err := decodeDelta(delta, lo, hi)
	if err != nil {
		return err
	}
	return applyBuffer(s.db, s.cfg.Dir, b)
}

// applyDeltaTo opens the DB laid out in dir and applies delta's entries
// in [lo, hi) to it; it returns the open DB.
func applyDeltaTo(dir string, cfg Config, delta, lo, hi []byte) (*pebble.DB, error) {
	b, err := decodeDelta(delta, lo, hi)
	if err != nil {
		return nil, err
	}
	db, err := pebble.Open(dir, dbOptions(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("state: open restored state %s: %w", dir, err)
	}
	if err := applyBuffer(db, dir, b); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}
