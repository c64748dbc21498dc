package keyed

import (
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/runtime/internal/engine"
	"github.com/splitflow/splitflow/runtime/internal/statecodec"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// A TTL state's serde wraps its values' codec, which may be a
// SchemaSerde's: it is a statecodec.SchemaWrapper and SchemaCarrier.

func (s ttlSerde[V]) EvolveSchemas(r statecodec.SchemaRecord) (any, error) {
	in, err := statecodec.Evolve(s.in, r)
	return ttlSerde[V]{in: in}, err
}

func (s ttlSerde[V]) SchemaTexts() []string { return statecodec.Schemas(s.in) }

// recordedSchemas reads the schemas of role that the restored records of
// state name hold (its heap entries' shape records and its pebble table
// entry), before the state claims them.
func (ks *State[K]) recordedSchemas(name, role string) (statecodec.SchemaRecord, error) {
	r := statecodec.SchemaRecord{State: name, Role: role}
	var recs [][]byte
	for _, e := range ks.Restored[name] {
		if e.Kind == stateKindShape {
			recs = append(recs, e.Data)
		}
	}
	if ks.Pebble != nil {
		if s := ks.Pebble.IDs[name]; s.Shape != "" {
			recs = append(recs, []byte(s.Shape))
		}
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		if seen[string(rec)] {
			continue
		}
		seen[string(rec)] = true
		sh, err := stateformat.ParseStateShape(rec)
		if err != nil {
			return r, &engine.UnrecoverableError{Err: fmt.Errorf("state %q: the checkpoint's record of its types: %w", name, err)}
		}
		for _, text := range sh.Schemas(role) {
			if !slices.Contains(r.Recorded, text) {
				r.Recorded = append(r.Recorded, text)
			}
		}
	}
	return r, nil
}

// evolveRole is statecodec.Evolve of role's codec c in state name, from
// what the restore recorded. Its errors fail the job without restarts.
func evolveRole[K comparable, T any](ks *State[K], name, role string, c statecodec.Codec[T]) (statecodec.Codec[T], error) {
	if c.Ext == nil {
		return c, nil
	}
	r, err := ks.recordedSchemas(name, role)
	if err != nil {
		return c, err
	}
	c, err = statecodec.Evolve(c, r)
	if err != nil {
		err = PublicError(err)
	}
	if err != nil {
		return c, &engine.UnrecoverableError{Err: err}
	}
	return c, nil
}
