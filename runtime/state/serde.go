package state

import (
	"fmt"
	"reflect"

	"github.com/splitflow/splitflow/runtime/internal/keyed"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
)

// How state values are encoded (the built-in binary encodings, gob, JSON,
// a job's own Serde), the columns of a heap snapshot, and the checks of a
// state's types at declaration are runtime/internal/statecodec's; this
// file holds the names a job uses and the descriptors' options.

// Serde is how values of T are written in checkpoints (and held, with the
// pebble backend): the encoding of one value, given to a state descriptor
// with WithSerde or WithMapKeySerde. The built-in ones are DefaultSerde
// (the binary encodings of strings, numbers and bools, gob for the rest),
// GobSerde and JSONSerde; a job may implement its own.
//
// A checkpoint records which serde wrote each state: the built-in ones by
// their encoding, the job's own by Name. A restore whose state was
// written by another serde, or under another name, is refused with an
// error naming both, so a job that changes an encoding incompatibly
// changes its serde's name with it (a version in the name, "point/v2",
// and a state of a new name, is one way to move); a serde that reads
// values written under its earlier schemas implements SchemaSerde, and
// its state's type may then change as its schema's rules allow (package
// runtime/avrostate: Avro's). Methods may be called
// from any goroutine at once (the heap backend encodes snapshots off the
// task goroutine).
type Serde[T any] interface {
	// Name identifies the encoding in checkpoints; never empty.
	Name() string
	// Append appends v's encoding to dst and returns the extended slice.
	Append(dst []byte, v T) ([]byte, error)
	// Decode decodes a value from b, which holds exactly what one Append
	// appended. It must not keep b.
	Decode(b []byte) (T, error)
}

// Serde and statecodec.Serde have the same methods: each converts to the
// other, so that the engine takes a job's Serde as it is.
var (
	_ Serde[int]            = statecodec.Serde[int](nil)
	_ statecodec.Serde[int] = Serde[int](nil)
)

// DefaultSerde is the serde a state of T gets when none is given: a
// compact binary encoding for strings, byte slices, integers (varints),
// floats (IEEE 754 bits) and bools, and named types over them that do
// not encode themselves; encoding/gob for every other type.
//
// The gob rule: a type written with gob must be one gob encodes whole:
// basic types, slices, arrays, maps and pointers of such, and structs
// whose fields are all exported and of such types, at any depth;
// interface values need their concrete types registered with
// gob.Register. A type that encodes itself (encoding.BinaryMarshaler
// with BinaryUnmarshaler, or gob.GobEncoder with GobDecoder) is taken as
// it is. Anything else (an unexported field, which gob would silently
// drop so that a restore brings it back as its zero value; a func or
// chan field; a chan or func type) is refused with a *TypeError
// naming the state, the type and the field: a descriptor's value, map
// and element types when it is made (it panics), the stream's key type
// when the state is first used (the job fails at once, without
// restarts).
func DefaultSerde[T any]() Serde[T] { return statecodec.Default[T]() }

// GobSerde writes values with encoding/gob, the default for types without
// a built-in binary encoding; gob's rules are checked when the state is
// declared (see DefaultSerde).
func GobSerde[T any]() Serde[T] { return statecodec.Gob[T]() }

// JSONSerde writes values with encoding/json: the fallback for types gob
// does not suit, or whose checkpoints other tools read. The type is
// checked when the state is declared: a field JSON would drop or could
// not bring back (unexported, tagged "-", an interface, func, chan or
// complex number, a map key that is not a string, integer or
// encoding.TextMarshaler) is refused, unless the type implements
// json.Marshaler and json.Unmarshaler itself.
func JSONSerde[T any]() Serde[T] { return statecodec.JSON[T]() }

// Option configures a state descriptor (NewValueState and the others).
type Option interface{ applyState(*stateOptions) }

type stateOptions struct {
	serde, mapKeySerde any
	ttl                *keyed.TTLConfig // WithTTL (ttl.go)
	dropped            []string         // AllowDroppedFields (errors.go)
}

type stateOptionFunc func(*stateOptions)

func (f stateOptionFunc) applyState(o *stateOptions) { f(o) }

// WithSerde sets the serde of a state's values (a MapState's map values);
// default DefaultSerde of the value type. It must be a Serde of that
// type, or the descriptor's constructor panics.
func WithSerde[T any](s Serde[T]) Option {
	return stateOptionFunc(func(o *stateOptions) { o.serde = s })
}

// WithMapKeySerde sets the serde of a MapState's map keys; default
// DefaultSerde of the map key type.
func WithMapKeySerde[T any](s Serde[T]) Option {
	return stateOptionFunc(func(o *stateOptions) { o.mapKeySerde = s })
}

func stateOptionsOf(name string, opts []Option) stateOptions {
	if name == "" {
		panic("state: a state descriptor needs a name")
	}
	var o stateOptions
	for _, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("state %q: nil Option", name))
		}
		opt.applyState(&o)
	}
	return o
}

// mustCodec is the codec of a descriptor's role (value type, map key
// type...) from the serde given by option opt (nil for the default),
// with the type checked for that codec; it panics on a mistake, with a
// *TypeError for a type the codec would not bring back whole.
func mustCodec[T any](name, role string, given any, opt string) statecodec.Codec[T] {
	c, err := statecodec.Choose[T](name, role, given, opt)
	if err != nil {
		panic((*TypeError)(err))
	}
	return c
}

// Keyed state whose types have no built-in encoding is checkpointed with
// encoding/gob, which refuses some types only when it first encodes one
// and silently drops what it cannot see: so the types of a state are
// checked when the state is declared (statecodec.CheckGob, in
// statecodec's statetype.go), and a type that would not come back whole
// fails the job there.

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }
