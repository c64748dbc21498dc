package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// JSONSchemaSerializer writes values of T as JSON (encoding/json) in the
// Confluent wire format, with the id of its JSON schema, which it
// resolved once, when it was made: it never calls the registry per
// record. It validates each value against the schema before it writes it.
// It is safe for concurrent use.
type JSONSchemaSerializer[T any] struct {
	schema  *jsonschema.Schema
	topic   string
	subject string
	id      int
}

// NewJSONSchemaSerializer compiles schemaText, a JSON schema (draft 7
// unless its $schema names another, as Confluent's default is), and
// resolves its id under the subject of topic (TopicName by default; the
// record strategies name it after the schema's "title"): it looks the
// schema up, or with WithAutoRegister registers it, retrying a registry
// it cannot reach as WithRetries says. It fails as NewAvroSerializer
// does. A $ref may point inside the schema, or to a schema registered
// under another subject that WithReferences names (the reference's name
// is the URL the $ref gives); the serializer fetches those (a reference
// it cannot fetch fails it, naming the reference) and compiles with them.
// No file or URL is read.
func NewJSONSchemaSerializer[T any](ctx context.Context, c *Client, topic, schemaText string, opts ...SerdeOption) (*JSONSchemaSerializer[T], error) {
	cfg := serdeConfig{strategy: TopicName}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if c == nil || topic == "" || cfg.strategy == nil {
		return nil, errors.New("registry: NewJSONSchemaSerializer needs a client, a topic and a subject name strategy")
	}
	what := fmt.Sprintf("the serializer's JSON schema for topic %q", topic)
	rs, err := fetchJSONReferences(ctx, c, what, cfg.references)
	if err != nil {
		return nil, err
	}
	schema, title, err := compileJSONSchema(schemaText, "topic-"+topic, what, rs, cfg.references)
	if err != nil {
		return nil, err
	}
	subject := cfg.strategy(topic, cfg.key, title)
	if subject == "" {
		return nil, fmt.Errorf("registry: the subject name strategy gave no subject for topic %q (record strategies need the schema's \"title\")", topic)
	}
	got, err := c.resolve(ctx, subject, sr.Schema{Schema: schemaText, Type: sr.TypeJSON, References: rs.pinned(cfg.references)}, cfg.autoRegister)
	if err != nil {
		return nil, err
	}
	return &JSONSchemaSerializer[T]{schema: schema, topic: topic, subject: subject, id: got.ID}, nil
}

// jsonSchemaBase is where the compiler holds a schema from the registry:
// a relative $ref in it ("money.json") resolves under the same base as the
// names of its references, so that the reference of that name is what the
// $ref reads. No document is ever read from it.
const jsonSchemaBase = "mem://splitflow/"

// compileJSONSchema compiles text, held as name and called what in
// errors, with the schemas refs name (fetched into rs) as the documents
// its $refs may point to, and returns its "title" too.
func compileJSONSchema(text, name, what string, rs *references, refs []sr.SchemaReference) (*jsonschema.Schema, string, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, "", fmt.Errorf("registry: %s is not JSON: %w", what, err)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft7)
	// A schema from the registry must not make the job read files or
	// URLs: the default loader would read any file:// $ref.
	comp.UseLoader(refusingLoader{})
	loc := jsonSchemaBase + name + ".json"
	if err := comp.AddResource(loc, doc); err != nil {
		return nil, "", fmt.Errorf("registry: %s: %w", what, err)
	}
	if err := addJSONReferences(comp, documentBase(loc, doc), rs, refs, map[string]bool{loc: true}); err != nil {
		return nil, "", err
	}
	schema, err := comp.Compile(loc)
	if err != nil {
		return nil, "", fmt.Errorf("registry: %s does not compile as a JSON schema: %w", what, err)
	}
	title := ""
	if m, ok := doc.(map[string]any); ok {
		title, _ = m["title"].(string)
	}
	return schema, title, nil
}

// addJSONReferences adds to comp each schema refs name, and the ones it
// references, as a resource at its reference's name resolved against
// base, the URL of the document that references it (its $id, or where it
// is held), as a $ref in that document resolves it; added holds the URLs
// given a document already.
func addJSONReferences(comp *jsonschema.Compiler, base *url.URL, rs *references, refs []sr.SchemaReference, added map[string]bool) error {
	for _, r := range refs {
		n := rs.get(r)
		name, err := url.Parse(r.Name)
		if err != nil {
			return fmt.Errorf("registry: %s: the name is not a URL a $ref can give: %w", n.path, err)
		}
		u := base.ResolveReference(name)
		u.Fragment = ""
		if added[u.String()] {
			continue
		}
		added[u.String()] = true
		if n.schema.Type != sr.TypeJSON {
			return fmt.Errorf("registry: %s is %s, not a JSON schema", n.path, n.schema.Type)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(n.schema.Schema.Schema))
		if err != nil {
			return fmt.Errorf("registry: %s is not JSON: %w", n.path, err)
		}
		if err := comp.AddResource(u.String(), doc); err != nil {
			return fmt.Errorf("registry: %s: %w", n.path, err)
		}
		if err := addJSONReferences(comp, documentBase(u.String(), doc), rs, n.schema.References, added); err != nil {
			return err
		}
	}
	return nil
}

// documentBase returns the URL a relative $ref in doc, held at loc,
// resolves against: its $id, itself resolved against loc, or loc.
func documentBase(loc string, doc any) *url.URL {
	base, _ := url.Parse(loc)
	if m, ok := doc.(map[string]any); ok {
		if id, ok := m["$id"].(string); ok {
			if u, err := url.Parse(id); err == nil {
				return base.ResolveReference(u)
			}
		}
	}
	return base
}

