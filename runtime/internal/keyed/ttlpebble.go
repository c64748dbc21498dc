package keyed

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
)

// pebbleSweep is the incremental TTL cleanup of one state on the pebble
// backend: a cursor over the state's entries in the DB, through the
// subtask's key groups in turn. Every pebbleSweepEvery accesses it reads
// on from the cursor, up to that many times the per-access budget of
// entries, and removes those whose timestamp (the first varint of a TTL
// value) has expired, after checking each through the store, whose write
// buffer may hold a newer value. Entries still only in the buffer are
// checked once they reach the DB. Pebble v2 has no compaction filter, so
// expired entries cannot be dropped by compactions as RocksDB's TTL
// filter does for Flink.
type pebbleSweep struct {
	pk    *Pebble
	id    uint16
	name  string
	isMap bool
	// isList: the entries are a list's elements (ordered entries, out
	// of the key filter), each with its own timestamp.
	isList  bool
	fail    func(error)
	expired func(ts, now int64) bool
	calls   int
	// after is the last key looked at, nil to start over.
	after []byte
	cands [][]byte
}

func (w *pebbleSweep) access(now int64, n int) {
	w.calls++
	if w.calls%pebbleSweepEvery != 0 {
		return
	}
	if err := w.sweep(now, n*pebbleSweepEvery); err != nil {
		w.fail(fmt.Errorf("state %q: TTL cleanup: %w", w.name, err))
	}
}

// sweep checks up to n of the state's DB entries from the cursor.
func (w *pebbleSweep) sweep(now int64, n int) error {
	pk := w.pk
	lower := pebblestate.AppendKeyPrefix(nil, pk.KGLo, w.id)
	if w.after != nil {
		lower = append(bytes.Clone(w.after), 0)
	}
	upper := pebblestate.PrefixEnd(pebblestate.AppendKeyPrefix(nil, pk.KGHi, w.id))
	w.cands = w.cands[:0]
	done := true
	err := pk.Store.ScanDB(lower, upper, func(k, v []byte) ([]byte, bool) {
		if len(k) < 4 {
			return nil, true
		}
		kg, id := int(binary.BigEndian.Uint16(k)), binary.BigEndian.Uint16(k[2:])
		switch {
		case id < w.id:
			return pebblestate.AppendKeyPrefix(nil, kg, w.id), true
		case id > w.id:
			if kg >= pk.KGHi {
				return nil, false
			}
			return pebblestate.AppendKeyPrefix(nil, kg+1, w.id), true
		}
		if n == 0 {
			done = false
			return nil, false
		}
		n--
		w.after = append(w.after[:0], k...)
		if ts, ok := ttlStamp(v); ok && w.expired(ts, now) {
			w.cands = append(w.cands, bytes.Clone(k))
		}
		return nil, true
	})
	if err != nil {
		return err
	}
	if done {
		w.after = nil
	}
	for _, k := range w.cands {
		if err := w.remove(k, now); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes entry k if the store's latest value of it has expired.
func (w *pebbleSweep) remove(k []byte, now int64) error {
	st := w.pk.Store
	if !w.isMap && !w.isList {
		v, ok, err := st.Get(k)
		if err != nil || !ok {
			return err
		}
		if ts, ok := ttlStamp(v); ok && w.expired(ts, now) {
			return st.Delete(k)
		}
		return nil
	}
	l, m := binary.Uvarint(k[4:])
	if m <= 0 || uint64(len(k)-4-m) < l {
		return fmt.Errorf("map entry key %x is malformed", k)
	}
	prefix, ukey := k[:4+m+int(l)], k[4+m+int(l):]
	if w.isList {
		// A read with ttlOnReadAndWrite renews an element in place, so
		// the buffer may hold a newer timestamp than the DB.
		v, ok, err := st.OrderedGet(prefix, ukey)
		if err != nil || !ok {
			return err
		}
		if ts, ok := ttlStamp(v); ok && w.expired(ts, now) {
			return st.OrderedDelete(prefix, ukey)
		}
		return nil
	}
	v, ok, err := st.MapGet(prefix, ukey)
	if err != nil || !ok {
		return err
	}
	if ts, ok := ttlStamp(v); ok && w.expired(ts, now) {
		return st.MapDelete(prefix, ukey)
	}
	return nil
}
