// Package avrostate is the Avro serde of keyed state: a state whose type
// evolves by Avro's rules across restarts, as Flink's Avro state does.
//
// A state declared with WithSerde(avrostate.Must[T](schema)) writes its
// values in Avro's binary encoding under schema, and runtime records the
// schema in every checkpoint (the serde is a state.SchemaSerde). A job
// restored from such a checkpoint with a changed schema reads each value
// under the schema it was written with, resolved to the schema now: a
// field added with a default reads as its default, a field renamed with
// its old name among the new field's aliases keeps its data, a removed
// field is dropped, and int, long and float widen. What Avro cannot
// resolve (a field added without a default, a type it cannot promote, a
// record renamed without an alias) fails the restore, without restarts,
// with a *state.IncompatibleSchemaError naming the state, every
// difference between the two schemas and what to do. This works alike
// on the heap and pebble backends, for checkpoints and savepoints, for
// ValueState, ListState elements and MapState values (a map key's serde
// must keep its bytes, and may not be a SchemaSerde); how the engine
// stores the schemas is in runtime/internal/statecodec/schemaserde.go and
// docs/design/keyed-state.md, "Evolving state".
//
// T is what hamba/avro (v2) marshals with the schema: a struct whose
// `avro` field tags name the schema's fields, or a map[string]any for a
// generic record. Each serde holds hamba's encoder and decoder of its
// schema for T, built once, and one decoder per older schema a restore
// finds, built when the state is declared.
//
// A package of its own, not a part of runtime: runtime defines what a
// schema serde is (state.SchemaSerde) and imports no format, so a job
// without Avro state does not link hamba/avro, and another format could
// implement the same interface. Not under connector/kafka/registry
// either: state has nothing to do with Kafka or a schema registry; the
// schema is the job's own, kept with its checkpoints, and a job with
// Avro state needs neither.
package avrostate
