package keyed

import (
	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// allowDropped records, before the state is declared in a subtask, the
// fields its descriptor lets go.
func (c *Common) allowDropped(name string, fields []string) {
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
func (ks *State[K]) claimShape(name string, entries []Entry, now statecodec.DeclaredShape) ([]Entry, error) {
	var recorded [][]byte
	data := entries[:0:0]
	for _, e := range entries {
		if e.Kind == stateKindShape {
			recorded = append(recorded, e.Data)
			continue
		}
		data = append(data, e)
	}
	if ks.Pebble != nil {
		if s := ks.Pebble.IDs[name]; s.Shape != "" {
			recorded = append(recorded, []byte(s.Shape))
		}
	}
	if err := statecodec.CheckShape(name, recorded, now, ks.dropped[name]); err != nil {
		err = PublicError(err)
		return nil, &engine.UnrecoverableError{Err: err}
	}
	if ks.shapes == nil {
		ks.shapes = map[string][]byte{}
	}
	ks.shapes[name] = now.Text
	if ks.Pebble != nil {
		if s, ok := ks.Pebble.IDs[name]; ok {
			s.Shape = string(now.Text)
			ks.Pebble.IDs[name] = s
		}
	}
	return data, nil
}

// shapeEntries are the entries recording state name's shape in the key
// groups it has data in.
func shapeEntries(name string, shape []byte, groups map[int][]byte) []Entry {
	if len(shape) == 0 {
		return nil
	}
	out := make([]Entry, 0, len(groups))
	for g := range groups {
		out = append(out, Entry{Name: name, Kind: stateKindShape, Format: formatColumns, KeyGroup: g, Data: shape})
	}
	return out
}

// stateKindShape is the keyed snapshot entry of a state's shape.
const stateKindShape = stateformat.KindShape

// The engine's own serdes around a codec of the job's type (a TTL value,
// a list, a window record) have that codec's shape: they are
// statecodec.WrappingSerdes.

func (s ttlSerde[V]) WrappedShape() (string, *stateformat.Shape)  { return statecodec.ShapeOf(s.in) }
func (l listSerde[T]) WrappedShape() (string, *stateformat.Shape) { return statecodec.ShapeOf(l.c) }
