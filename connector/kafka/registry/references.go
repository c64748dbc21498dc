package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
)

// refKey names a referenced schema as a reference writes it: its subject
// and version.
type refKey struct {
	subject string
	version int
}

// reference is a referenced schema, fetched.
type reference struct {
	// ref is the first reference met that names the schema.
	ref sr.SchemaReference
	// path names ref for errors: from the schema that starts the chain,
	// through each reference, to ref.
	path   string
	schema sr.SubjectSchema
}

// references are the schemas a schema references, directly or through
// others, each fetched once.
type references struct {
	// order holds each schema after every schema it references: the order
	// Avro's named types must be parsed in.
	order []*reference
	byKey map[refKey]*reference
}

// get returns the schema r names; fetchReferences fetched every one.
func (rs *references) get(r sr.SchemaReference) *reference {
	return rs.byKey[refKey{r.Subject, r.Version}]
}

// fetchReferences fetches the schemas refs name by subject and version,
// and, first, the ones those reference, recursively, each once. what
// names the schema refs belong to in errors ("schema id 7"). A reference
// the registry does not have, or one that leads back to a schema it came
// from (a cycle), is an error naming the chain of references from what
// to it; an unreachable registry's error wraps ErrUnavailable.
func fetchReferences(ctx context.Context, c *Client, what string, refs []sr.SchemaReference) (*references, error) {
	rs := &references{byKey: map[refKey]*reference{}}
	onPath := map[refKey]bool{}
	var walk func(from string, refs []sr.SchemaReference) error
	walk = func(from string, refs []sr.SchemaReference) error {
		for _, r := range refs {
			k := refKey{r.Subject, r.Version}
			path := fmt.Sprintf("%s %s (subject %q, version %d)", from, r.Name, r.Subject, r.Version)
			if onPath[k] {
				return fmt.Errorf("registry: %s, which leads back to a schema that references it: the references form a cycle", path)
			}
			if _, ok := rs.byKey[k]; ok {
				continue
			}
			if r.Name == "" || r.Subject == "" {
				return fmt.Errorf("registry: %s: a schema reference needs a name and a subject", path)
			}
			onPath[k] = true
			got, err := c.schemaByVersion(ctx, r.Subject, r.Version)
			if err != nil {
				return fmt.Errorf("registry: %s, which cannot be fetched: %w", path, err)
			}
			if err := walk(path+", which references", got.References); err != nil {
				return err
			}
			onPath[k] = false
			n := &reference{ref: r, path: path, schema: got}
			rs.byKey[k] = n
			rs.order = append(rs.order, n)
		}
		return nil
	}
	if err := walk(what+" references", refs); err != nil {
		return nil, err
	}
	return rs, nil
}

// pinned returns refs with each version the registry gave its schema:
// a reference given as version -1 (the subject's latest) is registered
// with the version that was latest when the serializer was made.
func (rs *references) pinned(refs []sr.SchemaReference) []sr.SchemaReference {
	if len(refs) == 0 {
		return nil
	}
	out := make([]sr.SchemaReference, len(refs))
	for i, r := range refs {
		out[i] = r
		if n := rs.get(r); n != nil && n.schema.Version > 0 {
			out[i].Version = n.schema.Version
		}
	}
	return out
}

// errReferencesNotDerived refuses WithReferences where a serializer
// derives its references itself.
var errReferencesNotDerived = errors.New("registry: the Protobuf serializer registers the files its message's file imports as its references; WithReferences is for the Avro and JSON Schema serializers")
