package keyed

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// Host is an operator subtask's keyed state without its key type.
type Host interface {
	common() *Common
	// canonicalState returns the state as a *keyedState[C], C the
	// canonical type of the key type's kind (canonicalOf), or why there
	// is none.
	canonicalState() (any, error)
}

func (ks *State[K]) common() *Common { return ks.Common }

func (ks *State[K]) canonicalState() (any, error) {
	if ks.canon != nil || ks.canonErr != nil {
		return ks.canon, ks.canonErr
	}
	ks.canon, ks.canonErr = canonicalOf(ks)
	return ks.canon, ks.canonErr
}

// canonicalOf makes the view of ks over the canonical type of K's kind:
// string for strings, uint64 for integers, bools and floats, any for the
// rest; ks itself when K is that type. Descriptors declare their states
// over these three key types only, so each descriptor type instantiates
// its states three times, not once per kind: every instantiation of the
// states costs compile time in the user's program, about a second per
// key type and value type. The views keep K's codec, so checkpoints hold
// the bytes a state over K would.
//
// A float key is its bits (-0 as +0), as in the pebble backend's keys: a
// NaN key finds its state again, which a map over the float would not.
func canonicalOf[K comparable](ks *State[K]) (any, error) {
	if ks.Keys.Bin == nil {
		return viewBoxed(ks), nil // encoded with gob
	}
	switch reflect.TypeFor[K]().Kind() {
	case reflect.String:
		return viewAs[K, string](ks), nil
	case reflect.Uint64:
		return viewAs[K, uint64](ks), nil
	case reflect.Float64:
		return viewConv(ks, func(k K) uint64 {
			return floatBits(*(*float64)(unsafe.Pointer(&k)))
		}, func(c uint64) K {
			f := math.Float64frombits(c)
			return *(*K)(unsafe.Pointer(&f))
		}), nil
	case reflect.Int:
		return intView[K, int](ks), nil
	case reflect.Int8:
		return intView[K, int8](ks), nil
	case reflect.Int16:
		return intView[K, int16](ks), nil
	case reflect.Int32:
		return intView[K, int32](ks), nil
	case reflect.Int64:
		return intView[K, int64](ks), nil
	case reflect.Uint:
		return intView[K, uint](ks), nil
	case reflect.Uint8:
		return intView[K, uint8](ks), nil
	case reflect.Uint16:
		return intView[K, uint16](ks), nil
	case reflect.Uint32:
		return intView[K, uint32](ks), nil
	case reflect.Bool:
		return viewConv(ks, func(k K) uint64 {
			if *(*bool)(unsafe.Pointer(&k)) {
				return 1
			}
			return 0
		}, func(c uint64) K {
			b := c != 0
			return *(*K)(unsafe.Pointer(&b))
		}), nil
	case reflect.Float32:
		return viewConv(ks, func(k K) uint64 {
			return floatBits(float64(*(*float32)(unsafe.Pointer(&k))))
		}, func(c uint64) K {
			f := float32(math.Float64frombits(c))
			return *(*K)(unsafe.Pointer(&f))
		}), nil
	}
	return viewBoxed(ks), nil
}

// floatBits is f's bits, with -0 as +0 (they are equal floats).
func floatBits(f float64) uint64 {
	if f == 0 {
		return 0
	}
	return math.Float64bits(f)
}

// viewAs returns ks seen as a keyed state over C, K's underlying type,
// which shares K's memory layout by definition of reflect.Kind, and its
// codec's bytes (both are chosen by kind). The view shares keyedCommon
// (states, epochs, the pebble store) and follows ks's current key.
func viewAs[K, C comparable](ks *State[K]) *State[C] {
	if v, ok := any(ks).(*State[C]); ok {
		return v
	}
	v := &State[C]{Common: ks.Common, groups: ks.groups, Keys: statecodec.For[C]()}
	toK := func(c C) K { return *(*K)(unsafe.Pointer(&c)) }
	v.GroupOf = func(c C) int { return ks.GroupOf(toK(c)) }
	v.slotOf = func(c C) int { return ks.slotOf(toK(c)) }
	if ks.Pebble != nil {
		v.PebbleKeys, v.PebbleKeysErr = KeyBytesFor[C]("key type")
	}
	v.Key, v.Slot = *(*C)(unsafe.Pointer(&ks.Key)), ks.Slot
	ks.follow = func(k K, slot int) {
		v.Key, v.Slot, v.pbKeyOK = *(*C)(unsafe.Pointer(&k)), slot, false
	}
	return v
}

