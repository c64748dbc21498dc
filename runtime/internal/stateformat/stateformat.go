// Package stateformat is the one definition of how the engine frames the
// state blobs it puts in checkpoints and of the job fingerprint it records
// beside them. Checkpoint storage treats blobs as opaque bytes; the engine
// (package runtime) writes and restores them through this package, and the
// inspector (runtime/checkpoint's Decode functions, for cmd/splitflow) takes
// them apart through it, so the two cannot drift.
//
// The frames, all lengths and counts uvarints:
//
//	versioned:  version data                      (an enumerator's state)
//	list:       version n n x (len bytes)         (operator list state)
//	frames:     n x (len bytes), n known to both  (a two-phase sink subtask:
//	                                               committables list, writer list)
//	keyed:      version n n x entry               (a keyed operator on the heap)
//	entry:      len name, kind byte, keyGroup, len data
//
// version in versioned and list is the connector serializer's; in keyed it
// is the layout's (KeyedVersion*). Every version listed here is still read:
// a layout change adds a version, it never reuses one.
//
// Decoders take the serializer's bytes apart and check the framing only;
// what the bytes mean is the caller's. Every decoding error wraps
// ErrLayout. Blobs are untrusted input (a checkpoint may be crafted): a
// count read from one is checked against the bytes that remain before it
// sizes anything.
package stateformat

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/splitflow/splitflow/runtime/internal/keygroup"
)

// ErrLayout is wrapped by every decoder here for bytes that do not have the
// layout asked for: truncated, with trailing data, or another kind of state
// altogether.
var ErrLayout = errors.New("state does not have the expected layout")

// AppendVersioned appends a versioned value: the serializer version, then
// its bytes.
func AppendVersioned(dst []byte, version int, data []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(version))
	return append(dst, data...)
}

// SplitVersioned takes a versioned value apart.
func SplitVersioned(b []byte) (version uint64, data []byte, err error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: no serializer version", ErrLayout)
	}
	return v, b[n:], nil
}

// ListWriter appends the items of one list frame; the version and count
// come first, so the caller knows both before it serializes an item.
type ListWriter struct{ b []byte }

// NewList starts a list of n items written by serializer version version.
func NewList(version, n int) *ListWriter {
	b := binary.AppendUvarint(nil, uint64(version))
	return &ListWriter{b: binary.AppendUvarint(b, uint64(n))}
}

// Add appends one item.
func (w *ListWriter) Add(item []byte) {
	w.b = binary.AppendUvarint(w.b, uint64(len(item)))
	w.b = append(w.b, item...)
}

// Bytes returns the list.
func (w *ListWriter) Bytes() []byte { return w.b }

// SplitList takes a list frame apart: the serializer version shared by
// every item, and each item's bytes (sub-slices of b). Every byte of b
// must belong to the list.
func SplitList(b []byte) (version uint64, items [][]byte, err error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: no serializer version", ErrLayout)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return 0, nil, fmt.Errorf("%w: bad item count", ErrLayout)
	}
	b = b[n:]
	items = make([][]byte, 0, count)
	for i := range count {
		item, rest, ok := next(b)
		if !ok {
			return 0, nil, fmt.Errorf("%w: item %d of %d is truncated", ErrLayout, i, count)
		}
		items = append(items, item)
		b = rest
	}
	if len(b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the last of %d items", ErrLayout, len(b), count)
	}
	return v, items, nil
}

// AppendFrames packs parts whose number the reader knows (a two-phase sink
// subtask's committables and writer state) into one blob.
func AppendFrames(frames ...[]byte) []byte {
	var out []byte
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out
}

// SplitFrames takes n frames written by AppendFrames apart; every byte of
// b must belong to them.
func SplitFrames(b []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	for i := range n {
		f, rest, ok := next(b)
		if !ok {
			return nil, fmt.Errorf("%w: part %d of %d is truncated", ErrLayout, i, n)
		}
		out = append(out, f)
		b = rest
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last of %d parts", ErrLayout, len(b), n)
	}
	return out, nil
}

// Keyed state layout versions. Version 1 has value and map entries;
// version 2 adds timers, an entry per time domain and key group; version 3
// starts every entry's data with a format byte (Format*) and encodes keys
// and values with the codecs of their types
// (runtime/internal/statecodec/serde.go); version 4
// adds the operator's watermark, an entry per key group (KindWatermark,
// data varint(watermark)); version 5 adds each state's shape (KindShape,
// shape.go).
const (
	KeyedVersion    = 5
	KeyedVersionMin = 1
	// KeyedVersionFormat is the first version with a format byte.
	KeyedVersionFormat = 3
)

// Kinds of keyed entries; never renumber.
const (
	KindValue            byte = 1
	KindMap              byte = 2
	KindEventTimers      byte = 3
	KindProcessingTimers byte = 4
	KindWatermark        byte = 5
	// KindList is a ListState: its entries' data is a value entry's,
	// every value a list (uvarint(n) then n length-framed elements).
	KindList byte = 6
)

