package keyed

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// Keyed state snapshots. A keyed process operator's state is written per
// key group, so that a restore with another parallelism hands every key
// group, whole, to the subtask that owns it now (Flink's key-group
// redistribution):
//
//	uvarint(version) uvarint(n) n x entry
//	entry: uvarint(len) name, kind byte, uvarint(keyGroup), uvarint(len) data
//
// The version is of this layout and of the kinds of entries it may hold:
// version 1 has ValueState and MapState entries; version 2 adds the
// pending timers, an entry per time domain and key group (kind
// stateKindEventTimers or stateKindProcessingTimers), so timers move with
// their key groups like the rest of the keyed state; version 3 starts
// every entry's data with a format byte and writes keys and values with
// the codecs of their types (statecodec's serde.go), a column at a time; version 4
// adds the operator's watermark, an entry per key group (kind
// stateKindWatermark, data varint(watermark)), written once the
// operator has one:
//
//	formatColumns:
//	  value:  uvarint(n) keys values
//	  map:    uvarint(n) keys, n x uvarint(entries of the key's map),
//	          map keys, map values (the keys' maps in turn)
//	  timers: uvarint(n) keys, n x varint(timestamp)
//	formatGob: the group's map (map[K]V, map[K]map[UK]UV) or timers
//	  ([]timerRecord[K] of runtime/internal/timers) as one gob stream
//
// Versions 1 and 2 have no format byte: their data is formatGob. A
// version 3 snapshot writes formatGob only for entries restored from an
// older one and not yet claimed by a state declaration, which it keeps
// as they were. Version 1 snapshots restore with no timers.

// The layout's versions, kinds and formats are stateformat's (the one
// definition the checkpoint inspector reads too).
const (
	keyedStateVersion    = stateformat.KeyedVersion
	keyedStateVersionMin = stateformat.KeyedVersionMin
	// keyedStateVersionFormat is the first version with a format byte.
	keyedStateVersionFormat = stateformat.KeyedVersionFormat
)

const (
	stateKindValue            = stateformat.KindValue
	stateKindMap              = stateformat.KindMap
	stateKindEventTimers      = stateformat.KindEventTimers
	stateKindProcessingTimers = stateformat.KindProcessingTimers
	stateKindWatermark        = stateformat.KindWatermark
	stateKindList             = stateformat.KindList
)

// Entry data formats (version 3 on).
const (
	formatGob     = stateformat.FormatGob
	formatColumns = stateformat.FormatColumns
)

// watermarkName names the watermark's entries; informative only,
// entries are told apart by kind.
const watermarkName = "watermark"

// WatermarkEntries are the entries of watermark wm for key groups lo to
// hi, none before the first watermark. The watermark is kept per key
// group so that a restore at another parallelism finds it for every key
// group it takes; a subtask restores the least of its key groups'.
func WatermarkEntries(wm int64, lo, hi int) []Entry {
	if wm == engine.NoWatermark {
		return nil
	}
	data := binary.AppendVarint(nil, wm)
	out := make([]Entry, 0, hi-lo+1)
	for g := lo; g <= hi; g++ {
		out = append(out, Entry{Name: watermarkName, Kind: stateKindWatermark, Format: formatColumns, KeyGroup: g, Data: data})
	}
	return out
}

func DecodeWatermark(data []byte) (int64, error) {
	wm, n := binary.Varint(data)
	if n <= 0 {
		return 0, engine.ErrShortState
	}
	return wm, CheckTrailing(data[n:])
}

// ReadCount reads an entry's count of keys, bounded by its length (every
// key takes a byte at least).
func ReadCount(b []byte) (int, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return 0, nil, engine.ErrShortState
	}
	return int(n), b[k:], nil
}

func CheckTrailing(b []byte) error {
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after the entry's last value", len(b))
	}
	return nil
}

// Entry is one state's entries of one key group, encoded.
type Entry struct {
	Name     string
	Kind     byte
	Format   byte
	KeyGroup int
	Data     []byte
}

// ErrSnapshotAbandoned ends an encoder whose task is going away.
var ErrSnapshotAbandoned = errors.New("snapshot abandoned: the task ended")

