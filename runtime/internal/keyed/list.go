package keyed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"iter"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// The heap backend keeps a key's list as one value, a []T, in a value
// state (so the copy-on-write of snapshots is the value state's: a list
// the encoder reads is copied before an append changes it); checkpoints
// write it as the entry kind stateKindList, each list in listSerde. The
// pebble backend keeps one DB entry per element (pebbleListState).

// HeapList is the heap backend's ListState.
type HeapList[K comparable, T any] struct {
	v *HeapValue[K, []T]
}

func newListState[K comparable, T any](ks *State[K], name string, elems statecodec.Codec[T]) *HeapList[K, T] {
	return &HeapList[K, T]{v: newValueState[K, []T](ks, name, ListCodec(elems))}
}

func (s *HeapList[K, T]) kind() byte { return stateKindList }
func (s *HeapList[K, T]) freeze() func(stop func() bool) (map[int][]byte, error) {
	return s.v.freeze()
}
func (s *HeapList[K, T]) restore(format byte, data []byte) error { return s.v.restore(format, data) }
func (s *HeapList[K, T]) thaw()                                  { s.v.thaw() }

func (s *HeapList[K, T]) Add(v T) {
	cur, _ := s.v.Value() // a list the snapshot holds comes back copied
	s.v.Update(append(cur, v))
}

func (s *HeapList[K, T]) AddAll(vs []T) {
	if len(vs) == 0 {
		return
	}
	cur, _ := s.v.Value()
	s.v.Update(append(cur, vs...))
}

func (s *HeapList[K, T]) Get() iter.Seq[T] {
	cur, _ := s.v.Value()
	return slices.Values(cur)
}

func (s *HeapList[K, T]) Update(vs []T) {
	if len(vs) == 0 {
		s.v.Clear()
		return
	}
	s.v.Update(slices.Clone(vs)) // the caller keeps its slice
}

func (s *HeapList[K, T]) Clear() { s.v.Clear() }

// Len is the current key's list's length.
func (s *HeapList[K, T]) Len() int {
	cur, _ := s.v.Value()
	return len(cur)
}

// ListCodec is the codec of a whole list of elements in codec elems: a
// list is uvarint(n) and its elements, each framed by its length unless
// elems is a built-in binary codec (which delimits itself). It reports
// elems' id and name, so that a checkpoint records the element codec.
func ListCodec[T any](elems statecodec.Codec[T]) statecodec.Codec[[]T] {
	return statecodec.Codec[[]T]{ID: elems.ID, Name: elems.Name, Ext: listSerde[T]{elems}}
}

type listSerde[T any] struct{ c statecodec.Codec[T] }

func (l listSerde[T]) Name() string { return "list of " + l.c.String() }

func (l listSerde[T]) Append(dst []byte, vs []T) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	if l.c.Bin != nil {
		for _, v := range vs {
			dst = l.c.Bin.AppendValue(dst, v)
		}
		return dst, nil
	}
	var one []byte
	for _, v := range vs {
		b, err := statecodec.AppendOne(one[:0], l.c, v)
		if err != nil {
			return nil, err
		}
		one = b
		dst = append(binary.AppendUvarint(dst, uint64(len(b))), b...)
	}
	return dst, nil
}

func (l listSerde[T]) Decode(b []byte) ([]T, error) {
	n, b, err := ReadCount(b)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, n)
	for range n {
		if l.c.Bin != nil {
			v, m, err := l.c.Bin.ReadValue(b)
			if err != nil {
				return nil, err
			}
			out, b = append(out, v), b[m:]
			continue
		}
		size, m := binary.Uvarint(b)
		if m <= 0 || uint64(len(b)-m) < size {
			return nil, engine.ErrShortState
		}
		v, err := statecodec.ReadOne(b[m:m+int(size)], l.c)
		if err != nil {
			return nil, err
		}
		out, b = append(out, v), b[m+int(size):]
	}
	return out, CheckTrailing(b)
}

// pebbleListState is the pebble backend's ListState: one DB entry per
// element, under the key's prefix (as a map's entries), its user key
//
//	generation(8, big-endian) sequence(8, big-endian)
//
// so that an append writes one entry and reads nothing, and a scan of
// the prefix reads the list in append order. The sequence counts the
// subtask's appends since it opened; the generation is the id of the
// checkpoint the subtask restored (0 when it started empty). Every entry
// of a restored DB was written by a run that restored an earlier
// checkpoint (or none), and checkpoint ids only grow, so appends after a
// restore sort after every element restored; a key is owned by one
// subtask at a time, so the subtasks of one run never write one key.
type pebbleListState[K comparable, T any] struct {
	ks     *State[K]
	pk     *Pebble
	name   string
	id     uint16
	elems  statecodec.Codec[T]
	prefix []byte
	ub     [16]byte
	vb     []byte
}

func newPebbleListState[K comparable, T any](ks *State[K], name string, elems statecodec.Codec[T]) (*pebbleListState[K, T], error) {
	if ks.PebbleKeysErr != nil {
		return nil, ks.PebbleKeysErr
	}
	id, err := ks.Pebble.declareID(name, stateKindList, elems.Desc(), statecodec.For[T]().Desc())
	if err != nil {
		return nil, err
	}
	return &pebbleListState[K, T]{ks: ks, pk: ks.Pebble, name: name, id: id, elems: elems}, nil
}

