package runtime

import (
	"bytes"
	"crypto/rand"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"iter"
	"reflect"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// The pebble state backend on the engine's side: typed ValueState and
// MapState over a pebblestate.Store, the blob that describes a pebble
// checkpoint of one subtask, and its restore, also across parallelism
// changes. Keys are laid out as package pebblestate says:
//
//	value:     keyGroup(2) stateID(2) key
//	map entry: keyGroup(2) stateID(2) uvarint(len(key)) key userKey
//
// with keys, user keys and values in the codecs of their types
// (runtime/internal/statecodec, one value at a time), and timers
// (timers.go) as
//
//	timer:     keyGroup(2) 0x0000 domain(1) timestamp(8, big-endian, sign bit flipped) key
//
// with an empty value, so that a key group's timers are contiguous and in
// time order. The blob of a subtask's checkpoint is pebblestate.Blob.

// pebbleFor returns the job's pebble backend, making it on first use.
// Any task goroutine.
func (ex *execution) pebbleFor(cfg *stateConfig) (*pebblestate.Backend, error) {
	ex.pebbleMu.Lock()
	defer ex.pebbleMu.Unlock()
	if ex.pebble != nil {
		return ex.pebble, nil
	}
	b, err := newPebbleBackend(cfg)
	if err != nil {
		return nil, err
	}
	ex.pebble = b
	ex.obs.setStateStats(b.Usage)
	return b, nil
}

// newPebbleBackend makes a pebble backend in cfg's working directory.
func newPebbleBackend(cfg *stateConfig) (*pebblestate.Backend, error) {
	return pebblestate.NewBackend(cfg.workDir(), !cfg.dirSet, cfg.cacheSize)
}

// pebbleKeyed is one keyed operator subtask's pebble state.
type pebbleKeyed struct {
	store *pebblestate.Store
	be    *pebblestate.Backend
	// ownBackend: be is this subtask's alone (a task run without a job),
	// closed with it.
	ownBackend bool
	storage    checkpoint.Storage // nil: no checkpoints
	// instance prefixes the names of the files this DB stores, unique to
	// this opening of it, so that two attempts restored from one
	// checkpoint never store different files under one name.
	instance string
	ids      map[string]pebblestate.StateID
	nextID   uint16
	// stored maps the DB's immutable files to where checkpoint storage
	// has them (what was restored and what snapshots uploaded); read and
	// written by the snapshot encoder, one at a time.
	stored     map[string]checkpoint.FileHandle
	maxPar     int
	kgLo, kgHi int // the key groups this subtask owns, inclusive
	snapSeq    int
	// listGen and listSeq make the user keys of list elements
	// (pebbleListState): the restored checkpoint's id, and the appends
	// since the DB opened.
	listGen      uint64
	listSeq      uint64
	snap         *pebblestate.Snapshot
	snapDir      string
	lastSnapshot pebbleSnapshotInfo
}

// pebbleSnapshotInfo is what the last snapshot wrote, for the status.
type pebbleSnapshotInfo struct {
	files, newFiles int
	bytes, newBytes int64
}

func newInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// declareID returns the id of state name of the kind, declared with
// codecs (defaults: the codecs of its types without serdes), refusing a
// state restored with other codecs.
func (pk *pebbleKeyed) declareID(name string, kind byte, codecs, defaults string) (uint16, error) {
	_, restored := pk.ids[name]
	id, err := pk.stateID(name, kind)
	if err != nil {
		return 0, err
	}
	s := pk.ids[name]
	switch was := s.Codecs; {
	case restored && was == "" && codecs != defaults:
		return 0, &unrecoverableError{Err: fmt.Errorf("state %q was checkpointed with the default serdes of its types, before serdes were recorded, and is now declared with %s; restore it with the serdes that wrote it, or rename the state", name, describeCodecs(codecs))}
	case was != "" && was != codecs && statecodec.TTLChanged(strings.Contains(was, statecodec.TTLSerdePrefix), strings.Contains(codecs, statecodec.TTLSerdePrefix)) != "":
		return 0, &unrecoverableError{Err: fmt.Errorf("state %q was checkpointed with %s and is now declared with %s%s", name, describeCodecs(was), describeCodecs(codecs),
			statecodec.TTLChanged(strings.Contains(was, statecodec.TTLSerdePrefix), strings.Contains(codecs, statecodec.TTLSerdePrefix)))}
	case was != "" && was != codecs:
		return 0, &unrecoverableError{Err: fmt.Errorf("state %q was checkpointed with %s and is now declared with %s; restore it with the serdes that wrote it, or rename the state", name, describeCodecs(was), describeCodecs(codecs))}
	}
	s.Codecs = codecs
	pk.ids[name] = s
	return id, nil
}

// describeCodecs reads a state's codecs for an error.
func describeCodecs(codecs string) string {
	b := []byte(codecs)
	var out []string
	for len(b) > 0 {
		id, name := b[0], ""
		b = b[1:]
		if id == statecodec.IDUser {
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				break
			}
			name, b = string(b[n:n+int(l)]), b[n+int(l):]
		}
		out = append(out, statecodec.Label(id, name))
	}
	return strings.Join(out, " and ")
}

