// Package statecodec is how keyed state values are written in
// checkpoints (and held, with the pebble backend): the codec of each type
// a state is declared with, chosen from the type or from the Serde the
// job gives (the built-in binary encodings of strings, byte slices,
// numbers and bools, encoding/gob, encoding/json, a job's own Serde, a
// SchemaSerde's values tagged with their writer schemas); the columns a
// heap snapshot writes a key group's values in and reads them back from;
// the copies the heap backend hands a function; the checks of a state's
// types when it is declared (what gob or JSON would not bring back whole);
// and the shapes of gob and JSON types that a checkpoint records so that a
// restore can refuse a dropped or retyped field.
//
// Packages runtime/state and runtime are its users: the descriptors
// choose codecs here, and the keyed state, timers and pebble backend
// encode and decode through them. The names a job uses (Serde,
// DefaultSerde, GobSerde, JSONSerde, SchemaSerde, and the errors
// TypeError, SchemaError and IncompatibleSchemaError) are runtime/state's,
// documented there: this package has interfaces of the same methods and
// errors of the same fields, which runtime/state converts to its own, so
// that its documentation stays whole and a job's serde needs nothing
// from here. Nothing here knows of
// operators, key groups or backends; the bytes it writes are in
// checkpoints, so its codec ids and encodings never change meaning.
package statecodec
