package runtime

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// State descriptors: keyed state declared once, in a package variable,
// and used from any keyed function's context. A descriptor holds no
// state: on its first use in an operator subtask it declares the state
// there (registered by name with the operator, so checkpoints, restore,
// rescaling and both backends see it like the operator's own states),
// and keeps the subtask's handle in the subtask, found again by
// the descriptor's id. So one descriptor serves every subtask and every
// operator that uses it, each with a state of its own, and may be used
// from any number of goroutines.
//
// Go methods take no type parameters, so a descriptor's methods cannot
// name the stream's key type K: the state they reach is declared over a
// key type the runtime knows, a view of the operator's keyed state with
// the same current key, key groups and entries (canonicalState). For a
// key of a basic kind (a string, an integer, a float or a bool, or a
// named type over one that does not encode itself) that is the basic
// type under K (string for `type word string`); for any other key type
// (a struct, an array, a type that encodes itself) it is any, holding
// K's values, whose checkpoint columns and pebble keys are written in
// K's own encoding (viewBoxed). Either way the checkpointed bytes are
// those a state declared over K itself would have.

// StateContext is the context a descriptor's state is reached through:
// the *KeyedContext of a keyed function (KeyedProcess, KeyedProcessPerSubtask), in
// ProcessElement, OnTimer or Open. It is implemented by KeyedContext only.
type StateContext interface {
	keyedHost() keyedHost
}

// keyedHost is an operator subtask's keyed state without its key type.
type keyedHost interface {
	common() *keyedCommon
	// canonicalState returns the state as a *keyedState[C], C the
	// canonical type of the key type's kind (canonicalOf), or why there
	// is none.
	canonicalState() (any, error)
}

func (c *KeyedContext[K, O]) keyedHost() keyedHost { return c.op }

func (ks *keyedState[K]) common() *keyedCommon { return ks.keyedCommon }

func (ks *keyedState[K]) canonicalState() (any, error) {
	if ks.canon != nil || ks.canonErr != nil {
		return ks.canon, ks.canonErr
	}
	ks.canon, ks.canonErr = canonicalOf(ks)
	return ks.canon, ks.canonErr
}

// canonicalOf makes the view of ks over the canonical type of K's kind:
// string for strings, uint64 for integers and bools, float64 for floats,
// any for the rest; ks itself when K is that type. Descriptors declare
// their states over these four key types only, so each descriptor type
// instantiates its states four times, not once per kind: fifteen kinds
// made the compiled code grow by as much. The views keep K's codec, so
// checkpoints hold the bytes a state over K would.
func canonicalOf[K comparable](ks *keyedState[K]) (any, error) {
	if ks.keys.Bin == nil {
		return viewBoxed(ks), nil // encoded with gob
	}
	switch reflect.TypeFor[K]().Kind() {
	case reflect.String:
		return viewAs[K, string](ks), nil
	case reflect.Uint64:
		return viewAs[K, uint64](ks), nil
	case reflect.Float64:
		return viewAs[K, float64](ks), nil
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
		return viewConv(ks, func(k K) float64 {
			return float64(*(*float32)(unsafe.Pointer(&k)))
		}, func(c float64) K {
			f := float32(c)
			return *(*K)(unsafe.Pointer(&f))
		}), nil
	}
	return viewBoxed(ks), nil
}