// stateID returns the id of state name of the kind, assigning one.
func (pk *pebbleKeyed) stateID(name string, kind byte) (uint16, error) {
	if s, ok := pk.ids[name]; ok {
		if s.Kind != kind {
			return 0, errKindChanged(name)
		}
		return s.ID, nil
	}
	if pk.nextID == 0xffff {
		return 0, &unrecoverableError{Err: fmt.Errorf("state %q: too many states in one operator", name)}
	}
	pk.nextID++
	pk.ids[name] = pebblestate.StateID{ID: pk.nextID, Kind: kind}
	return pk.nextID, nil
}

// Key encoding of the current key, made when a pebble state first needs
// it after setKey.

func (ks *keyedState[K]) pebbleKey() ([]byte, error) {
	if !ks.pbKeyOK {
		b, err := ks.pbKeys.append(ks.pbKeyBuf[:0], ks.key)
		if err != nil {
			return nil, fmt.Errorf("encode key: %w", err)
		}
		ks.pbKeyBuf, ks.pbKeyOK = b, true
	}
	return ks.pbKeyBuf, nil
}

// fail records the first error of a state access whose signature has no
// error; the operator returns it after the call.
func (ks *keyedCommon) fail(err error) {
	if ks.err == nil {
		ks.err = err
	}
}

// failDecode records a value read from the pebble backend that its serde
// cannot decode, and fails the job without restarts: the bytes come from
// the checkpoint every restart restores, so each restart would read them
// again, for ever under the default restart strategy. (The heap backend
// decodes every value at the restore, where a failure is unrecoverable
// too.)
func (ks *keyedCommon) failDecode(err error) { ks.fail(&unrecoverableError{Err: err}) }

// keyBytes is how the pebble backend writes a key or map key. The DB finds
// a key by its bytes, so equal keys must have equal bytes in every
// process: the built-in codecs (with a float's -0 written as +0, the key
// Go's maps take it for), or the type's own MarshalBinary. Gob is not: its
// bytes carry type ids that depend on what the process encoded first, so
// a key restored in another process would not be found again.
type keyBytes[T any] struct {
	c statecodec.Codec[T]
	// floatKind: T is a float kind, whose -0 is made +0.
	floatKind bool
	// boxed, for the key view of descriptors (viewBoxed, T being any), is
	// the key type's own encoding.
	boxed boxedKeyBytes
}

// boxedKeyBytes is a key type's encoding, given and taking its values as
// any.
type boxedKeyBytes interface {
	appendKey(dst []byte, v any) ([]byte, error)
	readKey(b []byte) (any, error)
}

// boxedKeys is the boxedKeyBytes of key type K.
type boxedKeys[K any] struct{ k keyBytes[K] }

func (b boxedKeys[K]) appendKey(dst []byte, v any) ([]byte, error) { return b.k.append(dst, v.(K)) }
func (b boxedKeys[K]) readKey(data []byte) (any, error)            { return b.k.read(data) }

