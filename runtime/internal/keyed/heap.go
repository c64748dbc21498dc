package keyed

import (
	"fmt"
	"iter"
	"maps"
	"reflect"
	"sync/atomic"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// State is the keyed state of one operator subtask: the current key
// and its key group, and the named states, each a map by key split into
// one map per key group. State lives on the task goroutine only.
// Snapshots write entries by key group (see keyedstate.go) so that they
// can be redistributed on rescaling.
//
// A snapshot freezes the state on the task goroutine and encodes it on
// another (copy-on-write, as Flink's CopyOnWriteStateMap, at the grain of
// slots: every key group is split into slotsPerKeyGroup maps by the key's
// hash, so that a copy costs a small share of the state): freezing starts
// a new epoch and hands the encoder the slot maps as they are; every map
// remembers the epoch it was made in, and a write to one made before the
// frozen epoch copies it first, so the encoder reads maps nobody writes
// again. Thawing, once the encoder is done, ends the copying.
type State[K comparable] struct {
	// keyedCommon is what does not depend on the key type, shared with
	// the canonical view of this state that descriptors use (see
	// canonicalState).
	*Common
	Key  K
	Slot int // slot of key
	// GroupOf is the key group of a key, of groups (the max parallelism);
	// slotOf its slot, of groups*slotsPerKeyGroup, the slots of key group
	// g being g*slotsPerKeyGroup and up; keys is the key type's codec in
	// snapshots.
	GroupOf func(K) int
	slotOf  func(K) int
	groups  int
	Keys    statecodec.Codec[K]
	// keyT is the stream's key type when it is not K: in the view over
	// any that descriptors use for a key type not of a basic kind
	// (viewBoxed). The type checks and errors name it.
	keyT reflect.Type

	// PebbleKeys is the pebble backend's key encoding; pbKeyBuf the current
	// key's encoding once pbKeyOK.
	PebbleKeys    keyBytes[K]
	PebbleKeysErr error
	pbKeyBuf      []byte
	pbKeyOK       bool

	// canon is the canonical view (a *keyedState[C], C the basic type
	// under K), made on a descriptor's first use, or why there is none;
	// follow keeps its current key with this one's.
	canon    any
	canonErr error
	follow   func(k K, slot int)
}

// Init makes ks the empty keyed state of an operator subtask whose keys
// hash by hash, with maxPar key groups and processing time by clock (nil:
// the wall clock).
func (ks *State[K]) Init(hash func(K) uint32, maxPar int, clock func() int64) {
	ks.Common = &Common{States: map[string]any{}, decls: map[string]string{}, Clock: clock}
	ks.groups, ks.Keys = maxPar, statecodec.For[K]()
	ks.GroupOf = func(k K) int { return keygroup.ForHash(hash(k), maxPar) }
	ks.slotOf = func(k K) int {
		h := hash(k)
		return keygroup.ForHash(h, maxPar)*slotsPerKeyGroup + int(h/uint32(maxPar)%slotsPerKeyGroup)
	}
}

// UsePebble puts ks's states in pk's DB. It returns why K cannot be a key
// of the pebble backend, if it cannot: the states declared then fail
// with that error.
func (ks *State[K]) UsePebble(pk *Pebble) error {
	ks.Pebble = pk
	ks.PebbleKeys, ks.PebbleKeysErr = KeyBytesFor[K]("key type")
	return ks.PebbleKeysErr
}

// Part is one state's part of a heap snapshot: its encoder of entries
// by key group (snapshotableState.freeze) and its shape record.
type Part struct {
	Name  string
	Kind  byte
	shape []byte
	Enc   func(stop func() bool) (map[int][]byte, error)
}

// Freeze is the part of a heap snapshot on the task goroutine: it
// freezes the epoch and returns every state's part and the restored
// entries no state has claimed yet, which the snapshot carries as they
// are. Its cost follows the number of key groups and states, not the
// number of keys; the encoders may run on another goroutine until thaw.
func (ks *State[K]) Freeze() ([]Part, []Entry) {
	ks.Epoch++
	ks.Frozen = ks.Epoch
	var parts []Part
	for name, st := range ks.States {
		if s, ok := st.(snapshotableState); ok {
			parts = append(parts, Part{name, s.kind(), ks.shapes[name], s.freeze()})
		}
	}
	var carried []Entry
	for _, es := range ks.Restored {
		carried = append(carried, es...) // never changed after the restore
	}
	return parts, carried
}

// EncodeParts runs the encoders of parts and writes their entries, with
// carried, as one keyed state blob.
func EncodeParts(parts []Part, carried []Entry, stop func() bool) ([]byte, error) {
	entries := carried
	for _, pt := range parts {
		groups, err := pt.Enc(stop)
		if err != nil {
			return nil, fmt.Errorf("snapshot state %q: %w", pt.Name, err)
		}
		for g, data := range groups {
			entries = append(entries, Entry{Name: pt.Name, Kind: pt.Kind, Format: formatColumns, KeyGroup: g, Data: data})
		}
		entries = append(entries, shapeEntries(pt.Name, pt.shape, groups)...)
	}
	return EncodeEntries(entries), nil
}

// Thaw ends the snapshot freeze (or the pebble backend's) began: its
// encoder returned. A pebble snapshot needs nothing here: its store drops
// the frozen buffer by itself once its background materialization has
// applied it (Pebble.Freeze).
func (ks *State[K]) Thaw() {
	ks.Frozen = 0
	for _, st := range ks.States {
		if t, ok := st.(interface{ thaw() }); ok {
			t.thaw()
		}
	}
}

// Common is the part of an operator subtask's keyed state that does
// not depend on the key type.
type Common struct {
	// Epoch is the current Epoch; frozen the Epoch of the snapshot being
	// encoded, 0 for none: a map of an Epoch below frozen is read by the
	// encoder.
	Epoch  uint64
	Frozen uint64
	States map[string]any
	// decls says, per state name, how it was declared ("ValueState[int64]
	// (varint)"), for the error that refuses a second declaration of the
	// name with other types.
	decls map[string]string
	// handles are the states of descriptors, by descriptor id.
	handles []any
	// Restored holds, per state name, the Restored entries of the key
	// groups this subtask owns, until the function asks for the state
	// (its value type is known only then); a snapshot taken before that
	// writes them back unchanged.
	Restored map[string][]Entry
	// Pebble is the pebble backend's state, nil with the heap backend. err is
	// the first failure of a state access (pebblestate.go, descriptors),
	// returned after the function's call.
	Pebble *Pebble
	Err    error
	// Clock is the operator's processing time in milliseconds (the
	// job's, config.clock), for its context, its processing-time timers
	// and state TTL (ttl.go); nil for the wall clock.
	Clock func() int64
	// ttls says, per state name, the TTL of its first declaration
	// ("no TTL" for none), for the error that refuses another
	// (sameTTL); ttlStates holds the TTL handle of each state with one,
	// so that every declaration of it shares one clock and one cleanup.
	ttls      map[string]string
	ttlStates map[string]any
	// shapes holds, per declared state, the record of its types' shapes
	// its checkpoints write (statecodec.DeclaredShape); dropped the fields its
	// descriptor's AllowDroppedFields lets a restore drop.
	shapes  map[string][]byte
	dropped map[string][]string
}

// keyType is the stream's key type.
func (ks *State[K]) keyType() reflect.Type {
	if ks.keyT != nil {
		return ks.keyT
	}
	return typeOf[K]()
}

// slotsPerKeyGroup is how many maps a key group's state is split into.
const slotsPerKeyGroup = 16

func (ks *State[K]) slots() int { return ks.groups * slotsPerKeyGroup }

// SetKey makes k the current key.
func (ks *State[K]) SetKey(k K) {
	ks.Key, ks.Slot, ks.pbKeyOK = k, ks.slotOf(k), false
	if ks.follow != nil {
		ks.follow(k, ks.Slot)
	}
}

// claim registers state s of the kind, declared with shape, under name
// and takes what was restored for it, refusing entries of another kind
// and types that lost a field (statecodec.CheckShape).
func (ks *State[K]) claim(name string, s any, kind byte, shape statecodec.DeclaredShape) ([]Entry, error) {
	ks.States[name] = s
	entries := ks.Restored[name]
	delete(ks.Restored, name)
	for _, e := range entries {
		if e.Kind != kind && e.Kind != stateKindShape {
			return nil, errKindChanged(name)
		}
	}
	return ks.claimShape(name, entries, shape)
}

// errKindChanged refuses a restore whose state changed kind.
func errKindChanged(name string) error {
	return &engine.UnrecoverableError{Err: fmt.Errorf("state %q was checkpointed as another kind of state (a ValueState and a MapState share the name across versions of the job); rename one", name)}
}

// create registers a new state and merges what was restored for it.
func (ks *State[K]) create(name string, s snapshotableState, shape statecodec.DeclaredShape) error {
	entries, err := ks.claim(name, s, s.kind(), shape)
	if err != nil {
		return err
	}
	// A restore that fails here fails again from the same checkpoint:
	// no restart can mend it.
	for _, e := range entries {
		if err := s.restore(e.Format, e.Data); err != nil {
			return &engine.UnrecoverableError{Err: fmt.Errorf("restore state %q (key group %d): %w", name, e.KeyGroup, err)}
		}
	}
	return nil
}

// Value, Map and List are the states a declaration
// returns, of either backend: runtime/state's ValueState, MapState and
// ListState have the same methods.
type Value[V any] interface {
	Value() (V, bool)
	Update(v V)
	Clear()
}

type Map[UK comparable, UV any] interface {
	Get(k UK) (UV, bool)
	Put(k UK, v UV)
	Remove(k UK)
	Contains(k UK) bool
	Len() int
	All() iter.Seq2[UK, UV]
	Clear()
}

type List[T any] interface {
	Add(v T)
	AddAll(vs []T)
	Get() iter.Seq[T]
	Update(vs []T)
	Clear()
}

type HeapValue[K comparable, V any] struct {
	ks   *State[K]
	name string
	// m holds the values by slot; ep the epoch each map was made in.
	m    []map[K]V
	ep   []uint64
	vals statecodec.Codec[V]
	// read counts the slots the encoder of the frozen snapshot has
	// finished reading: it writes it, in order, once it is done with a key
	// group, and a write to a slot below it needs no copy.
	read atomic.Int64
	// deep is set when the function could change a value in place (a
	// slice, map or pointer inside V): copying a slot's map then shares
	// its values with the snapshot, so a value is copied too (cp, through
	// its codec) when the function first sees it after the freeze. own,
	// per slot copied from a frozen map in this epoch, holds the keys
	// whose values are the task's own; nil for a slot whose values all
	// are.
	deep bool
	own  []map[K]struct{}
	cp   statecodec.Copier[V]
	// keep, set for a state with TTL, is called at the freeze and returns
	// which values the snapshot keeps (ttl.go).
	keep func() func(V) bool
	// trim, set for a list state with TTL, is keep for values that
	// expire in parts: called at the freeze, it returns what the
	// snapshot writes of a value (a list without its expired elements,
	// never the value itself changed in place) and whether anything is
	// left.
	trim func() func(V) (V, bool)
}

func newValueState[K comparable, V any](ks *State[K], name string, vals statecodec.Codec[V]) *HeapValue[K, V] {
	s := &HeapValue[K, V]{ks: ks, name: name, m: make([]map[K]V, ks.slots()), ep: make([]uint64, ks.slots()), vals: vals,
		deep: !ValueSemantics[V](), cp: statecodec.Copier[V]{Codec: vals}}
	if s.deep {
		s.own = make([]map[K]struct{}, ks.slots())
	}
	return s
}

func (s *HeapValue[K, V]) Value() (V, bool) {
	g, k := s.ks.Slot, s.ks.Key
	v, ok := s.m[g][k]
	if ok && s.deep && s.sharedValue(g, k) {
		c, err := s.cp.Copy(v)
		if err != nil {
			s.ks.Fail(fmt.Errorf("state %q: copy a value the running snapshot holds: %w", s.name, err))
			return v, ok
		}
		s.writable(g)[k] = c
		if o := s.own[g]; o != nil {
			o[k] = struct{}{}
		}
		v = c
	}
	return v, ok
}

func (s *HeapValue[K, V]) Update(v V) {
	g := s.ks.Slot
	s.writable(g)[s.ks.Key] = v
	if s.deep {
		if o := s.own[g]; o != nil {
			o[s.ks.Key] = struct{}{}
		}
	}
}

func (s *HeapValue[K, V]) Clear() {
	if _, ok := s.m[s.ks.Slot][s.ks.Key]; ok {
		delete(s.writable(s.ks.Slot), s.ks.Key)
	}
}

// sharedValue reports that key k's value in slot g is one the encoder
// reads (deep states only).
func (s *HeapValue[K, V]) sharedValue(g int, k K) bool {
	if s.ks.Frozen == 0 || int64(g) < s.read.Load() {
		return false
	}
	if s.ep[g] < s.ks.Frozen {
		return true
	}
	o := s.own[g]
	if o == nil {
		return false
	}
	_, mine := o[k]
	return !mine
}

// writable returns slot g's map, copied first if a snapshot reads it.
func (s *HeapValue[K, V]) writable(g int) map[K]V {
	m := s.m[g]
	switch {
	case m == nil:
		m = map[K]V{}
		if s.deep {
			s.own[g] = nil
		}
	case s.ep[g] < s.ks.Frozen && int64(g) >= s.read.Load():
		m = maps.Clone(m)
		if s.deep {
			s.own[g] = map[K]struct{}{}
		}
	default:
		return m
	}
	s.m[g], s.ep[g] = m, s.ks.Epoch
	return m
}

// thaw drops what the copies of the snapshot just ended kept.
func (s *HeapValue[K, V]) thaw() {
	if s.deep {
		clear(s.own)
	}
}

type HeapMap[K, UK comparable, UV any] struct {
	ks   *State[K]
	name string
	// m holds the keys' maps by slot; ep the epoch each slot's map was
	// made in.
	m     []map[K]*innerMap[UK, UV]
	ep    []uint64
	ukeys statecodec.Codec[UK]
	uvals statecodec.Codec[UV]
	read  atomic.Int64 // as HeapValue's
	// deep is set when the function could change a map value in place:
	// a key's map copied for the task then gets copies of its values too
	// (cp, through their codec), and reading values out of a map the
	// encoder reads (Get, All) copies it first.
	deep bool
	cp   statecodec.Copier[UV]
	keep func() func(UV) bool // as HeapValue's, per map entry
}

// innerMap is one key's map and the epoch it was made in.
type innerMap[UK comparable, UV any] struct {
	m  map[UK]UV
	ep uint64
}

func newMapState[K, UK comparable, UV any](ks *State[K], name string, ukeys statecodec.Codec[UK], uvals statecodec.Codec[UV]) *HeapMap[K, UK, UV] {
	return &HeapMap[K, UK, UV]{ks: ks, name: name, m: make([]map[K]*innerMap[UK, UV], ks.slots()), ep: make([]uint64, ks.slots()),
		ukeys: ukeys, uvals: uvals, deep: !ValueSemantics[UV](), cp: statecodec.Copier[UV]{Codec: uvals}}
}

func (s *HeapMap[K, UK, UV]) inner() map[UK]UV {
	if in := s.m[s.ks.Slot][s.ks.Key]; in != nil {
		return in.m
	}
	return nil
}

// readable is the current key's map for reading its values: inner, or,
// for a deep state whose map the encoder reads, the task's copy of it.
func (s *HeapMap[K, UK, UV]) readable() map[UK]UV {
	g := s.ks.Slot
	in := s.m[g][s.ks.Key]
	switch {
	case in == nil:
		return nil
	case s.deep && in.ep < s.ks.Frozen && int64(g) >= s.read.Load():
		return s.writable()
	}
	return in.m
}

// writable returns the current key's map, creating it, and copying it and
// its slot's map first if a snapshot reads them.
func (s *HeapMap[K, UK, UV]) writable() map[UK]UV { return s.writableAt(s.ks.Slot, s.ks.Key) }

// writableAt is writable for key k in slot g.
func (s *HeapMap[K, UK, UV]) writableAt(g int, k K) map[UK]UV {
	gm := s.m[g]
	switch {
	case gm == nil:
		gm = map[K]*innerMap[UK, UV]{}
		s.m[g], s.ep[g] = gm, s.ks.Epoch
	case s.shared(g):
		gm = maps.Clone(gm)
		s.m[g], s.ep[g] = gm, s.ks.Epoch
	}
	in := gm[k]
	switch {
	case in == nil:
		in = &innerMap[UK, UV]{m: map[UK]UV{}, ep: s.ks.Epoch}
		gm[k] = in
	case in.ep < s.ks.Frozen && int64(g) >= s.read.Load():
		in = &innerMap[UK, UV]{m: s.clone(in.m), ep: s.ks.Epoch}
		gm[k] = in
	}
	return in.m
}

// clone copies a key's map, and for a deep state its values.
func (s *HeapMap[K, UK, UV]) clone(m map[UK]UV) map[UK]UV {
	if !s.deep {
		return maps.Clone(m)
	}
	out := make(map[UK]UV, len(m))
	for k, v := range m {
		c, err := s.cp.Copy(v)
		if err != nil {
			s.ks.Fail(fmt.Errorf("state %q: copy a map value the running snapshot holds: %w", s.name, err))
			c = v
		}
		out[k] = c
	}
	return out
}

func (s *HeapMap[K, UK, UV]) Get(k UK) (UV, bool) {
	if !s.deep {
		v, ok := s.inner()[k]
		return v, ok
	}
	if _, ok := s.inner()[k]; !ok {
		var zero UV
		return zero, false
	}
	v, ok := s.readable()[k]
	return v, ok
}
func (s *HeapMap[K, UK, UV]) Put(k UK, v UV) { s.writable()[k] = v }
func (s *HeapMap[K, UK, UV]) Remove(k UK) {
	if _, ok := s.inner()[k]; !ok {
		return
	}
	inner := s.writable()
	delete(inner, k)
	if len(inner) == 0 {
		delete(s.m[s.ks.Slot], s.ks.Key) // writable made the slot's map the task's own
	}
}
func (s *HeapMap[K, UK, UV]) Contains(k UK) bool { _, ok := s.inner()[k]; return ok }
func (s *HeapMap[K, UK, UV]) Len() int           { return len(s.inner()) }
func (s *HeapMap[K, UK, UV]) Clear() {
	g := s.ks.Slot
	if _, ok := s.m[g][s.ks.Key]; !ok {
		return
	}
	if s.shared(g) {
		s.m[g], s.ep[g] = maps.Clone(s.m[g]), s.ks.Epoch
	}
	delete(s.m[g], s.ks.Key)
}

// shared reports that slot g's map is read by the encoder.
func (s *HeapMap[K, UK, UV]) shared(g int) bool {
	return s.ep[g] < s.ks.Frozen && int64(g) >= s.read.Load()
}
func (s *HeapMap[K, UK, UV]) All() iter.Seq2[UK, UV] {
	inner := s.readable()
	return func(yield func(UK, UV) bool) {
		for k, v := range inner {
			if !yield(k, v) {
				return
			}
		}
	}
}