// intView returns ks, over a key type whose kind is the integer type U,
// seen as a keyed state over uint64: U converted to uint64 and back is
// itself, so distinct keys stay distinct.
func intView[K comparable, U ~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32](ks *State[K]) *State[uint64] {
	return viewConv(ks, func(k K) uint64 {
		return uint64(*(*U)(unsafe.Pointer(&k)))
	}, func(c uint64) K {
		u := U(c)
		return *(*K)(unsafe.Pointer(&u))
	})
}

// viewConv returns ks seen as a keyed state over C, into which toC maps
// K one to one (toK is its inverse) and with the same equality. The
// view writes its keys in K's codec (convSerde), so its checkpoints and
// pebble keys are those of a state over K.
func viewConv[K, C comparable](ks *State[K], toC func(K) C, toK func(C) K) *State[C] {
	keys := statecodec.Codec[C]{ID: ks.Keys.ID, Name: ks.Keys.Name, Bin: convSerde[K, C]{ks.Keys.Bin, toC, toK}}
	v := &State[C]{Common: ks.Common, groups: ks.groups, Keys: keys, keyT: typeOf[K]()}
	v.GroupOf = func(c C) int { return ks.GroupOf(toK(c)) }
	v.slotOf = func(c C) int { return ks.slotOf(toK(c)) }
	if ks.Pebble != nil {
		v.PebbleKeys, v.PebbleKeysErr = keyBytesOf(keys, "key type")
	}
	v.Key, v.Slot = toC(ks.Key), ks.Slot
	ks.follow = func(k K, slot int) {
		v.Key, v.Slot, v.pbKeyOK = toC(k), slot, false
	}
	return v
}

// convSerde is a serde of K used as one of C through viewConv's maps.
type convSerde[K, C any] struct {
	s   statecodec.Binary[K]
	toC func(K) C
	toK func(C) K
}

func (c convSerde[K, C]) AppendValue(dst []byte, v C) []byte { return c.s.AppendValue(dst, c.toK(v)) }

func (c convSerde[K, C]) ReadValue(b []byte) (C, int, error) {
	k, n, err := c.s.ReadValue(b)
	return c.toC(k), n, err
}

// viewBoxed returns ks seen as a keyed state over any, each key a K:
// the view of a key type not of a basic kind. Its keys are written in
// checkpoints as a gob column of K (statecodec.BoxedGob) and in the
// pebble backend in K's key encoding (boxedKeys), so its entries are
// those of a state over K.
func viewBoxed[K comparable](ks *State[K]) *State[any] {
	if v, ok := any(ks).(*State[any]); ok {
		return v
	}
	v := &State[any]{Common: ks.Common, groups: ks.groups, keyT: typeOf[K](),
		Keys: statecodec.Codec[any]{ID: ks.Keys.ID, Name: ks.Keys.Name, Boxed: statecodec.BoxedGob[K]{}}}
	v.GroupOf = func(a any) int { return ks.GroupOf(a.(K)) }
	v.slotOf = func(a any) int { return ks.slotOf(a.(K)) }
	if ks.Pebble != nil {
		kb, err := KeyBytesFor[K]("key type")
		v.PebbleKeys, v.PebbleKeysErr = keyBytes[any]{boxed: boxedKeys[K]{kb}}, err
	}
	v.Key, v.Slot = any(ks.Key), ks.Slot
	ks.follow = func(k K, slot int) {
		v.Key, v.Slot, v.pbKeyOK = k, slot, false
	}
	return v
}

// handle returns the subtask's state of descriptor id, declaring it with
// declare on first use. A declaration that fails fails the call, whether
// or not the function returns the error.
func handle[H any](h Host, id int, declare func(h Host) (H, error)) (H, *Common, error) {
	c := h.common()
	if id < len(c.handles) {
		if s, ok := c.handles[id].(H); ok {
			return s, c, nil
		}
	}
	s, err := declare(h)
	if err != nil {
		c.Fail(err)
		return s, c, err
	}
	for len(c.handles) <= id {
		c.handles = append(c.handles, nil)
	}
	c.handles[id] = s
	return s, c, nil
}

