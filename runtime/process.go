package runtime

import (
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/splitflow/splitflow/metrics"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/keygroup"
	"github.com/splitflow/splitflow/runtime/internal/pebblestate"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// TimeDomain says which clock a timer follows.
type TimeDomain uint8

const (
	// EventTime timers fire when the operator's input watermark passes
	// their timestamp.
	EventTime TimeDomain = iota + 1
	// ProcessingTime timers fire when the wall clock passes their
	// timestamp.
	ProcessingTime
)

func (d TimeDomain) String() string {
	switch d {
	case EventTime:
		return "event-time"
	case ProcessingTime:
		return "processing-time"
	default:
		return "unknown-time-domain"
	}
}

// Timer is a timer that fired, handed to OnTimer.
type Timer struct {
	Timestamp int64
	Domain    TimeDomain
}

// KeyedProcessFunction processes a keyed stream one record at a time with
// per-key state and timers (Flink's KeyedProcessFunction). All methods run
// on the subtask's task goroutine, never concurrently; the context passed
// to them is only valid during the call.
//
// A function may also implement Open(*KeyedContext[K, O]) error, called
// once before the first record: the place to create state handles.
type KeyedProcessFunction[K comparable, I, O any] interface {
	// ProcessElement handles one record; ctx.Key() is its key.
	ProcessElement(ctx *KeyedContext[K, O], value I) error
	// OnTimer handles a timer that fired for key ctx.Key().
	OnTimer(ctx *KeyedContext[K, O], timer Timer) error
}

// keyedOpener is the optional Open of a KeyedProcessFunction.
type keyedOpener[K comparable, O any] interface {
	Open(ctx *KeyedContext[K, O]) error
}

// KeyedProcessFuncs adapts plain functions to KeyedProcessFunction. Element
// is required; Setup and Timer may be nil. Setup is called by Open, once per
// subtask: state handles it keeps in variables shared by all subtasks would
// be shared too, so a function with per-subtask handles belongs in
// KeyedProcessPerSubtask, which builds one KeyedProcessFuncs per subtask.
type KeyedProcessFuncs[K comparable, I, O any] struct {
	Setup   func(ctx *KeyedContext[K, O]) error
	Element func(ctx *KeyedContext[K, O], value I) error
	Timer   func(ctx *KeyedContext[K, O], timer Timer) error
}

// Open calls Setup, if any.
func (f KeyedProcessFuncs[K, I, O]) Open(ctx *KeyedContext[K, O]) error {
	if f.Setup == nil {
		return nil
	}
	return f.Setup(ctx)
}

func (f KeyedProcessFuncs[K, I, O]) ProcessElement(ctx *KeyedContext[K, O], v I) error {
	return f.Element(ctx, v)
}

func (f KeyedProcessFuncs[K, I, O]) OnTimer(ctx *KeyedContext[K, O], t Timer) error {
	if f.Timer == nil {
		return nil
	}
	return f.Timer(ctx, t)
}

// KeyedContext is what a KeyedProcessFunction sees: the current key and
// timestamp, an output, state, and timers.
type KeyedContext[K comparable, O any] struct {
	op        *keyedState[K]
	out       output[O]
	ts        int64
	err       error
	info      *opInfo
	watermark int64
	timers    *timerService[K]
}

// Key is the key of the record or timer being handled.
func (c *KeyedContext[K, O]) Key() K { return c.op.key }

// Timestamp is the current record's event timestamp, or the timer's
// timestamp in OnTimer for an event-time timer (connector.NoTimestamp if
// none).
func (c *KeyedContext[K, O]) Timestamp() int64 { return c.ts }

// SubtaskIndex is the subtask running the function.
func (c *KeyedContext[K, O]) SubtaskIndex() int { return c.info.subtask }

// Collect emits v with the current timestamp.
func (c *KeyedContext[K, O]) Collect(v O) { c.CollectWithTimestamp(v, c.ts) }

// CollectWithTimestamp emits v with timestamp ts.
func (c *KeyedContext[K, O]) CollectWithTimestamp(v O, ts int64) {
	if c.err == nil {
		c.err = c.out.Collect(v, ts)
	}
}

// CurrentWatermark is the operator's input watermark (math.MinInt64 before
// the first one).
func (c *KeyedContext[K, O]) CurrentWatermark() int64 { return c.watermark }

// sideOutputs makes the context a SideOutputContext: Output emits to the
// operator's side outputs.
func (c *KeyedContext[K, O]) sideOutputs() (*sideOutputs, int64, *error) {
	return c.info.sides, c.ts, &c.err
}

// CurrentProcessingTime is the processing time, the wall clock in
// milliseconds since the Unix epoch: the time processing-time timers fire
// by and state TTL expires by.
func (c *KeyedContext[K, O]) CurrentProcessingTime() int64 { return c.op.now() }

// RegisterEventTimeTimer asks for OnTimer once the watermark reaches ts,
// for the current key. Registering the same (key, ts) twice fires once.
// Timers are checkpointed with their keys, so the key type must follow
// DefaultSerde's rule; the first registration checks it, and a key type
// that does not fails the job. With the pebble backend the key type must
// also have a binary encoding (see PebbleState); a KeyedProcessFuncs
// with a Timer (KeyedProcess with OnTimer) over one without is refused when its
// operator opens, and any other function fails at its first registration.
//
// At the end of event time (the final watermark, maxWatermark, which a
// bounded input sends when it ends) every pending timer fires, and so does
// every timer registered while they fire; a timer registered by one of
// those is dropped, so that a timer that registers itself again lets the
// input end (see timerService.final).
func (c *KeyedContext[K, O]) RegisterEventTimeTimer(ts int64) {
	c.checkTimerKey(eventTimersName)
	if s := c.timers; s.final {
		if s.firingFinal {
			s.droppedFinal++
			return
		}
		s.registeredFinal[timerEntry[K]{ts: ts, key: c.op.key}] = struct{}{}
	}
	c.timers.event.add(c.op.key, ts)
}

// checkTimerKey fails the current call once the key type is known not to
// survive a checkpoint of the timers.
func (c *KeyedContext[K, O]) checkTimerKey(name string) {
	if !c.timers.keyChecked {
		c.timers.keyChecked = true
		c.timers.keyErr = checkStateTypes(name, stateType{"key type", typeOf[K]()})
		if c.timers.keyErr == nil && c.op.pb != nil {
			c.timers.keyErr = c.op.pbKeysErr // the DB holds timers by their keys' bytes
		}
	}
	if c.timers.keyErr != nil && c.err == nil {
		c.err = c.timers.keyErr
	}
}

// DeleteEventTimeTimer cancels a timer registered for the current key.
func (c *KeyedContext[K, O]) DeleteEventTimeTimer(ts int64) { c.timers.event.remove(c.op.key, ts) }

// RegisterProcessingTimeTimer asks for OnTimer once the wall clock reaches
// ts (milliseconds since the Unix epoch), for the current key.
func (c *KeyedContext[K, O]) RegisterProcessingTimeTimer(ts int64) {
	c.checkTimerKey(processingTimersName)
	c.timers.processing.add(c.op.key, ts)
	c.timers.scheduleProcessing()
}

// DeleteProcessingTimeTimer cancels a timer registered for the current key.
func (c *KeyedContext[K, O]) DeleteProcessingTimeTimer(ts int64) {
	c.timers.processing.remove(c.op.key, ts)
}

// keyedState is the keyed state of one operator subtask: the current key
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
type keyedState[K comparable] struct {
	// keyedCommon is what does not depend on the key type, shared with
	// the canonical view of this state that descriptors use (see
	// canonicalState).
	*keyedCommon
	key  K
	slot int // slot of key
	// groupOf is the key group of a key, of groups (the max parallelism);
	// slotOf its slot, of groups*slotsPerKeyGroup, the slots of key group
	// g being g*slotsPerKeyGroup and up; keys is the key type's codec in
	// snapshots.
	groupOf func(K) int
	slotOf  func(K) int
	groups  int
	keys    statecodec.Codec[K]
	// keyT is the stream's key type when it is not K: in the view over
	// any that descriptors use for a key type not of a basic kind
	// (viewBoxed). The type checks and errors name it.
	keyT reflect.Type

	// pbKeys is the pebble backend's key encoding; pbKeyBuf the current
	// key's encoding once pbKeyOK.
	pbKeys    keyBytes[K]
	pbKeysErr error
	pbKeyBuf  []byte
	pbKeyOK   bool

	// canon is the canonical view (a *keyedState[C], C the basic type
	// under K), made on a descriptor's first use, or why there is none;
	// follow keeps its current key with this one's.
	canon    any
	canonErr error
	follow   func(k K, slot int)
}

// keyedCommon is the part of an operator subtask's keyed state that does
// not depend on the key type.
type keyedCommon struct {
	// epoch is the current epoch; frozen the epoch of the snapshot being
	// encoded, 0 for none: a map of an epoch below frozen is read by the
	// encoder.
	epoch  uint64
	frozen uint64
	states map[string]any
	// decls says, per state name, how it was declared ("ValueState[int64]
	// (varint)"), for the error that refuses a second declaration of the
	// name with other types.
	decls map[string]string
	// handles are the states of descriptors, by descriptor id.
	handles []any
	// restored holds, per state name, the restored entries of the key
	// groups this subtask owns, until the function asks for the state
	// (its value type is known only then); a snapshot taken before that
	// writes them back unchanged.
	restored map[string][]stateEntry
	// pb is the pebble backend's state, nil with the heap backend. err is
	// the first failure of a state access (pebblestate.go, descriptors),
	// returned after the function's call.
	pb  *pebbleKeyed
	err error
	// clock is the operator's processing time in milliseconds (the
	// job's, config.clock), for its context, its processing-time timers
	// and state TTL (ttl.go); nil for the wall clock.
	clock func() int64
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
func (ks *keyedState[K]) keyType() reflect.Type {
	if ks.keyT != nil {
		return ks.keyT
	}
	return typeOf[K]()
}

// slotsPerKeyGroup is how many maps a key group's state is split into.
const slotsPerKeyGroup = 16

func (ks *keyedState[K]) slots() int { return ks.groups * slotsPerKeyGroup }

// setKey makes k the current key.
func (ks *keyedState[K]) setKey(k K) {
	ks.key, ks.slot, ks.pbKeyOK = k, ks.slotOf(k), false
	if ks.follow != nil {
		ks.follow(k, ks.slot)
	}
}

// claim registers state s of the kind, declared with shape, under name
// and takes what was restored for it, refusing entries of another kind
// and types that lost a field (statecodec.CheckShape).
func (ks *keyedState[K]) claim(name string, s any, kind byte, shape statecodec.DeclaredShape) ([]stateEntry, error) {
	ks.states[name] = s
	entries := ks.restored[name]
	delete(ks.restored, name)
	for _, e := range entries {
		if e.kind != kind && e.kind != stateKindShape {
			return nil, errKindChanged(name)
		}
	}
	return ks.claimShape(name, entries, shape)
}

// errKindChanged refuses a restore whose state changed kind.
func errKindChanged(name string) error {
	return &unrecoverableError{Err: fmt.Errorf("state %q was checkpointed as another kind of state (a ValueState and a MapState share the name across versions of the job); rename one", name)}
}

// create registers a new state and merges what was restored for it.
func (ks *keyedState[K]) create(name string, s snapshotableState, shape statecodec.DeclaredShape) error {
	entries, err := ks.claim(name, s, s.kind(), shape)
	if err != nil {
		return err
	}
	// A restore that fails here fails again from the same checkpoint:
	// no restart can mend it.
	for _, e := range entries {
		if err := s.restore(e.format, e.data); err != nil {
			return &unrecoverableError{Err: fmt.Errorf("restore state %q (key group %d): %w", name, e.keyGroup, err)}
		}
	}
	return nil
}

// ValueState is one value per key.
type ValueState[V any] interface {
	// Value returns the current key's value and whether it has one.
	Value() (V, bool)
	// Update sets the current key's value.
	Update(v V)
	// Clear removes the current key's value.
	Clear()
}

// MapState is a map per key.
type MapState[UK comparable, UV any] interface {
	Get(k UK) (UV, bool)
	Put(k UK, v UV)
	Remove(k UK)
	Contains(k UK) bool
	Len() int
	// All iterates the current key's entries in no particular order.
	All() iter.Seq2[UK, UV]
	// Clear removes the current key's map.
	Clear()
}

type valueState[K comparable, V any] struct {
	ks   *keyedState[K]
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

func newValueState[K comparable, V any](ks *keyedState[K], name string, vals statecodec.Codec[V]) *valueState[K, V] {
	s := &valueState[K, V]{ks: ks, name: name, m: make([]map[K]V, ks.slots()), ep: make([]uint64, ks.slots()), vals: vals,
		deep: !valueSemantics[V](), cp: statecodec.Copier[V]{Codec: vals}}
	if s.deep {
		s.own = make([]map[K]struct{}, ks.slots())
	}
	return s
}

func (s *valueState[K, V]) Value() (V, bool) {
	g, k := s.ks.slot, s.ks.key
	v, ok := s.m[g][k]
	if ok && s.deep && s.sharedValue(g, k) {
		c, err := s.cp.Copy(v)
		if err != nil {
			s.ks.fail(fmt.Errorf("state %q: copy a value the running snapshot holds: %w", s.name, err))
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

func (s *valueState[K, V]) Update(v V) {
	g := s.ks.slot
	s.writable(g)[s.ks.key] = v
	if s.deep {
		if o := s.own[g]; o != nil {
			o[s.ks.key] = struct{}{}
		}
	}
}

func (s *valueState[K, V]) Clear() {
	if _, ok := s.m[s.ks.slot][s.ks.key]; ok {
		delete(s.writable(s.ks.slot), s.ks.key)
	}
}

// sharedValue reports that key k's value in slot g is one the encoder
// reads (deep states only).
func (s *valueState[K, V]) sharedValue(g int, k K) bool {
	if s.ks.frozen == 0 || int64(g) < s.read.Load() {
		return false
	}
	if s.ep[g] < s.ks.frozen {
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
func (s *valueState[K, V]) writable(g int) map[K]V {
	m := s.m[g]
	switch {
	case m == nil:
		m = map[K]V{}
		if s.deep {
			s.own[g] = nil
		}
	case s.ep[g] < s.ks.frozen && int64(g) >= s.read.Load():
		m = maps.Clone(m)
		if s.deep {
			s.own[g] = map[K]struct{}{}
		}
	default:
		return m
	}
	s.m[g], s.ep[g] = m, s.ks.epoch
	return m
}

// thaw drops what the copies of the snapshot just ended kept.
func (s *valueState[K, V]) thaw() {
	if s.deep {
		clear(s.own)
	}
}

type mapState[K, UK comparable, UV any] struct {
	ks   *keyedState[K]
	name string
	// m holds the keys' maps by slot; ep the epoch each slot's map was
	// made in.
	m     []map[K]*innerMap[UK, UV]
	ep    []uint64
	ukeys statecodec.Codec[UK]
	uvals statecodec.Codec[UV]
	read  atomic.Int64 // as valueState's
	// deep is set when the function could change a map value in place:
	// a key's map copied for the task then gets copies of its values too
	// (cp, through their codec), and reading values out of a map the
	// encoder reads (Get, All) copies it first.
	deep bool
	cp   statecodec.Copier[UV]
	keep func() func(UV) bool // as valueState's, per map entry
}

// innerMap is one key's map and the epoch it was made in.
type innerMap[UK comparable, UV any] struct {
	m  map[UK]UV
	ep uint64
}

func newMapState[K, UK comparable, UV any](ks *keyedState[K], name string, ukeys statecodec.Codec[UK], uvals statecodec.Codec[UV]) *mapState[K, UK, UV] {
	return &mapState[K, UK, UV]{ks: ks, name: name, m: make([]map[K]*innerMap[UK, UV], ks.slots()), ep: make([]uint64, ks.slots()),
		ukeys: ukeys, uvals: uvals, deep: !valueSemantics[UV](), cp: statecodec.Copier[UV]{Codec: uvals}}
}

func (s *mapState[K, UK, UV]) inner() map[UK]UV {
	if in := s.m[s.ks.slot][s.ks.key]; in != nil {
		return in.m
	}
	return nil
}

// readable is the current key's map for reading its values: inner, or,
// for a deep state whose map the encoder reads, the task's copy of it.
func (s *mapState[K, UK, UV]) readable() map[UK]UV {
	g := s.ks.slot
	in := s.m[g][s.ks.key]
	switch {
	case in == nil:
		return nil
	case s.deep && in.ep < s.ks.frozen && int64(g) >= s.read.Load():
		return s.writable()
	}
	return in.m
}

// writable returns the current key's map, creating it, and copying it and
// its slot's map first if a snapshot reads them.
func (s *mapState[K, UK, UV]) writable() map[UK]UV { return s.writableAt(s.ks.slot, s.ks.key) }

// writableAt is writable for key k in slot g.
func (s *mapState[K, UK, UV]) writableAt(g int, k K) map[UK]UV {
	gm := s.m[g]
	switch {
	case gm == nil:
		gm = map[K]*innerMap[UK, UV]{}
		s.m[g], s.ep[g] = gm, s.ks.epoch
	case s.shared(g):
		gm = maps.Clone(gm)
		s.m[g], s.ep[g] = gm, s.ks.epoch
	}
	in := gm[k]
	switch {
	case in == nil:
		in = &innerMap[UK, UV]{m: map[UK]UV{}, ep: s.ks.epoch}
		gm[k] = in
	case in.ep < s.ks.frozen && int64(g) >= s.read.Load():
		in = &innerMap[UK, UV]{m: s.clone(in.m), ep: s.ks.epoch}
		gm[k] = in
	}
	return in.m
}

// clone copies a key's map, and for a deep state its values.
func (s *mapState[K, UK, UV]) clone(m map[UK]UV) map[UK]UV {
	if !s.deep {
		return maps.Clone(m)
	}
	out := make(map[UK]UV, len(m))
	for k, v := range m {
		c, err := s.cp.Copy(v)
		if err != nil {
			s.ks.fail(fmt.Errorf("state %q: copy a map value the running snapshot holds: %w", s.name, err))
			c = v
		}
		out[k] = c
	}
	return out
}

func (s *mapState[K, UK, UV]) Get(k UK) (UV, bool) {
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
func (s *mapState[K, UK, UV]) Put(k UK, v UV) { s.writable()[k] = v }
func (s *mapState[K, UK, UV]) Remove(k UK) {
	if _, ok := s.inner()[k]; !ok {
		return
	}
	inner := s.writable()
	delete(inner, k)
	if len(inner) == 0 {
		delete(s.m[s.ks.slot], s.ks.key) // writable made the slot's map the task's own
	}
}
func (s *mapState[K, UK, UV]) Contains(k UK) bool { _, ok := s.inner()[k]; return ok }
func (s *mapState[K, UK, UV]) Len() int           { return len(s.inner()) }
func (s *mapState[K, UK, UV]) Clear() {
	g := s.ks.slot
	if _, ok := s.m[g][s.ks.key]; !ok {
		return
	}
	if s.shared(g) {
		s.m[g], s.ep[g] = maps.Clone(s.m[g]), s.ks.epoch
	}
	delete(s.m[g], s.ks.key)
}

// shared reports that slot g's map is read by the encoder.
func (s *mapState[K, UK, UV]) shared(g int) bool {
	return s.ep[g] < s.ks.frozen && int64(g) >= s.read.Load()
}
func (s *mapState[K, UK, UV]) All() iter.Seq2[UK, UV] {
	inner := s.readable()
	return func(yield func(UK, UV) bool) {
		for k, v := range inner {
			if !yield(k, v) {
				return
			}
		}
	}
}

// timerService holds an operator's event-time and processing-time timers
// (Flink's InternalTimerService). Processing-time timers are driven by one
// task timer set to the earliest of them; when it expires a mail fires the
// due ones on the task goroutine.
type timerService[K comparable] struct {
	event      timerQueue[K]
	processing timerQueue[K]
	wake       *time.Timer
	wakeAt     int64
	now        func() int64 // the operator's processing time
	ended      bool
	// final: the final watermark (maxWatermark) came. Every timer is due
	// then, so a timer whose OnTimer registers one at a later time (a
	// periodic timer) would keep the firing going forever and the input
	// would never end. The firing at the end goes one step past the
	// timers pending when it begins: those fire, then the timers they
	// register (registeredFinal), and what those register is dropped
	// (firingFinal while one of them fires; droppedFinal counts them).
	final           bool
	registeredFinal map[timerEntry[K]]struct{}
	firingFinal     bool
	droppedFinal    int64
	// keyChecked: the key type was checked at the first registration;
	// keyErr is the verdict.
	keyChecked bool
	keyErr     error
}

func (s *timerService[K]) scheduleProcessing() {
	next, ok := s.processing.peek()
	if !ok || s.ended {
		return
	}
	if s.wakeAt != 0 && s.wakeAt <= next.ts {
		return
	}
	s.wakeAt = next.ts
	// A wait on the wall clock for the time left by the processing-time
	// clock: the same with the wall clock; with a clock a test moves, a
	// timer not due when the wait ends is waited for again.
	s.wake.Reset(time.Duration(next.ts-s.now()) * time.Millisecond)
}

// keyedProcessOperator runs a KeyedProcessFunction.
type keyedProcessOperator[K comparable, I, O any] struct {
	info   opInfo
	keyFn  func(I) K
	hash   func(K) uint32
	par    int
	maxPar int
	newFn  func() KeyedProcessFunction[K, I, O]
	fn     KeyedProcessFunction[K, I, O]
	out    output[O]
	state  keyedState[K]
	timers timerService[K]
	ctx    KeyedContext[K, O]

	// Timer firing is resumable (the backpressure rule): it stops while the
	// task's output is unavailable and the task resumes it, before any
	// further input, once the output has room again.
	t *task
	// wmPending: event-time timers up to ctx.watermark are still due,
	// and the watermark is forwarded only after them, with the stream
	// status that arrived meanwhile (statusHeld, heldIdle).
	wmPending  bool
	statusHeld bool
	heldIdle   bool
	// procPending: due processing-time timers are left to fire.
	procPending bool
	// suspended: registered with the task for resume.
	suspended bool
	// restoredWm is the watermark the restore found (noWatermark: none).
	restoredWm int64
	// held is fn when it holds output back (heldOutput), nil otherwise;
	// heldTimer is the timer it arms.
	held      heldOutput[K, O]
	heldTimer *time.Timer
}

// heldOutput is a KeyedProcessFunction that holds output back between
// checkpoints (a rolling aggregation with EmitLatest) and emits it when
// told: flushHeld runs before every checkpoint barrier leaves the
// operator (prepareSnapshotPreBarrier), so what the function held for
// checkpoint N goes downstream ahead of barrier N and into N's
// transactions, at the end of input, and when the timer the function
// armed with bindHeld's arm expires. bindHeld runs at open, before Open;
// all run on the task goroutine. Nothing held is checkpointed: there is
// nothing held when the state is taken.
type heldOutput[K comparable, O any] interface {
	holds() bool
	bindHeld(g *metrics.Group, arm func(time.Duration))
	flushHeld(ctx *KeyedContext[K, O]) error
}

func (p *keyedProcessOperator[K, I, O]) operator() *opInfo { return &p.info }

func (p *keyedProcessOperator[K, I, O]) open(t *task) error {
	p.t = t
	p.fn = p.newFn()
	if p.fn == nil {
		return p.info.wrap(&unrecoverableError{Err: errNilFunction("process function (from the factory)")})
	}
	p.state.keyedCommon = &keyedCommon{states: map[string]any{}, decls: map[string]string{}, clock: t.cfg.clock}
	p.timers.now = p.state.now
	p.maxPar = t.cfg.maxParallelism
	p.state.groups, p.state.keys = p.maxPar, statecodec.For[K]()
	p.state.groupOf = func(k K) int { return keygroup.ForHash(p.hash(k), p.maxPar) }
	p.state.slotOf = func(k K) int {
		h := p.hash(k)
		return keygroup.ForHash(h, p.maxPar)*slotsPerKeyGroup + int(h/uint32(p.maxPar)%slotsPerKeyGroup)
	}
	if t.cfg.state.backend == kindPebble {
		pk, err := newPebbleKeyed(t, p.info.uid, p.info.subtask, p.par, p.maxPar)
		if err != nil {
			return p.info.wrap(err)
		}
		p.state.pb = pk
		p.state.pbKeys, p.state.pbKeysErr = keyBytesFor[K]("key type")
		if p.state.pbKeysErr != nil && handlesTimers(p.fn) {
			// The DB holds timers by their keys' bytes: say so now, not at
			// the first registration, records into the job.
			return p.info.wrap(fmt.Errorf("its function handles timers, which the pebble state backend keeps by their keys' bytes: %w", p.state.pbKeysErr))
		}
		p.timers.event = newTimerQueue(p.maxPar, p.state.groupOf, timerSets[K](newPebbleTimerSets(&p.state, stateKindEventTimers, p.maxPar)))
		p.timers.processing = newTimerQueue(p.maxPar, p.state.groupOf, timerSets[K](newPebbleTimerSets(&p.state, stateKindProcessingTimers, p.maxPar)))
	} else {
		p.timers.event = newTimerQueue(p.maxPar, p.state.groupOf, timerSets[K](newHeapTimerSets(&p.state, p.maxPar)))
		p.timers.processing = newTimerQueue(p.maxPar, p.state.groupOf, timerSets[K](newHeapTimerSets(&p.state, p.maxPar)))
	}
	if err := p.restoreState(t); err != nil {
		var ue *unrecoverableError
		var io *restoreIOError
		if errors.As(err, &io) && !errors.As(err, &ue) {
			// Reading files and opening a DB may go through on a retry.
			return p.info.wrap(err)
		}
		// Decoding the same checkpoint again fails again.
		return p.info.wrap(&unrecoverableError{Err: err})
	}
	// The restored watermark, not none: event-time timers up to it have
	// fired before the checkpoint, so what they did (a window fired, its
	// state removed) stays done; a record of a fired window that arrives
	// before the upstream's first watermark after the restore is late, as
	// it was in the run before the failure, rather than opening the window
	// again.
	p.ctx = KeyedContext[K, O]{op: &p.state, out: p.out, info: &p.info, watermark: p.restoredWm, timers: &p.timers}
	p.timers.wake = t.newTimer("processing-time timers", p.fireProcessingTimers)
	// Restored processing-time timers: one already due fires at once.
	p.timers.scheduleProcessing()
	if h, ok := p.fn.(heldOutput[K, O]); ok && h.holds() {
		p.held = h
		p.heldTimer = t.newTimer("held output", p.flushHeld)
		h.bindHeld(t.metricGroup(p.info), func(d time.Duration) { p.heldTimer.Reset(d) })
	}
	if o, ok := p.fn.(keyedOpener[K, O]); ok {
		if err := o.Open(&p.ctx); err != nil {
			return p.info.wrap(err)
		}
	}
	return nil
}

// handlesTimers reports that fn is a KeyedProcessFuncs with a Timer
// (KeyedProcess with OnTimer): a function that says it handles timers. A
// KeyedProcessFunction of its own type has an OnTimer whether or not it
// sets timers (the interface requires one), so it is not refused at open;
// its first registration fails instead.
func handlesTimers[K comparable, I, O any](fn KeyedProcessFunction[K, I, O]) bool {
	switch f := fn.(type) {
	case KeyedProcessFuncs[K, I, O]:
		return f.Timer != nil
	case *KeyedProcessFuncs[K, I, O]:
		return f.Timer != nil
	case interface{ handlesTimers() bool }:
		return f.handlesTimers() // the adapter of KeyedCoProcess (connect.go)
	}
	return false
}

func (p *keyedProcessOperator[K, I, O]) Collect(v I, ts int64) error {
	p.info.records++
	p.state.setKey(p.keyFn(v))
	p.ctx.ts, p.ctx.err = ts, nil
	if err := p.fn.ProcessElement(&p.ctx, v); err != nil {
		return p.info.wrap(err)
	}
	if p.state.err != nil {
		return p.info.wrap(p.state.err)
	}
	return p.ctx.err
}

// emitWatermark fires every event-time timer at or before wm, then passes
// wm on: downstream sees the timers' output before the watermark that
// caused it, as results of a window precede the watermark closing it. A
// watermark that does not advance the operator's is ignored: watermarks
// never go back. When the task's output fills up, firing stops and the
// task resumes it (resume) before it processes more input.
func (p *keyedProcessOperator[K, I, O]) EmitWatermark(wm int64) error {
	if wm <= p.ctx.watermark {
		return nil
	}
	p.ctx.watermark = wm
	p.wmPending = true
	if wm == engine.MaxWatermark {
		p.timers.final = true
		p.timers.registeredFinal = map[timerEntry[K]]struct{}{}
	}
	return p.fireEventTimers()
}

func (p *keyedProcessOperator[K, I, O]) fireEventTimers() error {
	for {
		e, ok := p.timers.event.peek()
		if !ok || e.ts > p.ctx.watermark {
			break
		}
		if p.mustYield() {
			p.yield()
			return nil
		}
		p.timers.event.pop()
		if p.timers.final {
			_, p.timers.firingFinal = p.timers.registeredFinal[e]
			delete(p.timers.registeredFinal, e)
		}
		err := p.fire(e, EventTime, e.ts)
		p.timers.firingFinal = false
		if err != nil {
			return err
		}
	}
	p.wmPending = false
	if p.timers.final && p.timers.droppedFinal > 0 {
		p.logger().Warn("event-time timers registered at the end of input by timers that fire there were dropped: a timer that registers another forever would never let the input end",
			"operator", p.info.name, "subtask", p.info.subtask, "dropped", p.timers.droppedFinal)
		p.timers.droppedFinal = 0
	}
	if err := p.out.EmitWatermark(p.ctx.watermark); err != nil {
		return err
	}
	if p.statusHeld {
		p.statusHeld = false
		return p.out.EmitStatus(p.heldIdle)
	}
	return nil
}

// logger is the job's logger (WithLogger), or slog's default.
func (p *keyedProcessOperator[K, I, O]) logger() *slog.Logger {
	if p.t != nil && p.t.cfg != nil && p.t.cfg.cp.logger != nil {
		return p.t.cfg.cp.logger
	}
	return slog.Default()
}

// mustYield reports that the task's output cannot take more now.
func (p *keyedProcessOperator[K, I, O]) mustYield() bool {
	return p.t != nil && !p.t.outputsAvailable()
}

func (p *keyedProcessOperator[K, I, O]) yield() {
	if !p.suspended {
		p.suspended = true
		p.t.suspend(p)
	}
}

// resume goes on firing the timers left due when the output filled up.
// Task goroutine, with the output available.
func (p *keyedProcessOperator[K, I, O]) resume() error {
	p.suspended = false
	if p.wmPending {
		if err := p.fireEventTimers(); err != nil {
			return err
		}
		if p.suspended {
			return nil
		}
	}
	if p.procPending {
		return p.fireDueProcessingTimers()
	}
	return nil
}

func (p *keyedProcessOperator[K, I, O]) fire(e timerEntry[K], d TimeDomain, ts int64) error {
	p.state.setKey(e.key)
	p.ctx.ts, p.ctx.err = ts, nil
	if err := p.fn.OnTimer(&p.ctx, Timer{Timestamp: e.ts, Domain: d}); err != nil {
		return p.info.wrap(err)
	}
	if p.state.err != nil {
		return p.info.wrap(p.state.err)
	}
	return p.ctx.err
}

func (p *keyedProcessOperator[K, I, O]) fireProcessingTimers() error {
	p.timers.wakeAt = 0
	if p.timers.ended {
		return nil
	}
	return p.fireDueProcessingTimers()
}

func (p *keyedProcessOperator[K, I, O]) fireDueProcessingTimers() error {
	now := p.state.now()
	for {
		e, ok := p.timers.processing.peek()
		if !ok || e.ts > now {
			break
		}
		if p.mustYield() {
			p.procPending = true
			p.yield()
			return nil
		}
		p.timers.processing.pop()
		if err := p.fire(e, ProcessingTime, engine.NoTimestampForProcessingTime); err != nil {
			return err
		}
	}
	p.procPending = false
	p.timers.scheduleProcessing()
	return nil
}

// emitStatus passes the status on, after the watermark whose timers are
// still firing, if any.
func (p *keyedProcessOperator[K, I, O]) EmitStatus(idle bool) error {
	if p.wmPending {
		p.statusHeld, p.heldIdle = true, idle
		return nil
	}
	return p.out.EmitStatus(idle)
}

// endInput emits what the function held back (heldOutput), then drops
// pending processing-time timers: the input is over and the wall clock
// would only fire them on a job that has nothing left to do. Event-time
// timers have fired already, with the final maxWatermark.
func (p *keyedProcessOperator[K, I, O]) endInput() error {
	if err := p.flushHeld(); err != nil {
		return err
	}
	p.timers.ended = true
	p.timers.wake.Stop()
	return nil
}

// prepareSnapshotPreBarrier emits what the function held back before the
// barrier goes on (heldOutput), so it belongs to checkpoint id.
func (p *keyedProcessOperator[K, I, O]) prepareSnapshotPreBarrier(int64) error {
	return p.flushHeld()
}

// flushHeld has a function that holds output back emit it; task goroutine.
// A timer that expires after a barrier emitted everything finds nothing,
// or emits early what came since.
func (p *keyedProcessOperator[K, I, O]) flushHeld() error {
	if p.held == nil {
		return nil
	}
	p.heldTimer.Stop()
	p.ctx.err = nil
	if err := p.held.flushHeld(&p.ctx); err != nil {
		return p.info.wrap(err)
	}
	if p.state.err != nil {
		return p.info.wrap(p.state.err)
	}
	return p.ctx.err
}

func (p *keyedProcessOperator[K, I, O]) close() error {
	if p.state.keyedCommon == nil {
		return nil // never opened: an operator after it in the chain failed to open first
	}
	pk := p.state.pb
	if pk == nil {
		return nil
	}
	var err error
	if pk.store != nil {
		pk.be.Closed(pk.store)
		err = pk.store.Close()
	}
	if pk.ownBackend {
		err = errors.Join(err, pk.be.Close())
	}
	return err
}

// restoreState keeps, from every subtask's snapshot of this operator, the
// key groups this subtask owns at its current parallelism: their states,
// kept until the function asks for them, and their pending timers, put
// back in the timer queues at once.
func (p *keyedProcessOperator[K, I, O]) restoreState(t *task) error {
	old, err := t.restored.Subtasks(p.info.uid)
	if err != nil {
		return err
	}
	p.state.restored = map[string][]stateEntry{}
	p.restoredWm = engine.NoWatermark
	restoredWm, hasWm := int64(math.MaxInt64), false
	defer func() {
		if hasWm {
			p.restoredWm = restoredWm
		}
	}()
	var pebbles []pebblestate.Blob
	// Timers from a heap checkpoint, or from a pebble one of layout 100,
	// which kept them in its blob: with the pebble backend they go into
	// the DB once it is open.
	var timers []stateEntry
	for i, b := range old {
		if b == nil {
			continue
		}
		if pebblestate.IsBlob(b) {
			if p.state.pb == nil {
				return fmt.Errorf("restore keyed state: the checkpoint was taken with the pebble state backend and this job uses the heap backend; run it with WithStateBackend(PebbleState(dir)) (state moves from heap to pebble, not back)")
			}
			pbl, err := pebblestate.DecodeBlob(b)
			if err != nil {
				return fmt.Errorf("restore keyed state of subtask %d: %w", i, err)
			}
			if pbl.MaxPar != p.maxPar {
				return fmt.Errorf("restore keyed state: checkpointed with max parallelism %d, the job has %d", pbl.MaxPar, p.maxPar)
			}
			if pbl.KGHi < p.state.pb.kgLo || pbl.KGLo > p.state.pb.kgHi {
				continue
			}
			pebbles = append(pebbles, pbl)
			if b = pbl.Entries; len(b) == 0 {
				continue
			}
		}
		entries, err := decodeStateEntries(b)
		if err != nil {
			return fmt.Errorf("restore keyed state: %w", err)
		}
		for _, e := range entries {
			if keygroup.Subtask(e.keyGroup, p.par, p.maxPar) != p.info.subtask {
				continue
			}
			if e.kind == stateKindWatermark {
				wm, err := decodeWatermark(e.data)
				if err != nil {
					return fmt.Errorf("restore the watermark (key group %d): %w", e.keyGroup, err)
				}
				restoredWm, hasWm = min(restoredWm, wm), true
				continue
			}
			switch e.kind {
			case stateKindEventTimers, stateKindProcessingTimers:
				if p.state.pb != nil {
					timers = append(timers, e)
					continue
				}
			}
			switch e.kind {
			case stateKindEventTimers:
				err = restoreTimers(&p.timers.event, &p.state, e.format, e.data)
			case stateKindProcessingTimers:
				err = restoreTimers(&p.timers.processing, &p.state, e.format, e.data)
			default:
				p.state.restored[e.name] = append(p.state.restored[e.name], e)
			}
			if err != nil {
				return fmt.Errorf("restore %s (key group %d): %w", e.name, e.keyGroup, err)
			}
		}
	}
	if p.state.pb != nil {
		if err := p.openPebble(t, pebbles); err != nil {
			return &restoreIOError{err}
		}
		return p.restorePebbleTimers(len(pebbles) > 0, timers)
	}
	return nil
}

// restoreIOError is a restore that failed to lay out or open the state's
// files (storage or local disk), which a restart may get past, unlike a
// checkpoint that does not decode.
type restoreIOError struct{ err error }

func (e *restoreIOError) Error() string { return e.err.Error() }
func (e *restoreIOError) Unwrap() error { return e.err }

// freezeState is the part of a snapshot on the task goroutine: it
// freezes the epoch (see keyedState) and returns the encoder of every
// state, the carried-over restored entries and the timers, by key group.
// Its cost follows the number of key groups and states, not the number of
// keys or timers (timers.go); the encoder may run on another goroutine
// until thawState.
func (p *keyedProcessOperator[K, I, O]) freezeState(id int64) (func(stop func() bool) ([]byte, []checkpoint.FileHandle, error), error) {
	if p.state.pb != nil {
		return p.freezePebble(id)
	}
	p.state.epoch++
	p.state.frozen = p.state.epoch
	type part struct {
		name  string
		kind  byte
		shape []byte
		enc   func(stop func() bool) (map[int][]byte, error)
	}
	var parts []part
	for name, st := range p.state.states {
		if s, ok := st.(snapshotableState); ok {
			parts = append(parts, part{name, s.kind(), p.state.shapes[name], s.freeze()})
		}
	}
	var carried []stateEntry
	for _, es := range p.state.restored {
		carried = append(carried, es...) // never changed after the restore
	}
	carried = append(carried, p.watermarkEntries()...)
	parts = append(parts,
		part{eventTimersName, stateKindEventTimers, nil, p.timers.event.sets.(*heapTimerSets[K]).freeze()},
		part{processingTimersName, stateKindProcessingTimers, nil, p.timers.processing.sets.(*heapTimerSets[K]).freeze()})
	info := &p.info
	return func(stop func() bool) ([]byte, []checkpoint.FileHandle, error) {
		entries := carried
		for _, pt := range parts {
			groups, err := pt.enc(stop)
			if err != nil {
				return nil, nil, info.wrap(fmt.Errorf("snapshot state %q: %w", pt.name, err))
			}
			for g, data := range groups {
				entries = append(entries, stateEntry{name: pt.name, kind: pt.kind, format: formatColumns, keyGroup: g, data: data})
			}
			entries = append(entries, shapeEntries(pt.name, pt.shape, groups)...)
		}
		return encodeStateEntries(entries), nil, nil
	}, nil
}

// watermarkEntries are the entries of the operator's watermark for the
// key groups of its subtask.
func (p *keyedProcessOperator[K, I, O]) watermarkEntries() []stateEntry {
	lo, hi := keygroup.Range(p.info.subtask, p.par, p.maxPar)
	return watermarkEntries(p.ctx.watermark, lo, hi)
}

// thawState ends the snapshot freezeState began: its encoder returned.
func (p *keyedProcessOperator[K, I, O]) thawState() {
	p.state.frozen = 0
	for _, st := range p.state.states {
		if t, ok := st.(interface{ thaw() }); ok {
			t.thaw()
		}
	}
	if p.state.pb != nil {
		p.thawPebble()
	}
}

// snapshotState is the whole snapshot on the calling goroutine.
func (p *keyedProcessOperator[K, I, O]) snapshotState(id int64) ([]byte, error) {
	enc, err := p.freezeState(id)
	if err != nil {
		return nil, err
	}
	defer p.thawState()
	data, files, err := enc(func() bool { return false })
	if len(files) > 0 {
		return nil, errors.New("a pebble state snapshot has files; it is taken asynchronously, with the checkpoint storage")
	}
	return data, err
}