// fetchJSONReferences fetches the schemas refs name, recursively; what
// names the schema that references them in errors.
func fetchJSONReferences(ctx context.Context, c *Client, what string, refs []sr.SchemaReference) (*references, error) {
	if len(refs) == 0 {
		return &references{}, nil
	}
	return fetchReferences(ctx, c, what, refs)
}

// refusingLoader loads nothing: a schema's $ref may point only inside it
// or to one of its references.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	// A relative $ref is named as the schema gave it.
	name := strings.TrimPrefix(url, jsonSchemaBase)
	return nil, fmt.Errorf("$ref %s is outside the schema and is none of its schema references; the JSON Schema serdes read no other documents (no file, no URL)", name)
}

// ID returns the schema id the serializer writes.
func (s *JSONSchemaSerializer[T]) ID() int { return s.id }

// Subject returns the subject the schema was resolved under.
func (s *JSONSchemaSerializer[T]) Subject() string { return s.subject }

// Topic returns the topic the serializer writes to.
func (s *JSONSchemaSerializer[T]) Topic() string { return s.topic }

// Encode returns v in the wire format: the 5-byte header, then v as JSON.
// A value the schema does not validate is an error, with what failed
// where (the *jsonschema.ValidationError is wrapped).
func (s *JSONSchemaSerializer[T]) Encode(v T) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("registry: encode a value as JSON for schema id %d of subject %q: %w", s.id, s.subject, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("registry: encode a value as JSON for schema id %d of subject %q: %w", s.id, s.subject, err)
	}
	if err := s.schema.Validate(inst); err != nil {
		return nil, fmt.Errorf("registry: a value does not validate against schema id %d of subject %q, and is not written: %w", s.id, s.subject, err)
	}
	b, err := header.AppendEncode(make([]byte, 0, 5+len(body)), s.id, nil)
	if err != nil {
		return nil, err
	}
	return append(b, body...), nil
}

// Values returns the record serializer of kafka.NewSink that writes each
// element, encoded, as the value of a record to the serializer's topic,
// with no key and the element's timestamp.
func (s *JSONSchemaSerializer[T]) Values() kafka.RecordSerializer[T] {
	return kafka.KeyValueSerializer(s.topic, func(v T) ([]byte, []byte, error) {
		b, err := s.Encode(v)
		return nil, b, err
	})
}

// JSONSchemaDeserializer reads JSON in the Confluent wire format into T
// (encoding/json), after validating it against the JSON schema its id
// names, which it fetches once per id, with the schemas it references
// (recursively): each is the document a $ref to the reference's name
// reads. It is safe for concurrent use.
//
// A record it cannot read (not in the wire format, an id the registry
// does not know, a schema that is not a JSON schema or does not compile,
// a reference the registry does not have or references that form a
// cycle, each named in the error with the schema id,
// bytes that are not one JSON value, a value the schema does not validate,
// or one that does not read into T) gives an error that the source's
// bad-record policy handles. A registry it cannot reach is retried
// (WithRetries), then gives an error wrapping ErrUnavailable, which fails
// the job under every policy.
type JSONSchemaDeserializer[T any] struct {
	c       *Client
	writers *writerSchemas[*jsonschema.Schema]
}

// NewJSONSchemaDeserializer returns a deserializer into T: a struct with
// `json` field tags, or map[string]any. It does not contact the registry
// until a record needs it. A nil client is refused (it panics).
func NewJSONSchemaDeserializer[T any](c *Client) *JSONSchemaDeserializer[T] {
	if c == nil {
		panic("registry: NewJSONSchemaDeserializer needs a client")
	}
	d := &JSONSchemaDeserializer[T]{c: c}
	d.writers = newWriterSchemas(c, d.compile)
	return d
}

func (d *JSONSchemaDeserializer[T]) compile(ctx context.Context, id int, s sr.Schema) (*jsonschema.Schema, error) {
	if s.Type != sr.TypeJSON {
		return nil, fmt.Errorf("registry: %s: schema id %d is %s, not a JSON schema", d.c, id, s.Type)
	}
	what := fmt.Sprintf("%s: schema id %d", d.c, id)
	rs, err := fetchJSONReferences(ctx, d.c, what, s.References)
	if err != nil {
		return nil, err
	}
	schema, _, err := compileJSONSchema(s.Schema, fmt.Sprintf("schema-id-%d", id), what, rs, s.References)
	return schema, err
}

// Decode reads one value in the wire format.
func (d *JSONSchemaDeserializer[T]) Decode(b []byte) (T, error) {
	var v T
	id, payload, err := decodeHeader(b, "JSON")
	if err != nil {
		return v, err
	}
	schema, err := d.writers.get(id)
	if err != nil {
		return v, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return v, fmt.Errorf("registry: the bytes after schema id %d of %s are not one JSON value: %w", id, d.c, err)
	}
	if err := schema.Validate(inst); err != nil {
		return v, fmt.Errorf("registry: the value does not validate against schema id %d of %s: %w", id, d.c, err)
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("registry: the value of schema id %d of %s does not read into %T: %w", id, d.c, v, err)
	}
	return v, nil
}

// Values returns the deserializer of kafka.NewSource that reads each
// record's value.
func (d *JSONSchemaDeserializer[T]) Values() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Value) })
}

// Keys returns the deserializer of kafka.NewSource that reads each
// record's key.
func (d *JSONSchemaDeserializer[T]) Keys() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Key) })
}