// declareValue returns the value state called name of ks, declaring it
// with values in codec vals on first use.
func declareValue[K comparable, V any](ks *State[K], name string, vals statecodec.Codec[V]) (Value[V], error) {
	decl := fmt.Sprintf("ValueState[%s] (values %s)", typeOf[V](), vals)
	if s, ok := ks.States[name]; ok {
		if err := sameDecl(ks.Common, name, decl); err != nil {
			return nil, err
		}
		switch s := s.(type) {
		case *pebbleValueState[K, V]:
			return s, nil
		case *HeapValue[K, V]:
			return s, nil
		}
		return nil, errDeclaredOverOtherKey(name)
	}
	if err := CheckStateTypes(name, StateType{"key type", ks.keyType()}); err != nil {
		return nil, err
	}
	if vals.Bin == nil && vals.Ext == nil {
		if err := CheckStateTypes(name, StateType{"value type", typeOf[V]()}); err != nil {
			return nil, err
		}
	}
	vals, err := evolveRole(ks, name, "value type", vals)
	if err != nil {
		return nil, err
	}
	ks.decls[name] = decl
	var shape statecodec.DeclaredShape
	statecodec.ShapeRole(&shape, "key type", ks.Keys)
	statecodec.ShapeRole(&shape, "value type", vals)
	statecodec.SchemaRole(&shape, "value type", vals, ks.Pebble != nil)
	if ks.Pebble != nil {
		ps, err := newPebbleValueState[K, V](ks, name, vals)
		if err != nil {
			return nil, err
		}
		if err := ks.createPebble(name, ps, shape); err != nil {
			return nil, err
		}
		return ps, nil
	}
	vs := newValueState[K, V](ks, name, vals)
	if err := ks.create(name, vs, shape); err != nil {
		return nil, err
	}
	return vs, nil
}

// DeclareMapNoTTL is declareValue for a map state.
func DeclareMapNoTTL[K, UK comparable, UV any](ks *State[K], name string, ukeys statecodec.Codec[UK], uvals statecodec.Codec[UV]) (Map[UK, UV], error) {
	decl := fmt.Sprintf("MapState[%s, %s] (map keys %s, map values %s)", typeOf[UK](), typeOf[UV](), ukeys, uvals)
	if s, ok := ks.States[name]; ok {
		if err := sameDecl(ks.Common, name, decl); err != nil {
			return nil, err
		}
		switch s := s.(type) {
		case *pebbleMapState[K, UK, UV]:
			return s, nil
		case *HeapMap[K, UK, UV]:
			return s, nil
		}
		return nil, errDeclaredOverOtherKey(name)
	}
	types := []StateType{{"key type", ks.keyType()}}
	if ukeys.Bin == nil && ukeys.Ext == nil {
		types = append(types, StateType{"map key type", typeOf[UK]()})
	}
	if uvals.Bin == nil && uvals.Ext == nil {
		types = append(types, StateType{"map value type", typeOf[UV]()})
	}
	if err := CheckStateTypes(name, types...); err != nil {
		return nil, err
	}
	uvals, err := evolveRole(ks, name, "map value type", uvals)
	if err != nil {
		return nil, err
	}
	ks.decls[name] = decl
	var shape statecodec.DeclaredShape
	statecodec.ShapeRole(&shape, "key type", ks.Keys)
	statecodec.ShapeRole(&shape, "map key type", ukeys)
	statecodec.ShapeRole(&shape, "map value type", uvals)
	statecodec.SchemaRole(&shape, "map value type", uvals, ks.Pebble != nil)
	if ks.Pebble != nil {
		ps, err := newPebbleMapState[K, UK, UV](ks, name, ukeys, uvals)
		if err != nil {
			return nil, err
		}
		if err := ks.createPebble(name, ps, shape); err != nil {
			return nil, err
		}
		return ps, nil
	}
	ms := newMapState[K, UK, UV](ks, name, ukeys, uvals)
	if err := ks.create(name, ms, shape); err != nil {
		return nil, err
	}
	return ms, nil
}

// errDeclaredOverOtherKey refuses a descriptor's state of the name of
// one the operator declared itself (a window's contents), over the
// stream's key type rather than the descriptor's view of it.
func errDeclaredOverOtherKey(name string) error {
	return &engine.UnrecoverableError{Err: fmt.Errorf("state %q is a state of the operator itself; give the descriptor's state another name", name)}
}