// snapshotableState is a ValueState or MapState as the snapshot sees it.
type snapshotableState interface {
	kind() byte
	// freeze, on the task goroutine once the epoch is frozen (see
	// keyedState), returns the encoder of the state's entries per key
	// group, in formatColumns. The encoder may run on any goroutine and
	// reads only frozen maps; it returns errSnapshotAbandoned early once
	// stop says so. Values the function could change in place (a slice,
	// a map or a pointer inside them) are copied, through their codec,
	// before the function sees them while the encoder may read them (see
	// HeapValue), so they are encoded off the task goroutine too. A key
	// or map key type with a pointer or interface inside is encoded
	// within freeze instead: copying a key would change its identity.
	freeze() func(stop func() bool) (map[int][]byte, error)
	// restore merges encoded entries of one key group.
	restore(format byte, data []byte) error
}

func (s *HeapValue[K, V]) kind() byte { return stateKindValue }

func (s *HeapValue[K, V]) freeze() func(stop func() bool) (map[int][]byte, error) {
	view, kc, vc, read := slices.Clone(s.m), s.ks.Keys, s.vals, &s.read
	read.Store(0)
	var keep func(V) bool
	if s.keep != nil {
		keep = s.keep() // TTL: expired values stay out of the snapshot
	}
	var trim func(V) (V, bool)
	if s.trim != nil {
		trim = s.trim() // list TTL: expired elements stay out
	}
	enc := func(stop func() bool) (map[int][]byte, error) {
		out := make(map[int][]byte)
		for g := range len(view) / slotsPerKeyGroup {
			if stop() {
				return nil, ErrSnapshotAbandoned
			}
			keys, vals := statecodec.Column[K]{Codec: kc}, statecodec.Column[V]{Codec: vc}
			for _, m := range view[g*slotsPerKeyGroup : (g+1)*slotsPerKeyGroup] {
				for k, v := range m {
					if keep != nil && !keep(v) {
						continue
					}
					if trim != nil {
						var live bool
						if v, live = trim(v); !live {
							continue
						}
					}
					keys.Add(k)
					vals.Add(v)
				}
			}
			if keys.N == 0 {
				read.Store(int64((g + 1) * slotsPerKeyGroup))
				continue
			}
			b := make([]byte, 0, binary.MaxVarintLen64+keys.Size()+vals.Size())
			b, err := keys.AppendTo(binary.AppendUvarint(b, uint64(keys.N)))
			if err != nil {
				return nil, fmt.Errorf("keys: %w", err)
			}
			if b, err = vals.AppendTo(b); err != nil {
				return nil, fmt.Errorf("values: %w", err)
			}
			out[g] = b
			// Only now: a gob column holds the values themselves until
			// appendTo encodes them.
			read.Store(int64((g + 1) * slotsPerKeyGroup))
		}
		return out, nil
	}
	if !ValueSemantics[K]() {
		return EncodedNow(enc)
	}
	return enc
}

// EncodedNow runs enc now and returns its result as an encoder.
func EncodedNow(enc func(func() bool) (map[int][]byte, error)) func(func() bool) (map[int][]byte, error) {
	out, err := enc(func() bool { return false })
	return func(func() bool) (map[int][]byte, error) { return out, err }
}

func (s *HeapValue[K, V]) restore(format byte, data []byte) error {
	if format == formatGob {
		var m map[K]V
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			s.writable(s.ks.slotOf(k))[k] = v
		}
		return nil
	}
	n, b, err := ReadCount(data)
	if err != nil {
		return err
	}
	keys, b, err := statecodec.ReadColumn(b, n, s.ks.Keys)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	vals, b, err := statecodec.ReadColumn(b, n, s.vals)
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	if err := CheckTrailing(b); err != nil {
		return err
	}
	for i, k := range keys {
		s.writable(s.ks.slotOf(k))[k] = vals[i]
	}
	return nil
}

func (s *HeapMap[K, UK, UV]) kind() byte { return stateKindMap }