// viewAs returns ks seen as a keyed state over C, K's underlying type,
// which shares K's memory layout by definition of reflect.Kind, and its
// codec's bytes (both are chosen by kind). The view shares keyedCommon
// (states, epochs, the pebble store) and follows ks's current key.
func viewAs[K, C comparable](ks *keyedState[K]) *keyedState[C] {
	if v, ok := any(ks).(*keyedState[C]); ok {
		return v
	}
	v := &keyedState[C]{keyedCommon: ks.keyedCommon, groups: ks.groups, keys: statecodec.For[C]()}
	toK := func(c C) K { return *(*K)(unsafe.Pointer(&c)) }
	v.groupOf = func(c C) int { return ks.groupOf(toK(c)) }
	v.slotOf = func(c C) int { return ks.slotOf(toK(c)) }
	if ks.pb != nil {
		v.pbKeys, v.pbKeysErr = keyBytesFor[C]("key type")
	}
	v.key, v.slot = *(*C)(unsafe.Pointer(&ks.key)), ks.slot
	ks.follow = func(k K, slot int) {
		v.key, v.slot, v.pbKeyOK = *(*C)(unsafe.Pointer(&k)), slot, false
	}
	return v
}

// intView returns ks, over a key type whose kind is the integer type U,
// seen as a keyed state over uint64: U converted to uint64 and back is
// itself, so distinct keys stay distinct.
func intView[K comparable, U ~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32](ks *keyedState[K]) *keyedState[uint64] {
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
func viewConv[K, C comparable](ks *keyedState[K], toC func(K) C, toK func(C) K) *keyedState[C] {
	keys := statecodec.Codec[C]{ID: ks.keys.ID, Name: ks.keys.Name, Bin: convSerde[K, C]{ks.keys.Bin, toC, toK}}
	v := &keyedState[C]{keyedCommon: ks.keyedCommon, groups: ks.groups, keys: keys, keyT: typeOf[K]()}
	v.groupOf = func(c C) int { return ks.groupOf(toK(c)) }
	v.slotOf = func(c C) int { return ks.slotOf(toK(c)) }
	if ks.pb != nil {
		v.pbKeys, v.pbKeysErr = keyBytesOf(keys, "key type")
	}
	v.key, v.slot = toC(ks.key), ks.slot
	ks.follow = func(k K, slot int) {
		v.key, v.slot, v.pbKeyOK = toC(k), slot, false
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
func viewBoxed[K comparable](ks *keyedState[K]) *keyedState[any] {
	if v, ok := any(ks).(*keyedState[any]); ok {
		return v
	}
	v := &keyedState[any]{keyedCommon: ks.keyedCommon, groups: ks.groups, keyT: typeOf[K](),
		keys: statecodec.Codec[any]{ID: ks.keys.ID, Name: ks.keys.Name, Boxed: statecodec.BoxedGob[K]{}}}
	v.groupOf = func(a any) int { return ks.groupOf(a.(K)) }
	v.slotOf = func(a any) int { return ks.slotOf(a.(K)) }
	if ks.pb != nil {
		kb, err := keyBytesFor[K]("key type")
		v.pbKeys, v.pbKeysErr = keyBytes[any]{boxed: boxedKeys[K]{kb}}, err
	}
	v.key, v.slot = any(ks.key), ks.slot
	ks.follow = func(k K, slot int) {
		v.key, v.slot, v.pbKeyOK = k, slot, false
	}
	return v
}

// handle returns the subtask's state of descriptor id, declaring it with
// declare on first use. A declaration that fails fails the call, whether
// or not the function returns the error.
func handle[H any](ctx StateContext, id int, declare func(h keyedHost) (H, error)) (H, *keyedCommon, error) {
	h := ctx.keyedHost()
	c := h.common()
	if id < len(c.handles) {
		if s, ok := c.handles[id].(H); ok {
			return s, c, nil
		}
	}
	s, err := declare(h)
	if err != nil {
		c.fail(err)
		return s, c, err
	}
	for len(c.handles) <= id {
		c.handles = append(c.handles, nil)
	}
	c.handles[id] = s
	return s, c, nil
}

// descriptorIDs numbers descriptors, for their handles in subtasks.
var descriptorIDs atomic.Int64

// ValueStateDescriptor declares a ValueState: one value of type V per key
// (Flink's ValueStateDescriptor). Make it once, with NewValueState, in a
// package variable or a field of the job, and use it from every keyed
// function and subtask: each operator subtask that uses it has its own
// state, declared on first use. Its methods may be called only during a
// keyed function's call, with that call's context.
type ValueStateDescriptor[V any] struct {
	id   int
	name string
	vals statecodec.Codec[V]
	ttl  *ttlConfig
	// dropped: AllowDroppedFields.
	dropped []string
}

// NewValueState describes the value state called name, whose values are
// encoded in checkpoints (and held, with the pebble backend) by the serde
// WithSerde gives, by default DefaultSerde[V]: a compact binary encoding
// for strings, byte slices, integers, floats and bools, encoding/gob for
// other types.
//
// The value type is checked here, once: a type the chosen encoding would
// not bring back whole (for gob, DefaultSerde's rule: an
// unexported, func or chan field at any depth, unless the type encodes
// itself; for JSON see JSONSerde) makes NewValueState panic with a
// *StateTypeError, as regexp.MustCompile panics on a bad expression:
// descriptors live in package variables, so the mistake stops the program
// when it starts, before any job runs. So does an empty name, or a serde
// of another type.
func NewValueState[V any](name string, opts ...StateOption) *ValueStateDescriptor[V] {
	o := stateOptionsOf(name, opts)
	d := &ValueStateDescriptor[V]{id: int(descriptorIDs.Add(1)) - 1, name: name,
		vals: mustCodec[V](name, "value type", o.serde, "WithSerde"), ttl: o.ttl, dropped: o.dropped}
	if o.mapKeySerde != nil {
		panic(fmt.Sprintf("state %q: WithMapKeySerde applies to a MapState", name))
	}
	if o.ttl != nil {
		o.ttl.check(name)
	}
	return d
}

// Name is the state's name.
func (d *ValueStateDescriptor[V]) Name() string { return d.name }

func (d *ValueStateDescriptor[V]) state(ctx StateContext) (ValueState[V], *keyedCommon, error) {
	return handle(ctx, d.id, d.declare)
}

// Get returns the current key's value and whether it has one. An error
// (the state could not be declared in this operator, or the pebble
// backend could not read it) also fails the call.
func (d *ValueStateDescriptor[V]) Get(ctx StateContext) (V, bool, error) {
	s, c, err := d.state(ctx)
	if err != nil {
		var zero V
		return zero, false, err
	}
	v, ok := s.Value()
	if c.err != nil {
		var zero V
		return zero, false, c.err
	}
	return v, ok, nil
}

// Set sets the current key's value. An error also fails the call.
func (d *ValueStateDescriptor[V]) Set(ctx StateContext, v V) error {
	s, c, err := d.state(ctx)
	if err != nil {
		return err
	}
	s.Update(v)
	return c.err
}

// Clear removes the current key's value. An error also fails the call.
func (d *ValueStateDescriptor[V]) Clear(ctx StateContext) error {
	s, c, err := d.state(ctx)
	if err != nil {
		return err
	}
	s.Clear()
	return c.err
}

// Handle returns the subtask's ValueState itself, which follows the
// current key: for a function that reads and writes it many times a call.
func (d *ValueStateDescriptor[V]) Handle(ctx StateContext) (ValueState[V], error) {
	s, _, err := d.state(ctx)
	return s, err
}

func (d *ValueStateDescriptor[V]) declare(h keyedHost) (ValueState[V], error) {
	h.common().allowDropped(d.name, d.dropped)
	cs, err := h.canonicalState()
	if err != nil {
		return nil, err
	}
	switch ks := cs.(type) {
	case *keyedState[string]:
		return declareValueTTL(ks, d.name, d.vals, d.ttl)
	case *keyedState[uint64]:
		return declareValueTTL(ks, d.name, d.vals, d.ttl)
	case *keyedState[float64]:
		return declareValueTTL(ks, d.name, d.vals, d.ttl)
	case *keyedState[any]:
		return declareValueTTL(ks, d.name, d.vals, d.ttl)
	}
	return nil, fmt.Errorf("state %q: no view of the keyed state as %T", d.name, cs)
}

// MapStateDescriptor declares a MapState: a map from UK to UV per key,
// like ValueStateDescriptor.
type MapStateDescriptor[UK comparable, UV any] struct {
	id    int
	name  string
	ukeys statecodec.Codec[UK]
	uvals statecodec.Codec[UV]
	ttl   *ttlConfig
	// dropped: AllowDroppedFields.
	dropped []string
}

// NewMapState describes the map state called name, as NewValueState:
// WithMapKeySerde chooses the map keys' serde, WithSerde the map values',
// and a type the chosen encoding would not bring back whole makes it
// panic with a *StateTypeError. With the pebble backend map keys are
// found by their bytes, so a map key serde must give equal keys equal
// bytes.
func NewMapState[UK comparable, UV any](name string, opts ...StateOption) *MapStateDescriptor[UK, UV] {
	o := stateOptionsOf(name, opts)
	if o.ttl != nil {
		o.ttl.check(name)
	}
	return &MapStateDescriptor[UK, UV]{id: int(descriptorIDs.Add(1)) - 1, name: name,
		ukeys: mustCodec[UK](name, "map key type", o.mapKeySerde, "WithMapKeySerde"),
		uvals: mustCodec[UV](name, "map value type", o.serde, "WithSerde"), ttl: o.ttl, dropped: o.dropped}
}

// Name is the state's name.
func (d *MapStateDescriptor[UK, UV]) Name() string { return d.name }

// Handle returns the subtask's MapState, which follows the current key.
// Its methods report no errors; a failed read or write of the pebble
// backend fails the call after the function returns.
func (d *MapStateDescriptor[UK, UV]) Handle(ctx StateContext) (MapState[UK, UV], error) {
	s, _, err := handle(ctx, d.id, d.declare)
	return s, err
}

// Get returns the current key's entry for k and whether there is one.
func (d *MapStateDescriptor[UK, UV]) Get(ctx StateContext, k UK) (UV, bool, error) {
	s, c, err := handle(ctx, d.id, d.declare)
	if err != nil {
		var zero UV
		return zero, false, err
	}
	v, ok := s.Get(k)
	if c.err != nil {
		var zero UV
		return zero, false, c.err
	}
	return v, ok, nil
}

// Put sets the current key's entry for k.
func (d *MapStateDescriptor[UK, UV]) Put(ctx StateContext, k UK, v UV) error {
	s, c, err := handle(ctx, d.id, d.declare)
	if err != nil {
		return err
	}
	s.Put(k, v)
	return c.err
}

// Remove removes the current key's entry for k.
func (d *MapStateDescriptor[UK, UV]) Remove(ctx StateContext, k UK) error {
	s, c, err := handle(ctx, d.id, d.declare)
	if err != nil {
		return err
	}
	s.Remove(k)
	return c.err
}

// Clear removes the current key's map.
func (d *MapStateDescriptor[UK, UV]) Clear(ctx StateContext) error {
	s, c, err := handle(ctx, d.id, d.declare)
	if err != nil {
		return err
	}
	s.Clear()
	return c.err
}

func (d *MapStateDescriptor[UK, UV]) declare(h keyedHost) (MapState[UK, UV], error) {
	h.common().allowDropped(d.name, d.dropped)
	cs, err := h.canonicalState()
	if err != nil {
		return nil, err
	}
	switch ks := cs.(type) {
	case *keyedState[string]:
		return declareMapTTL(ks, d.name, d.ukeys, d.uvals, d.ttl)
	case *keyedState[uint64]:
		return declareMapTTL(ks, d.name, d.ukeys, d.uvals, d.ttl)
	case *keyedState[float64]:
		return declareMapTTL(ks, d.name, d.ukeys, d.uvals, d.ttl)
	case *keyedState[any]:
		return declareMapTTL(ks, d.name, d.ukeys, d.uvals, d.ttl)
	}
	return nil, fmt.Errorf("state %q: no view of the keyed state as %T", d.name, cs)
}

// declareValue returns the value state called name of ks, declaring it
// with values in codec vals on first use.
func declareValue[K comparable, V any](ks *keyedState[K], name string, vals statecodec.Codec[V]) (ValueState[V], error) {
	decl := fmt.Sprintf("ValueState[%s] (values %s)", typeOf[V](), vals)
	if s, ok := ks.states[name]; ok {
		if err := sameDecl(ks.keyedCommon, name, decl); err != nil {
			return nil, err
		}
		switch s := s.(type) {
		case *pebbleValueState[K, V]:
			return s, nil
		case *valueState[K, V]:
			return s, nil
		}
		return nil, errDeclaredOverOtherKey(name)
	}
	if err := checkStateTypes(name, stateType{"key type", ks.keyType()}); err != nil {
		return nil, err
	}
	if vals.Bin == nil && vals.Ext == nil {
		if err := checkStateTypes(name, stateType{"value type", typeOf[V]()}); err != nil {
			return nil, err
		}
	}
	vals, err := evolveRole(ks, name, "value type", vals)
	if err != nil {
		return nil, err
	}
	ks.decls[name] = decl
	var shape statecodec.DeclaredShape
	statecodec.ShapeRole(&shape, "key type", ks.keys)
	statecodec.ShapeRole(&shape, "value type", vals)
	statecodec.SchemaRole(&shape, "value type", vals, ks.pb != nil)
	if ks.pb != nil {
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

// declareMap is declareValue for a map state.
func declareMap[K, UK comparable, UV any](ks *keyedState[K], name string, ukeys statecodec.Codec[UK], uvals statecodec.Codec[UV]) (MapState[UK, UV], error) {
	decl := fmt.Sprintf("MapState[%s, %s] (map keys %s, map values %s)", typeOf[UK](), typeOf[UV](), ukeys, uvals)
	if s, ok := ks.states[name]; ok {
		if err := sameDecl(ks.keyedCommon, name, decl); err != nil {
			return nil, err
		}
		switch s := s.(type) {
		case *pebbleMapState[K, UK, UV]:
			return s, nil
		case *mapState[K, UK, UV]:
			return s, nil
		}
		return nil, errDeclaredOverOtherKey(name)
	}
	types := []stateType{{"key type", ks.keyType()}}
	if ukeys.Bin == nil && ukeys.Ext == nil {
		types = append(types, stateType{"map key type", typeOf[UK]()})
	}
	if uvals.Bin == nil && uvals.Ext == nil {
		types = append(types, stateType{"map value type", typeOf[UV]()})
	}
	if err := checkStateTypes(name, types...); err != nil {
		return nil, err
	}
	uvals, err := evolveRole(ks, name, "map value type", uvals)
	if err != nil {
		return nil, err
	}
	ks.decls[name] = decl
	var shape statecodec.DeclaredShape
	statecodec.ShapeRole(&shape, "key type", ks.keys)
	statecodec.ShapeRole(&shape, "map key type", ukeys)
	statecodec.ShapeRole(&shape, "map value type", uvals)
	statecodec.SchemaRole(&shape, "map value type", uvals, ks.pb != nil)
	if ks.pb != nil {
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
	return &unrecoverableError{Err: fmt.Errorf("state %q is a state of the operator itself; give the descriptor's state another name", name)}
}

// sameDecl refuses a second declaration of state name with other types
// or serdes than its first, decl.
func sameDecl(c *keyedCommon, name, decl string) error {
	if first := c.decls[name]; first != decl {
		return &unrecoverableError{Err: fmt.Errorf("state %q is declared twice in one operator, as %s and as %s; give each state its own name", name, first, decl)}
	}
	return nil
}