// Formats of a keyed entry's data (version 3 on); never renumber.
const (
	FormatGob     byte = 1
	FormatColumns byte = 2
)

// minKeyedEntry is the fewest bytes a keyed entry takes: a byte each for
// its name's length, its kind, its key group, its data's length and its
// format byte (one less before KeyedVersionFormat).
const minKeyedEntry = 5

// maxKeyGroups bounds a key group: the engine's upper bound of the max
// parallelism.
const maxKeyGroups = keygroup.UpperBoundMaxParallelism

// KeyedEntry is one state's (or one time domain's timers') data for one
// key group.
type KeyedEntry struct {
	Name     string
	Kind     byte
	KeyGroup int
	// Format is FormatGob for layouts before KeyedVersionFormat, which had
	// no format byte.
	Format byte
	// Data is the entry's data after the format byte.
	Data []byte
}

// KeyedWriter writes a keyed snapshot of the current layout version.
type KeyedWriter struct{ b []byte }

// NewKeyed starts a keyed snapshot of n entries; size is a hint of the
// bytes their names and data take.
func NewKeyed(n, size int) *KeyedWriter {
	b := make([]byte, 0, size+(n+2)*(2+3*binary.MaxVarintLen64))
	b = binary.AppendUvarint(b, KeyedVersion)
	return &KeyedWriter{b: binary.AppendUvarint(b, uint64(n))}
}

// Add appends one entry.
func (w *KeyedWriter) Add(e KeyedEntry) {
	w.b = binary.AppendUvarint(w.b, uint64(len(e.Name)))
	w.b = append(w.b, e.Name...)
	w.b = append(w.b, e.Kind)
	w.b = binary.AppendUvarint(w.b, uint64(e.KeyGroup))
	w.b = binary.AppendUvarint(w.b, uint64(len(e.Data)+1))
	w.b = append(w.b, e.Format)
	w.b = append(w.b, e.Data...)
}

// Bytes returns the snapshot.
func (w *KeyedWriter) Bytes() []byte { return w.b }

// SplitKeyed takes a keyed snapshot of any layout version apart. An entry
// of version 3 or later whose format byte is unknown fails; kinds are left
// to the caller.
func SplitKeyed(b []byte) (version int, entries []KeyedEntry, err error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: no layout version", ErrLayout)
	}
	if v < KeyedVersionMin || v > KeyedVersion {
		return 0, nil, fmt.Errorf("%w: keyed state layout version %d is unknown to this build", ErrLayout, v)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: no entry count", ErrLayout)
	}
	b = b[n:]
	// The count sizes nothing before the bytes are known to hold that
	// many entries: a crafted blob could ask for any amount of memory.
	minEntry := uint64(minKeyedEntry)
	if v < KeyedVersionFormat {
		minEntry--
	}
	if count > uint64(len(b))/minEntry {
		return 0, nil, fmt.Errorf("%w: entry count %d, but %d bytes hold at most %d entries", ErrLayout, count, len(b), uint64(len(b))/minEntry)
	}
	entries = make([]KeyedEntry, 0, count)
	for i := range count {
		name, rest, ok := next(b)
		if !ok || len(rest) < 1 {
			return 0, nil, fmt.Errorf("%w: entry %d of %d is truncated", ErrLayout, i, count)
		}
		kind := rest[0]
		b = rest[1:]
		kg, n := binary.Uvarint(b)
		if n <= 0 || kg >= maxKeyGroups {
			return 0, nil, fmt.Errorf("%w: entry %d has no key group", ErrLayout, i)
		}
		b = b[n:]
		data, rest, ok := next(b)
		if !ok {
			return 0, nil, fmt.Errorf("%w: entry %d of %d is truncated", ErrLayout, i, count)
		}
		b = rest
		format := FormatGob
		if v >= KeyedVersionFormat {
			if len(data) < 1 || (data[0] != FormatGob && data[0] != FormatColumns) {
				return 0, nil, fmt.Errorf("%w: entry %q (key group %d) has no known data format", ErrLayout, name, kg)
			}
			format, data = data[0], data[1:]
		}
		entries = append(entries, KeyedEntry{Name: string(name), Kind: kind, KeyGroup: int(kg), Format: format, Data: data})
	}
	if len(b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the last of %d entries", ErrLayout, len(b), count)
	}
	return int(v), entries, nil
}

// next reads one length-prefixed field.
func next(b []byte) (field, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, false
	}
	return b[n : n+int(l)], b[n+int(l):], true
}

// Job fingerprint prefixes (Fingerprint writes the fingerprint, fingerprint.go):
// version 3 records each stateful operator's state signature and, for
// keyed state, the max parallelism; version 2 the signatures alone;
// version 1 had no prefix and nothing to compare.
const (
	FingerprintPrefix   = "splitflow-graph/3 "
	FingerprintPrefixV2 = "splitflow-graph/2 "
)