func (s *HeapMap[K, UK, UV]) freeze() func(stop func() bool) (map[int][]byte, error) {
	view, kc, ukc, uvc, read := slices.Clone(s.m), s.ks.Keys, s.ukeys, s.uvals, &s.read
	read.Store(0)
	var keep func(UV) bool
	if s.keep != nil {
		keep = s.keep() // TTL: expired entries stay out of the snapshot
	}
	enc := func(stop func() bool) (map[int][]byte, error) {
		out := make(map[int][]byte)
		for g := range len(view) / slotsPerKeyGroup {
			if stop() {
				return nil, ErrSnapshotAbandoned
			}
			keys, ukeys, uvals := statecodec.Column[K]{Codec: kc}, statecodec.Column[UK]{Codec: ukc}, statecodec.Column[UV]{Codec: uvc}
			var sizes []byte
			for _, gm := range view[g*slotsPerKeyGroup : (g+1)*slotsPerKeyGroup] {
				for k, in := range gm {
					n := len(in.m)
					if keep != nil {
						n = 0
						for _, uv := range in.m {
							if keep(uv) {
								n++
							}
						}
						if n == 0 {
							continue
						}
					}
					keys.Add(k)
					sizes = binary.AppendUvarint(sizes, uint64(n))
					for uk, uv := range in.m {
						if keep != nil && !keep(uv) {
							continue
						}
						ukeys.Add(uk)
						uvals.Add(uv)
					}
				}
			}
			if keys.N == 0 {
				read.Store(int64((g + 1) * slotsPerKeyGroup))
				continue
			}
			b := make([]byte, 0, binary.MaxVarintLen64+keys.Size()+len(sizes)+ukeys.Size()+uvals.Size())
			b, err := keys.AppendTo(binary.AppendUvarint(b, uint64(keys.N)))
			if err != nil {
				return nil, fmt.Errorf("keys: %w", err)
			}
			b = append(b, sizes...)
			if b, err = ukeys.AppendTo(b); err != nil {
				return nil, fmt.Errorf("map keys: %w", err)
			}
			if b, err = uvals.AppendTo(b); err != nil {
				return nil, fmt.Errorf("map values: %w", err)
			}
			out[g] = b
			read.Store(int64((g + 1) * slotsPerKeyGroup)) // after appendTo, as above
		}
		return out, nil
	}
	if !ValueSemantics[K]() || !ValueSemantics[UK]() {
		return EncodedNow(enc)
	}
	return enc
}

// set puts a restored key's map.
func (s *HeapMap[K, UK, UV]) set(k K, m map[UK]UV) {
	g := s.ks.slotOf(k)
	if s.m[g] == nil {
		s.m[g], s.ep[g] = map[K]*innerMap[UK, UV]{}, s.ks.Epoch
	}
	s.m[g][k] = &innerMap[UK, UV]{m: m, ep: s.ks.Epoch}
}

func (s *HeapMap[K, UK, UV]) restore(format byte, data []byte) error {
	if format == formatGob {
		var m map[K]map[UK]UV
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			s.set(k, v)
		}
		return nil
	}
	n, b, err := ReadCount(data)
	if err != nil {
		return err
	}
	keys, b, err := statecodec.ReadColumn(b, n, s.ks.Keys)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	sizes := make([]int, n)
	total := 0
	for i := range sizes {
		l, m := binary.Uvarint(b)
		if m <= 0 || l > uint64(len(b)) {
			return engine.ErrShortState
		}
		sizes[i], total, b = int(l), total+int(l), b[m:]
		if total > len(b) {
			return engine.ErrShortState
		}
	}
	ukeys, b, err := statecodec.ReadColumn(b, total, s.ukeys)
	if err != nil {
		return fmt.Errorf("map keys: %w", err)
	}
	uvals, b, err := statecodec.ReadColumn(b, total, s.uvals)
	if err != nil {
		return fmt.Errorf("map values: %w", err)
	}
	if err := CheckTrailing(b); err != nil {
		return err
	}
	at := 0
	for i, k := range keys {
		inner := make(map[UK]UV, sizes[i])
		for j := at; j < at+sizes[i]; j++ {
			inner[ukeys[j]] = uvals[j]
		}
		at += sizes[i]
		s.set(k, inner)
	}
	return nil
}

func EncodeEntries(entries []Entry) []byte {
	size := 0
	for _, e := range entries {
		size += len(e.Name) + len(e.Data)
	}
	w := stateformat.NewKeyed(len(entries), size)
	for _, e := range entries {
		w.Add(stateformat.KeyedEntry{Name: e.Name, Kind: e.Kind, KeyGroup: e.KeyGroup, Format: e.Format, Data: e.Data})
	}
	return w.Bytes()
}

func DecodeEntries(b []byte) ([]Entry, error) {
	_, es, err := stateformat.SplitKeyed(b)
	if err != nil {
		return nil, err
	}
	entries := make([]Entry, 0, len(es))
	for _, e := range es {
		entries = append(entries, Entry{Name: e.Name, Kind: e.Kind, Format: e.Format, KeyGroup: e.KeyGroup, Data: e.Data})
	}
	return entries, nil
}

// ValueSemantics reports that a T copied is independent of the original:
// no slice, map, pointer, interface, chan or func inside, at any depth
// (strings are immutable). Only such values may be read by an encoder
// while the function goes on.
func ValueSemantics[T any]() bool { return valueType(reflect.TypeFor[T]()) }

func valueType(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	case reflect.Array:
		return valueType(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !valueType(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}
