package runtime

import (
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State schema evolution: every checkpoint records the shape of each
// state's gob and JSON types, and a restore refuses a removed, renamed or
// retyped field (a *StateSchemaError) unless AllowDroppedFields lets it
// go. The shapes are runtime/internal/statecodec's (stateshape.go); here
// are the names a job uses and the keyed state's records of them.

// stateKindShape is the keyed snapshot entry of a state's shape.
const stateKindShape = stateformat.KindShape

// The engine's own serdes around a codec of the job's type (a TTL value,
// a list, a window record) have that codec's shape: they are
// statecodec.WrappingSerdes.

func (s ttlSerde[V]) WrappedShape() (string, *stateformat.Shape)  { return statecodec.ShapeOf(s.in) }
func (l listSerde[T]) WrappedShape() (string, *stateformat.Shape) { return statecodec.ShapeOf(l.c) }
func (s windowRecordSerde[T]) WrappedShape() (string, *stateformat.Shape) {
	return statecodec.ShapeOf(s.c)
}

// StateSchemaError refuses the restore of a state whose type lost or
// changed a field since its checkpoint was written: encoding/gob and
// encoding/json would decode it without an error and drop the field's
// data. It fails the job without restarts (the same checkpoint would fail
// again).
type StateSchemaError struct {
	State string
	// Role is the type's role in the state: "value type", "map key
	// type", "map value type", "element type", "key type".
	Role string
	// Type names the type now; Encoding is "gob" or "json".
	Type, Encoding string
	// Mismatch says which field (Path) and how.
	Mismatch stateformat.Mismatch
}

func (e *StateSchemaError) Error() string { return (*statecodec.StateSchemaError)(e).Error() }

// AllowDroppedFields lets a state restore from checkpoints whose type had
// the given fields, which its type now lacks: their data is dropped. A
// field is named by its path as the refusal names it ("Total",
// "Stats.Total", "Items[].Total"). By default (none) a restore that would
// drop a field of a gob or JSON encoded type is refused with a
// *StateSchemaError. A later checkpoint no longer has the fields, so the
// option may be removed once the job has checkpointed.
func AllowDroppedFields(fields ...string) StateOption {
	return stateOptionFunc(func(o *stateOptions) { o.dropped = append(o.dropped, fields...) })
}

// allowDropped records, before the state is declared in a subtask, the
// fields its descriptor lets go.
func (c *keyedCommon) allowDropped(name string, fields []string) {
	if len(fields) == 0 {
		return
	}
	if c.dropped == nil {
		c.dropped = map[string][]string{}
	}
	c.dropped[name] = fields
}

// claimShape takes the shape records out of a state's restored entries,
// checks them and the pebble table's against the shape declared now, and
// keeps that one for the state's next checkpoints.
func (ks *keyedState[K]) claimShape(name string, entries []stateEntry, now statecodec.DeclaredShape) ([]stateEntry, error) {
	var recorded [][]byte
	data := entries[:0:0]
	for _, e := range entries {
		if e.kind == stateKindShape {
			recorded = append(recorded, e.data)
			continue
		}
		data = append(data, e)
	}
	if ks.pb != nil {
		if s := ks.pb.ids[name]; s.Shape != "" {
			recorded = append(recorded, []byte(s.Shape))
		}
	}
	if err := statecodec.CheckShape(name, recorded, now, ks.dropped[name]); err != nil {
		if se, ok := err.(*statecodec.StateSchemaError); ok {
			err = (*StateSchemaError)(se)
		}
		return nil, &unrecoverableError{Err: err}
	}
	if ks.shapes == nil {
		ks.shapes = map[string][]byte{}
	}
	ks.shapes[name] = now.Text
	if ks.pb != nil {
		if s, ok := ks.pb.ids[name]; ok {
			s.Shape = string(now.Text)
			ks.pb.ids[name] = s
		}
	}
	return data, nil
}

// shapeEntries are the entries recording state name's shape in the key
// groups it has data in.
func shapeEntries(name string, shape []byte, groups map[int][]byte) []stateEntry {
	if len(shape) == 0 {
		return nil
	}
	out := make([]stateEntry, 0, len(groups))
	for g := range groups {
		out = append(out, stateEntry{name: name, kind: stateKindShape, format: formatColumns, keyGroup: g, data: shape})
	}
	return out
}
