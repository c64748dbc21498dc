package runtime

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
)

// Keyed state snapshots. A keyed process operator's state is written per
// key group, so that a restore with another parallelism hands every key
// group, whole, to the subtask that owns it now (Flink's key-group
// redistribution):
//
//	uvarint(version) uvarint(n) n x entry
//	entry: uvarint(len) name, kind byte, uvarint(keyGroup), uvarint(len) gob
//
// Keys and values are encoded with encoding/gob; their types are checked
// when the state is declared (statetype.go), so that none loses a field
// to gob's silence about unexported ones. The version is of this layout and of the kinds
// of entries it may hold: version 1 has ValueState and MapState entries;
// version 2 adds the pending timers, an entry per time domain and key
// group (kind stateKindEventTimers or stateKindProcessingTimers, a gob
// []timerRecord[K]), so timers move with their key groups like the rest
// of the keyed state. Version 1 snapshots restore with no timers.

const (
	keyedStateVersion    = 2
	keyedStateVersionMin = 1
)

const (
	stateKindValue            byte = 1
	stateKindMap              byte = 2
	stateKindEventTimers      byte = 3
	stateKindProcessingTimers byte = 4
)

// Names of the timer entries; informative only, entries are told apart
// by kind.
const (
	eventTimersName      = "timers/event-time"
	processingTimersName = "timers/processing-time"
)

// timerRecord is one pending timer as checkpointed.
type timerRecord[K comparable] struct {
	Key K
	Ts  int64
}

// encodeTimers encodes q's timers per key group.
func encodeTimers[K comparable](q *timerQueue[K], groupOf func(K) int) (map[int][]byte, error) {
	if len(q.heap) == 0 {
		return nil, nil
	}
	groups := map[int][]timerRecord[K]{}
	for _, e := range q.heap {
		g := groupOf(e.key)
		groups[g] = append(groups[g], timerRecord[K]{Key: e.key, Ts: e.ts})
	}
	return encodeEach(groups)
}

// restoreTimers adds the encoded timers of one key group to q.
func restoreTimers[K comparable](q *timerQueue[K], data []byte) error {
	var rs []timerRecord[K]
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&rs); err != nil {
		return err
	}
	for _, r := range rs {
		q.add(r.Key, r.Ts)
	}
	return nil
}

// stateEntry is one state's entries of one key group, encoded.
type stateEntry struct {
	name     string
	kind     byte
	keyGroup int
	data     []byte
}

// snapshotableState is a ValueState or MapState as the snapshot sees it.
type snapshotableState interface {
	kind() byte
	// encodeGroups encodes the state's entries per key group.
	encodeGroups(groupOf func(key any) int) (map[int][]byte, error)
	// restore merges encoded entries of one key group.
	restore(data []byte) error
}

func (s *valueState[K, V]) kind() byte { return stateKindValue }

func (s *valueState[K, V]) encodeGroups(groupOf func(any) int) (map[int][]byte, error) {
	groups := map[int]map[K]V{}
	for k, v := range s.m {
		g := groupOf(k)
		if groups[g] == nil {
			groups[g] = map[K]V{}
		}
		groups[g][k] = v
	}
	return encodeEach(groups)
}

func (s *valueState[K, V]) restore(data []byte) error {
	var m map[K]V
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		s.m[k] = v
	}
	return nil
}

func (s *mapState[K, UK, UV]) kind() byte { return stateKindMap }

func (s *mapState[K, UK, UV]) encodeGroups(groupOf func(any) int) (map[int][]byte, error) {
	groups := map[int]map[K]map[UK]UV{}
	for k, v := range s.m {
		g := groupOf(k)
		if groups[g] == nil {
			groups[g] = map[K]map[UK]UV{}
		}
		groups[g][k] = v
	}
	return encodeEach(groups)
}

func (s *mapState[K, UK, UV]) restore(data []byte) error {
	var m map[K]map[UK]UV
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		s.m[k] = v
	}
	return nil
}

func encodeEach[M any](groups map[int]M) (map[int][]byte, error) {
	out := make(map[int][]byte, len(groups))
	for g, m := range groups {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(m); err != nil {
			return nil, err
		}
		out[g] = buf.Bytes()
	}
	return out, nil
}

func encodeStateEntries(entries []stateEntry) []byte {
	out := binary.AppendUvarint(nil, keyedStateVersion)
	out = binary.AppendUvarint(out, uint64(len(entries)))
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(len(e.name)))
		out = append(out, e.name...)
		out = append(out, e.kind)
		out = binary.AppendUvarint(out, uint64(e.keyGroup))
		out = binary.AppendUvarint(out, uint64(len(e.data)))
		out = append(out, e.data...)
	}
	return out
}

func decodeStateEntries(b []byte) ([]stateEntry, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errShortState
	}
	if v < keyedStateVersionMin || v > keyedStateVersion {
		return nil, fmt.Errorf("keyed state layout version %d is unknown to this build", v)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, errShortState
	}
	b = b[n:]
	readBytes := func() ([]byte, error) {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, errShortState
		}
		out := b[n : n+int(l)]
		b = b[n+int(l):]
		return out, nil
	}
	entries := make([]stateEntry, 0, count)
	for range count {
		name, err := readBytes()
		if err != nil {
			return nil, err
		}
		if len(b) < 1 {
			return nil, errShortState
		}
		kind := b[0]
		b = b[1:]
		kg, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errShortState
		}
		b = b[n:]
		data, err := readBytes()
		if err != nil {
			return nil, err
		}
		entries = append(entries, stateEntry{name: string(name), kind: kind, keyGroup: int(kg), data: data})
	}
	return entries, nil
}