var (
	binaryMarshalerType   = reflect.TypeFor[encoding.BinaryMarshaler]()
	binaryUnmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
)

// keyBytesFor chooses T's key encoding, or says why T cannot be a key of
// the pebble backend (what names its role).
func keyBytesFor[T any](what string) (keyBytes[T], error) {
	return keyBytesOf(statecodec.For[T](), what)
}

// keyBytesOf is keyBytesFor with T's codec c, which may be a serde given
// with the state.
func keyBytesOf[T any](c statecodec.Codec[T], what string) (keyBytes[T], error) {
	t := reflect.TypeFor[T]()
	if c.Bin != nil {
		return keyBytes[T]{c: c, floatKind: t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64}, nil
	}
	if c.Ext != nil {
		return keyBytes[T]{c: c}, nil // the serde's promise: equal keys, equal bytes
	}
	if (t.Implements(binaryMarshalerType) || reflect.PointerTo(t).Implements(binaryMarshalerType)) &&
		reflect.PointerTo(t).Implements(binaryUnmarshalerType) {
		return keyBytes[T]{c: c}, nil
	}
	return keyBytes[T]{}, &unrecoverableError{Err: fmt.Errorf("%s %s cannot be a key of the pebble state backend: it finds keys by their bytes, and a type without a binary encoding of its own is written with encoding/gob, whose bytes differ between processes; use a string, []byte, integer, float or bool key (or a named type over one), or implement encoding.BinaryMarshaler and BinaryUnmarshaler on the type", what, t)}
}

