package keyed

import (
	"bytes"
	"crypto/rand"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
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
// (runtime/internal/timers) as
//
//	timer:     keyGroup(2) 0x0000 domain(1) timestamp(8, big-endian, sign bit flipped) key
//
// with an empty value, so that a key group's timers are contiguous and in
// time order. The blob of a subtask's checkpoint is pebblestate.Blob.

// Pebble is one keyed operator subtask's pebble state.
type Pebble struct {
	Store   *pebblestate.Store
	Backend *pebblestate.Backend
	// ownBackend: be is this subtask's alone (a task run without a job),
	// closed with it.
	ownBackend bool
	Storage    checkpoint.Storage // nil: no checkpoints
	// uid and subtask name the DB's directory.
	uid     string
	subtask int
	// instance prefixes the names of the files this DB stores, unique to
	// this opening of it, so that two attempts restored from one
	// checkpoint never store different files under one name.
	instance string
	IDs      map[string]pebblestate.StateID
	nextID   uint16
	// Stored maps the DB's immutable files to where checkpoint storage
	// has them (what was restored and what snapshots uploaded); read and
	// written by the snapshot encoder, one at a time.
	Stored     map[string]checkpoint.FileHandle
	maxPar     int
	KGLo, KGHi int // the key groups this subtask owns, inclusive
	snapSeq    int
	// listGen and listSeq make the user keys of list elements
	// (pebbleListState): the restored checkpoint's id, and the appends
	// since the DB opened.
	listGen uint64
	listSeq uint64
	// mat is the newest snapshot's background materialization (see
	// Freeze), nil before the first; abandon, set, makes them store no
	// more files (the task is ending).
	mat     *matJob
	abandon atomic.Bool
	// prevRefs are the stored names of the files the last encoded
	// snapshot used (or the restored checkpoint did), for
	// SnapshotInfo.NewFiles.
	prevRefs     map[string]bool
	LastSnapshot SnapshotInfo
}

// NewPebble prepares the pebble state of subtask subtask of the
// keyed operator uid, at parallelism par of maxPar, in backend be (its
// own when ownBackend: closed with it), with checkpoints stored in
// storage (nil: none); restoredID is the id of the checkpoint it
// restores (-1: none). open opens its DB.
func NewPebble(be *pebblestate.Backend, ownBackend bool, storage checkpoint.Storage, uid string, subtask, par, maxPar int, restoredID int64) *Pebble {
	pk := &Pebble{Backend: be, ownBackend: ownBackend, Storage: storage, uid: uid, subtask: subtask, instance: newInstanceID(),
		IDs: map[string]pebblestate.StateID{}, Stored: map[string]checkpoint.FileHandle{}, prevRefs: map[string]bool{}, maxPar: maxPar, listGen: uint64(max(restoredID, 0))}
	pk.KGLo, pk.KGHi = keygroup.Range(subtask, par, maxPar)
	return pk
}

// Close closes the DB, and the backend when it is the subtask's own.
func (pk *Pebble) Close() error {
	var err error
	pk.waitMaterialized()
	if pk.Store != nil {
		pk.Backend.Closed(pk.Store)
		err = pk.Store.Close()
	}
	if pk.ownBackend {
		err = errors.Join(err, pk.Backend.Close())
	}
	return err
}

// SnapshotInfo is what the last snapshot's blob refers to, for the
// status: its files, and those of them the snapshot before did not refer
// to (stored since, by its own materialization or the one before).
type SnapshotInfo struct {
	Files, NewFiles int
	Bytes, NewBytes int64
}

func newInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// declareID returns the id of state name of the kind, declared with
// codecs (defaults: the codecs of its types without serdes), refusing a
// state restored with other codecs.
func (pk *Pebble) declareID(name string, kind byte, codecs, defaults string) (uint16, error) {
	_, restored := pk.IDs[name]
	id, err := pk.stateID(name, kind)
	if err != nil {
		return 0, err
	}
	s := pk.IDs[name]
	switch was := s.Codecs; {
	case restored && was == "" && codecs != defaults:
		return 0, &engine.UnrecoverableError{Err: fmt.Errorf("state %q was checkpointed with the default serdes of its types, before serdes were recorded, and is now declared with %s; restore it with the serdes that wrote it, or rename the state", name, describeCodecs(codecs))}
	case was != "" && was != codecs && statecodec.TTLChanged(strings.Contains(was, statecodec.TTLSerdePrefix), strings.Contains(codecs, statecodec.TTLSerdePrefix)) != "":
		return 0, &engine.UnrecoverableError{Err: fmt.Errorf("state %q was checkpointed with %s and is now declared with %s%s", name, describeCodecs(was), describeCodecs(codecs),
			statecodec.TTLChanged(strings.Contains(was, statecodec.TTLSerdePrefix), strings.Contains(codecs, statecodec.TTLSerdePrefix)))}
	case was != "" && was != codecs:
		return 0, &engine.UnrecoverableError{Err: fmt.Errorf("state %q was checkpointed with %s and is now declared with %s; restore it with the serdes that wrote it, or rename the state", name, describeCodecs(was), describeCodecs(codecs))}
	}
	s.Codecs = codecs
	pk.IDs[name] = s
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
func (pk *Pebble) stateID(name string, kind byte) (uint16, error) {
	if s, ok := pk.IDs[name]; ok {
		if s.Kind != kind {
			return 0, errKindChanged(name)
		}
		return s.ID, nil
	}
	if pk.nextID == 0xffff {
		return 0, &engine.UnrecoverableError{Err: fmt.Errorf("state %q: too many states in one operator", name)}
	}
	pk.nextID++
	pk.IDs[name] = pebblestate.StateID{ID: pk.nextID, Kind: kind}
	return pk.nextID, nil
}

// Key encoding of the current key, made when a pebble state first needs
// it after setKey.

func (ks *State[K]) pebbleKey() ([]byte, error) {
	if !ks.pbKeyOK {
		b, err := ks.PebbleKeys.Append(ks.pbKeyBuf[:0], ks.Key)
		if err != nil {
			return nil, fmt.Errorf("encode key: %w", err)
		}
		ks.pbKeyBuf, ks.pbKeyOK = b, true
	}
	return ks.pbKeyBuf, nil
}

// Fail records the first error of a state access whose signature has no
// error; the operator returns it after the call.
func (ks *Common) Fail(err error) {
	if ks.Err == nil {
		ks.Err = err
	}
}

// FailDecode records a value read from the pebble backend that its serde
// cannot decode, and fails the job without restarts: the bytes come from
// the checkpoint every restart restores, so each restart would read them
// again, for ever under the default restart strategy. (The heap backend
// decodes every value at the restore, where a failure is unrecoverable
// too.)
func (ks *Common) FailDecode(err error) { ks.Fail(&engine.UnrecoverableError{Err: err}) }

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

func (b boxedKeys[K]) appendKey(dst []byte, v any) ([]byte, error) { return b.k.Append(dst, v.(K)) }
func (b boxedKeys[K]) readKey(data []byte) (any, error)            { return b.k.Read(data) }

var (
	binaryMarshalerType   = reflect.TypeFor[encoding.BinaryMarshaler]()
	binaryUnmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
)

// KeyBytesFor chooses T's key encoding, or says why T cannot be a key of
// the pebble backend (what names its role).
func KeyBytesFor[T any](what string) (keyBytes[T], error) {
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
	return keyBytes[T]{}, &engine.UnrecoverableError{Err: fmt.Errorf("%s %s cannot be a key of the pebble state backend: it finds keys by their bytes, and a type without a binary encoding of its own is written with encoding/gob, whose bytes differ between processes; use a string, []byte, integer, float or bool key (or a named type over one), or implement encoding.BinaryMarshaler and BinaryUnmarshaler on the type", what, t)}
}

func (k keyBytes[T]) Append(dst []byte, v T) ([]byte, error) {
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

func (k keyBytes[T]) Read(b []byte) (T, error) {
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
	ks   *State[K]
	pk   *Pebble
	name string
	id   uint16
	vals statecodec.Codec[V]
	buf  []byte
}

func (s *pebbleValueState[K, V]) kind() byte { return stateKindValue }

func (s *pebbleValueState[K, V]) key() ([]byte, bool) {
	kb, err := s.ks.pebbleKey()
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		return nil, false
	}
	s.buf = append(pebblestate.AppendKeyPrefix(s.buf[:0], s.ks.GroupOf(s.ks.Key), s.id), kb...)
	return s.buf, true
}

func (s *pebbleValueState[K, V]) Value() (V, bool) {
	k, ok := s.key()
	if !ok {
		var zero V
		return zero, false
	}
	b, ok, err := s.pk.Store.Get(k)
	return decodeFound(s.ks, s.name, "value", s.vals, b, ok, err)
}

// decodeFound is a state read's answer: the value decoded from b when
// found, the zero value otherwise; an error fails the call (ks.fail).
func decodeFound[K comparable, T any](ks *State[K], name, what string, c statecodec.Codec[T], b []byte, found bool, err error) (T, bool) {
	var zero T
	if err != nil {
		ks.Fail(fmt.Errorf("state %q: %w", name, err))
		return zero, false
	}
	if !found {
		return zero, false
	}
	v, err := statecodec.ReadOne(b, c)
	if err != nil {
		ks.FailDecode(fmt.Errorf("state %q: decode %s: %w", name, what, err))
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
		err = s.pk.Store.Put(k, b)
	}
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
	}
}

func (s *pebbleValueState[K, V]) Clear() {
	if k, ok := s.key(); ok {
		if err := s.pk.Store.Delete(k); err != nil {
			s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

// importHeap loads restored heap entries (a checkpoint of the heap
// backend) into the DB.
func (s *pebbleValueState[K, V]) importHeap(entries []Entry) error {
	h := newValueState[K, V](s.ks, s.name, s.vals)
	if err := restoreEntries(h, entries); err != nil {
		return err
	}
	saved := s.ks.Key
	defer s.ks.SetKey(saved)
	for _, m := range h.m {
		for k, v := range m {
			s.ks.SetKey(k)
			s.Update(v)
			if s.ks.Err != nil {
				return s.ks.Err
			}
		}
	}
	return nil
}

type pebbleMapState[K, UK comparable, UV any] struct {
	ks     *State[K]
	pk     *Pebble
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
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		return nil, false
	}
	p := pebblestate.AppendKeyPrefix(s.prefix[:0], s.ks.GroupOf(s.ks.Key), s.id)
	p = binary.AppendUvarint(p, uint64(len(kb)))
	s.prefix = append(p, kb...)
	return s.prefix, true
}

func (s *pebbleMapState[K, UK, UV]) userKey(k UK) ([]byte, bool) {
	b, err := s.ukeys.Append(s.ub[:0], k)
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: encode map key: %w", s.name, err))
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
	b, ok, err := s.pk.Store.MapGet(p, uk)
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
		err = s.pk.Store.MapPut(p, uk, b)
	}
	if err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
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
	if err := s.pk.Store.MapDelete(p, uk); err != nil {
		s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
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
		if err := s.pk.Store.MapClear(p); err != nil {
			s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
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
		err := s.pk.Store.MapScan(p, func(ub, vb []byte) bool {
			k, err := s.ukeys.Read(ub)
			if err != nil {
				s.ks.FailDecode(fmt.Errorf("state %q: decode map key: %w", s.name, err))
				return false
			}
			v, err := statecodec.ReadOne(vb, s.uvals)
			if err != nil {
				s.ks.FailDecode(fmt.Errorf("state %q: decode map value: %w", s.name, err))
				return false
			}
			return yield(k, v)
		})
		if err != nil {
			s.ks.Fail(fmt.Errorf("state %q: %w", s.name, err))
		}
	}
}

func (s *pebbleMapState[K, UK, UV]) importHeap(entries []Entry) error {
	h := newMapState[K, UK, UV](s.ks, s.name, s.ukeys.c, s.uvals)
	if err := restoreEntries(h, entries); err != nil {
		return err
	}
	saved := s.ks.Key
	defer s.ks.SetKey(saved)
	for _, gm := range h.m {
		for k, in := range gm {
			s.ks.SetKey(k)
			for uk, uv := range in.m {
				s.Put(uk, uv)
			}
			if s.ks.Err != nil {
				return s.ks.Err
			}
		}
	}
	return nil
}

// restoreEntries restores a heap checkpoint's entries into h, a heap
// state the pebble state then copies from.
func restoreEntries(h snapshotableState, entries []Entry) error {
	for _, e := range entries {
		if err := h.restore(e.Format, e.Data); err != nil {
			return fmt.Errorf("key group %d: %w", e.KeyGroup, err)
		}
	}
	return nil
}

// heapImporter is a pebble state that takes a heap checkpoint's entries.
type heapImporter interface {
	kind() byte
	importHeap(entries []Entry) error
}

// createPebble registers a pebble state and loads what a heap checkpoint
// restored for it.
func (ks *State[K]) createPebble(name string, s heapImporter, shape statecodec.DeclaredShape) error {
	entries, err := ks.claim(name, s, s.kind(), shape)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		if err := s.importHeap(entries); err != nil {
			return &engine.UnrecoverableError{Err: fmt.Errorf("restore state %q from a heap checkpoint: %w", name, err)}
		}
	}
	return nil
}

func newPebbleValueState[K comparable, V any](ks *State[K], name string, vals statecodec.Codec[V]) (*pebbleValueState[K, V], error) {
	if ks.PebbleKeysErr != nil {
		return nil, ks.PebbleKeysErr
	}
	id, err := ks.Pebble.declareID(name, stateKindValue, vals.Desc(), statecodec.For[V]().Desc())
	if err != nil {
		return nil, err
	}
	return &pebbleValueState[K, V]{ks: ks, pk: ks.Pebble, name: name, id: id, vals: vals}, nil
}

func newPebbleMapState[K, UK comparable, UV any](ks *State[K], name string, ukc statecodec.Codec[UK], uvals statecodec.Codec[UV]) (*pebbleMapState[K, UK, UV], error) {
	if ks.PebbleKeysErr != nil {
		return nil, ks.PebbleKeysErr
	}
	ukeys, err := keyBytesOf(ukc, fmt.Sprintf("map key type of state %q,", name))
	if err != nil {
		return nil, err
	}
	id, err := ks.Pebble.declareID(name, stateKindMap, ukc.Desc()+uvals.Desc(), statecodec.For[UK]().Desc()+statecodec.For[UV]().Desc())
	if err != nil {
		return nil, err
	}
	return &pebbleMapState[K, UK, UV]{ks: ks, pk: ks.Pebble, name: name, id: id, ukeys: ukeys, uvals: uvals}, nil
}

// TimerStateID is the timers' state id in the pebble key layout; state
// ids of value and map states start at 1.
const TimerStateID = 0
