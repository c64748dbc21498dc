// Package state is the keyed state of splitflow jobs: the descriptors a
// job declares its state with, the serdes that write it into checkpoints,
// time to live, the backends that hold it, and the errors that refuse a
// state or its restore.
//
// State is declared once, by a descriptor in a package variable, and used
// from the function of a keyed stream with the call's context (a
// *runtime.KeyedContext):
//
//	var count = state.NewValueState[int64]("count")
//
//	func countWord(ctx *runtime.KeyedContext[string, wordCount], w string) error {
//		n, _, err := count.Get(ctx)
//		ctx.Collect(wordCount{w, n + 1})
//		return errors.Join(err, count.Set(ctx, n+1))
//	}
//
// Every subtask of every operator that uses a descriptor gets a state of
// its own, declared on first use and checkpointed by key group under the
// descriptor's name; the descriptor itself holds nothing and may be
// shared freely. NewMapState declares a map per key, NewListState a list,
// NewReducingState and NewAggregatingState a value folded from what is
// added. A function with fields of its own (runtime.KeyedProcessPerSubtask)
// takes a descriptor's Handle in Open. Descriptors take any key type: a
// key of a basic kind (string, integer, float, bool, or a named type over
// one) and any other comparable type (a struct, an array, a type that
// encodes itself) alike, checkpointed in the key type's own encoding.
//
// # Serdes
//
// Values are written in checkpoints (and held, with the pebble backend)
// by a Serde: DefaultSerde of the type unless WithSerde gives another (a
// built-in binary one, GobSerde, JSONSerde or the job's own). A
// descriptor checks its types for its serde when it is made and panics
// with a *TypeError on one that would not come back whole; a checkpoint
// records the serde of every state, and a restore with another is
// refused. A gob or JSON type that lost or changed a field since its
// checkpoint fails the restore with a *SchemaError, unless
// AllowDroppedFields lets the field go. A serde that implements
// SchemaSerde (runtime/avrostate's Avro serde) records its writer schema
// too, and a restore reads each value under the schema it was written
// with, resolved to the serde's schema now: the state's type may then
// evolve as the schema's rules allow (an Avro field added with a default,
// renamed through an alias), and a change they do not allow fails the
// restore with an *IncompatibleSchemaError naming the state.
//
// # Time to live
//
// WithTTL gives a ValueState, MapState, ListState, ReducingState or
// AggregatingState a time to live in processing time, as Flink's
// StateTtlConfig: a value (a map entry, a list element: each on its own)
// not written for that long (TTLOnReadAndWrite: neither read nor
// written) is never returned again, and is removed when read, from
// checkpoints of the heap backend, and a few at a time as the state is
// used (TTLCleanupPerAccess). Its values are stored with their
// timestamps, so turning TTL on or off for a state refuses the restore
// of its checkpoints, naming it. A state name declared twice in an
// operator with different TTLs (or once with and once without) fails
// the call, naming the state.
//
// # Backends
//
// Where state lives is the job's choice, not the descriptor's:
// runtime.WithStateBackend(state.Heap()), the default, or
// state.Pebble(dir), for state larger than memory and incremental
// checkpoints.
package state