func (k keyBytes[T]) append(dst []byte, v T) ([]byte, error) {
	if k.boxed != nil {
		return k.boxed.appendKey(dst, any(v))
	}
	if k.c.Ext != nil {
		return k.c.Ext.Append(dst, v)
	}
	if k.c.Bin != nil {
		if k.floatKind {
			rv := reflect.ValueOf(&v).Elem()
			if rv.Float() == 0 {
				rv.SetFloat(0) // -0 is +0
			}
		}
		return k.c.Bin.AppendValue(dst, v), nil
	}
	var m encoding.BinaryMarshaler
	if bm, ok := any(v).(encoding.BinaryMarshaler); ok {
		m = bm
	} else {
		m = any(&v).(encoding.BinaryMarshaler)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

func (k keyBytes[T]) read(b []byte) (T, error) {
	if k.boxed != nil {
		a, err := k.boxed.readKey(b)
		v, _ := a.(T)
		return v, err
	}
	if k.c.Ext != nil {
		return k.c.Ext.Decode(b)
	}
	if k.c.Bin != nil {
		return statecodec.ReadOne(b, k.c)
	}
	var v T
	err := any(&v).(encoding.BinaryUnmarshaler).UnmarshalBinary(b)
	return v, err
}

type pebbleValueState[K comparable, V any] struct {
	ks   *keyedState[K]
	pk   *pebbleKeyed
	name string
	id   uint16
	vals statecodec.Codec[V]
	buf  []byte
}

func (s *pebbleValueState[K, V]) kind() byte { return stateKindValue }

func (s *pebbleValueState[K, V]) key() ([]byte, bool) {
	kb, err := s.ks.pebbleKey()
	if err != nil {
		s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
		return nil, false
	}
	s.buf = append(pebblestate.AppendKeyPrefix(s.buf[:0], s.ks.groupOf(s.ks.key), s.id), kb...)
	return s.buf, true
}

func (s *pebbleValueState[K, V]) Value() (V, bool) {
	k, ok := s.key()
	if !ok {
		var zero V
		return zero, false
	}
	b, ok, err := s.pk.store.Get(k)
	return decodeFound(s.ks, s.name, "value", s.vals, b, ok, err)
}

// decodeFound is a state read's answer: the value decoded from b when
// found, the zero value otherwise; an error fails the call (ks.fail).
func decodeFound[K comparable, T any](ks *keyedState[K], name, what string, c statecodec.Codec[T], b []byte, found bool, err error) (T, bool) {
	var zero T
	if err != nil {
		ks.fail(fmt.Errorf("state %q: %w", name, err))
		return zero, false
	}
	if !found {
		return zero, false
	}
	v, err := statecodec.ReadOne(b, c)
	if err != nil {
		ks.failDecode(fmt.Errorf("state %q: decode %s: %w", name, what, err))
		return zero, false
	}
	return v, true
}

func (s *pebbleValueState[K, V]) Update(v V) {
	k, ok := s.key()
	if !ok {
		return
	}
	b, err := statecodec.AppendOne(nil, s.vals, v)
	if err == nil {
		err = s.pk.store.Put(k, b)
	}
	if err != nil {
		s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
	}
}

func (s *pebbleValueState[K, V]) Clear() {
	if k, ok := s.key(); ok {
		if err := s.pk.store.Delete(k); err != nil {
			s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

// importHeap loads restored heap entries (a checkpoint of the heap
// backend) into the DB.
func (s *pebbleValueState[K, V]) importHeap(entries []stateEntry) error {
	h := newValueState[K, V](s.ks, s.name, s.vals)
	if err := restoreEntries(h, entries); err != nil {
		return err
	}
	saved := s.ks.key
	defer s.ks.setKey(saved)
	for _, m := range h.m {
		for k, v := range m {
			s.ks.setKey(k)
			s.Update(v)
			if s.ks.err != nil {
				return s.ks.err
			}
		}
	}
	return nil
}

type pebbleMapState[K, UK comparable, UV any] struct {
	ks     *keyedState[K]
	pk     *pebbleKeyed
	name   string
	id     uint16
	ukeys  keyBytes[UK]
	uvals  statecodec.Codec[UV]
	prefix []byte
	ub     []byte
}

func (s *pebbleMapState[K, UK, UV]) kind() byte { return stateKindMap }

func (s *pebbleMapState[K, UK, UV]) pfx() ([]byte, bool) {
	kb, err := s.ks.pebbleKey()
	if err != nil {
		s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
		return nil, false
	}
	p := pebblestate.AppendKeyPrefix(s.prefix[:0], s.ks.groupOf(s.ks.key), s.id)
	p = binary.AppendUvarint(p, uint64(len(kb)))
	s.prefix = append(p, kb...)
	return s.prefix, true
}

func (s *pebbleMapState[K, UK, UV]) userKey(k UK) ([]byte, bool) {
	b, err := s.ukeys.append(s.ub[:0], k)
	if err != nil {
		s.ks.fail(fmt.Errorf("state %q: encode map key: %w", s.name, err))
		return nil, false
	}
	s.ub = b
	return b, true
}

func (s *pebbleMapState[K, UK, UV]) Get(k UK) (UV, bool) {
	var zero UV
	p, ok := s.pfx()
	if !ok {
		return zero, false
	}
	uk, ok := s.userKey(k)
	if !ok {
		return zero, false
	}
	b, ok, err := s.pk.store.MapGet(p, uk)
	return decodeFound(s.ks, s.name, "map value", s.uvals, b, ok, err)
}

func (s *pebbleMapState[K, UK, UV]) Put(k UK, v UV) {
	p, ok := s.pfx()
	if !ok {
		return
	}
	uk, ok := s.userKey(k)
	if !ok {
		return
	}
	b, err := statecodec.AppendOne(nil, s.uvals, v)
	if err == nil {
		err = s.pk.store.MapPut(p, uk, b)
	}
	if err != nil {
		s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
	}
}

func (s *pebbleMapState[K, UK, UV]) Remove(k UK) {
	p, ok := s.pfx()
	if !ok {
		return
	}
	uk, ok := s.userKey(k)
	if !ok {
		return
	}
	if err := s.pk.store.MapDelete(p, uk); err != nil {
		s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
	}
}

func (s *pebbleMapState[K, UK, UV]) Contains(k UK) bool { _, ok := s.Get(k); return ok }

func (s *pebbleMapState[K, UK, UV]) Len() int {
	n := 0
	for range s.All() {
		n++
	}
	return n
}

func (s *pebbleMapState[K, UK, UV]) Clear() {
	if p, ok := s.pfx(); ok {
		if err := s.pk.store.MapClear(p); err != nil {
			s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

func (s *pebbleMapState[K, UK, UV]) All() iter.Seq2[UK, UV] {
	p, ok := s.pfx()
	if !ok {
		return func(func(UK, UV) bool) {}
	}
	p = bytes.Clone(p)
	return func(yield func(UK, UV) bool) {
		err := s.pk.store.MapScan(p, func(ub, vb []byte) bool {
			k, err := s.ukeys.read(ub)
			if err != nil {
				s.ks.failDecode(fmt.Errorf("state %q: decode map key: %w", s.name, err))
				return false
			}
			v, err := statecodec.ReadOne(vb, s.uvals)
			if err != nil {
				s.ks.failDecode(fmt.Errorf("state %q: decode map value: %w", s.name, err))
				return false
			}
			return yield(k, v)
		})
		if err != nil {
			s.ks.fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

func (s *pebbleMapState[K, UK, UV]) importHeap(entries []stateEntry) error {
	h := newMapState[K, UK, UV](s.ks, s.name, s.ukeys.c, s.uvals)
	if err := restoreEntries(h, entries); err != nil {
		return err
	}
	saved := s.ks.key
	defer s.ks.setKey(saved)
	for _, gm := range h.m {
		for k, in := range gm {
			s.ks.setKey(k)
			for uk, uv := range in.m {
				s.Put(uk, uv)
			}
			if s.ks.err != nil {
				return s.ks.err
			}
		}
	}
	return nil
}

// restoreEntries restores a heap checkpoint's entries into h, a heap
// state the pebble state then copies from.
func restoreEntries(h snapshotableState, entries []stateEntry) error {
	for _, e := range entries {
		if err := h.restore(e.format, e.data); err != nil {
			return fmt.Errorf("key group %d: %w", e.keyGroup, err)
		}
	}
	return nil
}

// heapImporter is a pebble state that takes a heap checkpoint's entries.
type heapImporter interface {
	kind() byte
	importHeap(entries []stateEntry) error
}

// createPebble registers a pebble state and loads what a heap checkpoint
// restored for it.
func (ks *keyedState[K]) createPebble(name string, s heapImporter, shape statecodec.DeclaredShape) error {
	entries, err := ks.claim(name, s, s.kind(), shape)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		if err := s.importHeap(entries); err != nil {
			return &unrecoverableError{Err: fmt.Errorf("restore state %q from a heap checkpoint: %w", name, err)}
		}
	}
	return nil
}

func newPebbleValueState[K comparable, V any](ks *keyedState[K], name string, vals statecodec.Codec[V]) (*pebbleValueState[K, V], error) {
	if ks.pbKeysErr != nil {
		return nil, ks.pbKeysErr
	}
	id, err := ks.pb.declareID(name, stateKindValue, vals.Desc(), statecodec.For[V]().Desc())
	if err != nil {
		return nil, err
	}
	return &pebbleValueState[K, V]{ks: ks, pk: ks.pb, name: name, id: id, vals: vals}, nil
}

func newPebbleMapState[K, UK comparable, UV any](ks *keyedState[K], name string, ukc statecodec.Codec[UK], uvals statecodec.Codec[UV]) (*pebbleMapState[K, UK, UV], error) {
	if ks.pbKeysErr != nil {
		return nil, ks.pbKeysErr
	}
	ukeys, err := keyBytesOf(ukc, fmt.Sprintf("map key type of state %q,", name))
	if err != nil {
		return nil, err
	}
	id, err := ks.pb.declareID(name, stateKindMap, ukc.Desc()+uvals.Desc(), statecodec.For[UK]().Desc()+statecodec.For[UV]().Desc())
	if err != nil {
		return nil, err
	}
	return &pebbleMapState[K, UK, UV]{ks: ks, pk: ks.pb, name: name, id: id, ukeys: ukeys, uvals: uvals}, nil
}
