package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/internal/avrocodec"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// SerdeOption configures a serializer.
type SerdeOption interface{ apply(*serdeConfig) }

type serdeOptionFunc func(*serdeConfig)

func (f serdeOptionFunc) apply(c *serdeConfig) { f(c) }

type serdeConfig struct {
	key          bool
	strategy     SubjectNameStrategy
	autoRegister bool
	references   []sr.SchemaReference
}

// ForKeys makes the serializer's subject the key's (with TopicName,
// "<topic>-key"). Default: the value's.
func ForKeys() SerdeOption { return serdeOptionFunc(func(c *serdeConfig) { c.key = true }) }

// WithSubjectNameStrategy sets how the subject is named (Confluent:
// key.subject.name.strategy, value.subject.name.strategy). Default:
// TopicName.
func WithSubjectNameStrategy(s SubjectNameStrategy) SerdeOption {
	return serdeOptionFunc(func(c *serdeConfig) { c.strategy = s })
}

// WithAutoRegister registers the serializer's schema under its subject
// when it is not there yet (Confluent: auto.register.schemas), where the
// registry checks it against the subject's compatibility rule. Default:
// off, as production deployments want: the schema must have been
// registered beforehand (by a CI step, say), and the serializer only
// looks up its id.
func WithAutoRegister() SerdeOption {
	return serdeOptionFunc(func(c *serdeConfig) { c.autoRegister = true })
}

// WithReferences gives the schemas the serializer's schema references,
// each registered beforehand under its own subject (Confluent: a schema
// reference, {name, subject, version}): for Avro, the named types its
// text uses but does not define, each reference's Name being the type's
// full name ("shop.Money"); for JSON Schema, the documents its $ref
// points to, each Name being the URL the $ref gives ("money.json", or
// relative to the schema's $id). The serializer fetches each referenced
// schema (and the ones it references) to parse or compile its own, and
// looks its schema up or registers it with the references, as the
// registry holds them. Version -1 names the subject's latest version,
// fixed when the serializer is made. Default: none. The Protobuf
// serializer takes none: it derives its references from its file's
// imports, and refuses this option.
func WithReferences(refs ...sr.SchemaReference) SerdeOption {
	return serdeOptionFunc(func(c *serdeConfig) { c.references = append(c.references, refs...) })
}

// header is the Confluent wire format: magic byte 0, then the schema id
// as a big-endian uint32.
var header sr.ConfluentHeader

// AvroSerializer writes values of T as Avro in the Confluent wire format,
// with the id of its schema, which it resolved once, when it was made:
// it never calls the registry per record. It is safe for concurrent use.
type AvroSerializer[T any] struct {
	schema  avro.Schema
	topic   string
	subject string
	id      int
	// prefix is the wire-format header of id, written before each body.
	prefix []byte
	// enc encodes with hamba/avro's encoder of schema for T, built once,
	// when the serializer is made, instead of looking it up in hamba's
	// codec cache by the schema's fingerprint and the value's type on
	// each record; its pooled buffers make a record cost one
	// allocation, its result.
	enc *avrocodec.Encoder[T]
}

// NewAvroSerializer parses schema, the Avro schema's JSON text, and
// resolves its id under the subject of topic
// (TopicName by default): it looks the schema up, or with WithAutoRegister
// registers it, retrying a registry it cannot reach as WithRetries says.
// It fails with an *Error naming the registry and subject when the
// schema is not registered (and auto-registration is off), when the
// registry refuses it (an incompatible schema: HTTP 409), or when the
// registry cannot be reached (the error wraps ErrUnavailable). T is what
// hamba/avro marshals with schema: a struct with `avro` field tags, or a
// map[string]any for a generic record.
//
// The text is registered as given, not in Avro's canonical form, which
// drops field defaults: the registry judges compatibility by them. A
// schema that uses named types registered under other subjects gives
// them WithReferences; the serializer fetches them (a reference it cannot
// fetch fails it, naming the reference) and parses them first.
func NewAvroSerializer[T any](ctx context.Context, c *Client, topic, schemaText string, opts ...SerdeOption) (*AvroSerializer[T], error) {
	cfg := serdeConfig{strategy: TopicName}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if c == nil || topic == "" || cfg.strategy == nil {
		return nil, errors.New("registry: NewAvroSerializer needs a client, a topic and a subject name strategy")
	}
	// A cache of its own: the shared one would keep one definition per
	// name, and a program may hold a record's v1 and v2.
	cache := &avro.SchemaCache{}
	var refs []sr.SchemaReference
	if len(cfg.references) > 0 {
		rs, err := parseAvroReferences(ctx, c, cache, fmt.Sprintf("the serializer's schema for topic %q", topic), cfg.references)
		if err != nil {
			return nil, err
		}
		refs = rs.pinned(cfg.references)
	}
	schema, err := avro.ParseWithCache(schemaText, "", cache)
	if err != nil {
		return nil, fmt.Errorf("registry: the serializer's schema for topic %q does not parse as Avro: %w", topic, err)
	}
	name := ""
	if n, ok := schema.(avro.NamedSchema); ok {
		name = n.FullName()
	}
	subject := cfg.strategy(topic, cfg.key, name)
	if subject == "" {
		return nil, fmt.Errorf("registry: the subject name strategy gave no subject for topic %q and schema %s (record strategies need a named schema)", topic, schema.Type())
	}
	got, err := c.resolve(ctx, subject, sr.Schema{Schema: schemaText, Type: sr.TypeAvro, References: refs}, cfg.autoRegister)
	if err != nil {
		return nil, err
	}
	prefix, err := header.AppendEncode(nil, got.ID, nil)
	if err != nil {
		return nil, fmt.Errorf("registry: the wire-format header of schema id %d of subject %q: %w", got.ID, subject, err)
	}
	return &AvroSerializer[T]{schema: schema, topic: topic, subject: subject, id: got.ID, prefix: prefix, enc: avrocodec.NewEncoder[T](schema)}, nil
}