// sameDecl refuses a second declaration of state name with other types
// or serdes than its first, decl.
func sameDecl(c *Common, name, decl string) error {
	if first := c.decls[name]; first != decl {
		return &engine.UnrecoverableError{Err: fmt.Errorf("state %q is declared twice in one operator, as %s and as %s; give each state its own name", name, first, decl)}
	}
	return nil
}

// ValueSpec is what a ValueStateDescriptor declares: the state called
// name, its values' codec, its TTL (nil: none) and the fields a restore
// may drop; id finds its handle in a subtask (handle).
type ValueSpec[V any] struct {
	ID      int
	Name    string
	Vals    statecodec.Codec[V]
	TTL     *TTLConfig
	Dropped []string
}

// State returns the subtask's state of d, declaring it on first use,
// and the subtask's Common, whose Err a call of the state returns.
func (d *ValueSpec[V]) State(h Host) (Value[V], *Common, error) {
	return handle(h, d.ID, d.declare)
}

func (d *ValueSpec[V]) declare(h Host) (Value[V], error) {
	h.common().allowDropped(d.Name, d.Dropped)
	cs, err := h.canonicalState()
	if err != nil {
		return nil, err
	}
	switch ks := cs.(type) {
	case *State[string]:
		return DeclareValue(ks, d.Name, d.Vals, d.TTL)
	case *State[uint64]:
		return DeclareValue(ks, d.Name, d.Vals, d.TTL)
	case *State[any]:
		return DeclareValue(ks, d.Name, d.Vals, d.TTL)
	}
	return nil, fmt.Errorf("state %q: no view of the keyed state as %T", d.Name, cs)
}

// MapSpec is valueSpec for a MapStateDescriptor.
type MapSpec[UK comparable, UV any] struct {
	ID      int
	Name    string
	UKeys   statecodec.Codec[UK]
	UVals   statecodec.Codec[UV]
	TTL     *TTLConfig
	Dropped []string
}

func (d *MapSpec[UK, UV]) State(h Host) (Map[UK, UV], *Common, error) {
	return handle(h, d.ID, d.declare)
}

func (d *MapSpec[UK, UV]) declare(h Host) (Map[UK, UV], error) {
	h.common().allowDropped(d.Name, d.Dropped)
	cs, err := h.canonicalState()
	if err != nil {
		return nil, err
	}
	switch ks := cs.(type) {
	case *State[string]:
		return DeclareMap(ks, d.Name, d.UKeys, d.UVals, d.TTL)
	case *State[uint64]:
		return DeclareMap(ks, d.Name, d.UKeys, d.UVals, d.TTL)
	case *State[any]:
		return DeclareMap(ks, d.Name, d.UKeys, d.UVals, d.TTL)
	}
	return nil, fmt.Errorf("state %q: no view of the keyed state as %T", d.Name, cs)
}

// ListSpec is valueSpec for a ListStateDescriptor.
type ListSpec[T any] struct {
	ID      int
	Name    string
	Elems   statecodec.Codec[T]
	TTL     *TTLConfig
	Dropped []string
}

func (d *ListSpec[T]) State(h Host) (List[T], *Common, error) {
	return handle(h, d.ID, d.declare)
}

func (d *ListSpec[T]) declare(h Host) (List[T], error) {
	h.common().allowDropped(d.Name, d.Dropped)
	cs, err := h.canonicalState()
	if err != nil {
		return nil, err
	}
	switch ks := cs.(type) {
	case *State[string]:
		return DeclareList(ks, d.Name, d.Elems, d.TTL)
	case *State[uint64]:
		return DeclareList(ks, d.Name, d.Elems, d.TTL)
	case *State[any]:
		return DeclareList(ks, d.Name, d.Elems, d.TTL)
	}
	return nil, fmt.Errorf("state %q: no view of the keyed state as %T", d.Name, cs)
}

// CheckStateTypes checks the types of state name: role and type for each.
func CheckStateTypes(name string, types ...StateType) error {
	for _, st := range types {
		if err := statecodec.CheckGob(st.Type); err != nil {
			err.State, err.Role, err.Type = name, st.Role, st.Type.String()
			return &engine.UnrecoverableError{Err: PublicError(err)}
		}
	}
	return nil
}

type StateType struct {
	Role string
	Type reflect.Type
}