func (s *pebbleListState[K, T]) kind() byte { return stateKindList }

func (s *pebbleListState[K, T]) pfx() ([]byte, bool) {
	kb, err := s.ks.pebbleKey()
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		return nil, false
	}
	p := pebblestate.AppendKeyPrefix(s.prefix[:0], s.ks.GroupOf(s.ks.Key), s.id)
	p = binary.AppendUvarint(p, uint64(len(kb)))
	s.prefix = append(p, kb...)
	return s.prefix, true
}

// nextKey is the user key of the subtask's next append.
func (s *pebbleListState[K, T]) nextKey() []byte {
	s.pk.listSeq++
	binary.BigEndian.PutUint64(s.ub[:8], s.pk.listGen)
	binary.BigEndian.PutUint64(s.ub[8:], s.pk.listSeq)
	return s.ub[:]
}

func (s *pebbleListState[K, T]) add(p []byte, v T) bool {
	b, err := statecodec.AppendOne(s.vb[:0], s.elems, v)
	if err == nil {
		s.vb = b
		err = s.pk.Store.OrderedSet(p, s.nextKey(), b)
	}
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		return false
	}
	return true
}

func (s *pebbleListState[K, T]) Add(v T) {
	if p, ok := s.pfx(); ok {
		s.add(p, v)
	}
}

func (s *pebbleListState[K, T]) AddAll(vs []T) {
	p, ok := s.pfx()
	if !ok {
		return
	}
	for _, v := range vs {
		if !s.add(p, v) {
			return
		}
	}
}

func (s *pebbleListState[K, T]) Get() iter.Seq[T] {
	p, ok := s.pfx()
	if !ok {
		return func(func(T) bool) {}
	}
	p = bytes.Clone(p)
	return func(yield func(T) bool) {
		err := s.pk.Store.MapScanAfter(p, nil, func(_, vb []byte) bool {
			v, err := statecodec.ReadOne(vb, s.elems)
			if err != nil {
				s.ks.FailDecode(fmt.Errorf("state %q: decode list element: %w", s.name, err))
				return false
			}
			return yield(v)
		})
		if err != nil {
			s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

func (s *pebbleListState[K, T]) Update(vs []T) {
	s.Clear()
	s.AddAll(vs)
}

func (s *pebbleListState[K, T]) Clear() {
	if p, ok := s.pfx(); ok {
		if err := s.pk.Store.MapClear(p); err != nil {
			s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

// Len is the current key's list's length (a scan).
func (s *pebbleListState[K, T]) Len() int {
	n := 0
	for range s.Get() {
		n++
	}
	return n
}

// importHeap loads restored heap entries (a checkpoint of the heap
// backend) into the DB.
func (s *pebbleListState[K, T]) importHeap(entries []Entry) error {
	h := newListState[K, T](s.ks, s.name, s.elems)
	if err := restoreEntries(h, entries); err != nil {
		return err
	}
	saved := s.ks.Key
	defer s.ks.SetKey(saved)
	for _, m := range h.v.m {
		for k, l := range m {
			s.ks.SetKey(k)
			s.AddAll(l)
			if s.ks.Err != nil {
				return s.ks.Err
			}
		}
	}
	return nil
}

// DeclareListNoTTL returns the list state called name of ks, declaring it
// with elements in codec elems on first use.
func DeclareListNoTTL[K comparable, T any](ks *State[K], name string, elems statecodec.Codec[T]) (List[T], error) {
	decl := fmt.Sprintf("ListState[%s] (elements %s)", typeOf[T](), elems)
	if s, ok := ks.States[name]; ok {
		if err := sameDecl(ks.Common, name, decl); err != nil {
			return nil, err
		}
		switch s := s.(type) {
		case *pebbleListState[K, T]:
			return s, nil
		case *HeapList[K, T]:
			return s, nil
		}
		return nil, errDeclaredOverOtherKey(name)
	}
	if err := CheckStateTypes(name, StateType{"key type", ks.keyType()}); err != nil {
		return nil, err
	}
	if elems.Bin == nil && elems.Ext == nil {
		if err := CheckStateTypes(name, StateType{"element type", typeOf[T]()}); err != nil {
			return nil, err
		}
	}
	elems, err := evolveRole(ks, name, "element type", elems)
	if err != nil {
		return nil, err
	}
	ks.decls[name] = decl
	var shape statecodec.DeclaredShape
	statecodec.ShapeRole(&shape, "key type", ks.Keys)
	statecodec.ShapeRole(&shape, "element type", elems)
	statecodec.SchemaRole(&shape, "element type", elems, ks.Pebble != nil)
	if ks.Pebble != nil {
		ps, err := newPebbleListState[K, T](ks, name, elems)
		if err != nil {
			return nil, err
		}
		if err := ks.createPebble(name, ps, shape); err != nil {
			return nil, err
		}
		return ps, nil
	}
	ls := newListState[K, T](ks, name, elems)
	if err := ks.create(name, ls, shape); err != nil {
		return nil, err
	}
	return ls, nil
}