// ID returns the schema id the serializer writes.
func (s *AvroSerializer[T]) ID() int { return s.id }

// Subject returns the subject the schema was resolved under.
func (s *AvroSerializer[T]) Subject() string { return s.subject }

// Topic returns the topic the serializer writes to.
func (s *AvroSerializer[T]) Topic() string { return s.topic }

// Encode returns v in the wire format: the 5-byte header, then v's Avro
// binary encoding.
func (s *AvroSerializer[T]) Encode(v T) ([]byte, error) {
	out, err := s.enc.Append(nil, s.prefix, v)
	if err != nil {
		return nil, fmt.Errorf("registry: encode a value as schema id %d of subject %q: %w", s.id, s.subject, err)
	}
	return out, nil
}

// Values returns the record serializer of kafka.NewSink that writes each
// element, encoded, as the value of a record to the serializer's topic,
// with no key and the element's timestamp.
func (s *AvroSerializer[T]) Values() kafka.RecordSerializer[T] {
	return kafka.KeyValueSerializer(s.topic, func(v T) ([]byte, []byte, error) {
		b, err := s.Encode(v)
		return nil, b, err
	})
}

// Records returns the record serializer of kafka.NewSink that writes each
// element to values' topic with keyOf(element) encoded by keys as the key
// and the element encoded by values as the value. Keys and values may be
// of different formats (an Avro key, a Protobuf value).
func Records[T, K any](keys Serializer[K], keyOf func(T) K, values Serializer[T]) kafka.RecordSerializer[T] {
	return kafka.KeyValueSerializer(values.Topic(), func(v T) ([]byte, []byte, error) {
		k, err := keys.Encode(keyOf(v))
		if err != nil {
			return nil, nil, err
		}
		b, err := values.Encode(v)
		return k, b, err
	})
}

// AvroDeserializer reads Avro in the Confluent wire format into T. It
// resolves each writer's schema by the id in the record, once per id,
// and reads it into the reader schema by Avro's resolution rules: a
// field the writer has and the reader lacks is skipped, a field the
// reader has and the writer lacks takes its default, numbers widen. So a
// producer that moved to a compatible newer (or older) schema is read
// correctly mid-stream. A writer schema that references others (named
// types registered under their own subjects) is read with them: it
// fetches each reference by subject and version, and the ones those
// reference, and parses them before the writer's schema, once per id.
// It is safe for concurrent use.
//
// A record it cannot read (not in the wire format, an id the registry
// does not know, a writer schema that is not Avro or that the reader
// cannot resolve, a reference the registry does not have or references
// that form a cycle, each named in the error with the schema id, bytes
// that do not decode) gives an error that the
// source's bad-record policy handles. So do bytes left over after the
// value: it was not written with the schema its id names. A registry it
// cannot reach is retried (WithRetries), then gives an error wrapping
// ErrUnavailable, which fails the job under every policy.
type AvroDeserializer[T any] struct {
	c        *Client
	reader   avro.Schema
	writers  *writerSchemas[avroWriter]
	decoders avrocodec.Decoder[T]
}

// avroWriter is how a deserializer reads one writer schema id.
type avroWriter struct {
	// schema is the writer's schema, resolved against the reader's.
	schema avro.Schema
	// dec is hamba/avro's decoder of schema into the deserializer's T,
	// built once per id: Decode calls it directly instead of looking it
	// up in hamba's codec cache by the schema's fingerprint and T on each
	// record. Two ids, even of one Go type, have a decoder each.
	dec avro.ValDecoder
	// pooled says Decode may use a pooled Reader (avrocodec.Pooled):
	// not when the writer's or the reader's schema has bytes.
	pooled bool
}

// NewAvroDeserializer returns a deserializer that reads into T with the
// reader schema. A nil reader schema reads each record with its writer's
// schema, for a generic T (map[string]any, any). It does not contact the
// registry until a record needs it. A nil client is refused (it panics).
func NewAvroDeserializer[T any](c *Client, reader avro.Schema) *AvroDeserializer[T] {
	if c == nil {
		panic("registry: NewAvroDeserializer needs a client")
	}
	d := &AvroDeserializer[T]{c: c, reader: reader}
	d.writers = newWriterSchemas(c, d.resolve)
	return d
}

// Decode reads one value in the wire format.
func (d *AvroDeserializer[T]) Decode(b []byte) (T, error) {
	var v T
	id, payload, err := decodeHeader(b, "Avro")
	if err != nil {
		return v, err
	}
	w, err := d.writers.get(id)
	if err != nil {
		return v, err
	}
	v, err = d.decoders.Decode(w.dec, w.pooled, payload)
	if err != nil {
		return v, fmt.Errorf("registry: the bytes do not decode as schema id %d of %s: %w", id, d.c, err)
	}
	return v, nil
}

// parseAvroReferences fetches the schemas refs name, recursively, and
// parses each into cache after the ones it references, so that the named
// types they define resolve in the schema that references them. what
// names that schema in errors.
func parseAvroReferences(ctx context.Context, c *Client, cache *avro.SchemaCache, what string, refs []sr.SchemaReference) (*references, error) {
	if len(refs) == 0 {
		return &references{}, nil
	}
	rs, err := fetchReferences(ctx, c, what, refs)
	if err != nil {
		return nil, err
	}
	for _, n := range rs.order {
		if n.schema.Type != sr.TypeAvro {
			return nil, fmt.Errorf("registry: %s is %s, not Avro", n.path, n.schema.Type)
		}
		if _, err := avro.ParseWithCache(n.schema.Schema.Schema, "", cache); err != nil {
			return nil, fmt.Errorf("registry: %s does not parse as Avro: %w", n.path, err)
		}
	}
	return rs, nil
}

// resolve reads id's writer schema, with the schemas it references,
// resolved against the reader.
func (d *AvroDeserializer[T]) resolve(ctx context.Context, id int, s sr.Schema) (avroWriter, error) {
	if s.Type != sr.TypeAvro {
		return avroWriter{}, fmt.Errorf("registry: %s: schema id %d is %s, not Avro", d.c, id, s.Type)
	}
	// A cache of its own: the shared one would hold one definition per
	// name, and a writer's v1 and v2 of a record share the name. The
	// referenced schemas' named types go into it first.
	cache := &avro.SchemaCache{}
	if _, err := parseAvroReferences(ctx, d.c, cache, fmt.Sprintf("%s: schema id %d", d.c, id), s.References); err != nil {
		return avroWriter{}, err
	}
	writer, err := avro.ParseWithCache(s.Schema, "", cache)
	if err != nil {
		return avroWriter{}, fmt.Errorf("registry: %s: schema id %d does not parse as Avro: %w", d.c, id, err)
	}
	if d.reader == nil {
		return avroWriter{schema: writer, dec: avrocodec.DecoderOf[T](writer), pooled: avrocodec.Pooled(writer)}, nil
	}
	r, err := avro.NewSchemaCompatibility().Resolve(d.reader, writer)
	if err != nil {
		return avroWriter{}, fmt.Errorf("registry: %s: the writer's schema id %d cannot be read as the reader's schema: %w", d.c, id, err)
	}
	return avroWriter{schema: r, dec: avrocodec.DecoderOf[T](r), pooled: avrocodec.Pooled(writer, d.reader)}, nil
}

// Values returns the deserializer of kafka.NewSource that reads each
// record's value.
func (d *AvroDeserializer[T]) Values() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Value) })
}

// Keys returns the deserializer of kafka.NewSource that reads each
// record's key.
func (d *AvroDeserializer[T]) Keys() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Key) })
}
