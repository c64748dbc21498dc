package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/jhump/protoreflect/v2/protoprint"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// maxMessageIndexes bounds the message indexes a record's header may
// carry (one per level of nesting): a corrupt count is a bad record, not
// an allocation of that size.
const maxMessageIndexes = 32

// ProtobufSerializer writes generated Protobuf messages of type T (a
// pointer, *pb.Order) in the Confluent wire format: the magic byte, the
// id of T's .proto file's schema, T's message indexes in that file, then
// the message's Protobuf encoding. It resolved the id once, when it was
// made: it never calls the registry per record. It is safe for
// concurrent use.
type ProtobufSerializer[T proto.Message] struct {
	topic   string
	subject string
	id      int
	index   []int
}

// NewProtobufSerializer resolves the schema of T's .proto file under the
// subject of topic (TopicName by default; the record strategies name it
// after T's full message name): it looks the schema up, or with
// WithAutoRegister registers it, retrying a registry it cannot reach as
// WithRetries says.
//
// The schema is the .proto text printed from the file's descriptor, which
// generated code embeds. Each file it imports is a schema reference,
// named by its import path and resolved (looked up, or registered) under
// the subject of that same name, before the file itself, as Confluent's
// serializers do; files under google/protobuf/ (the well-known types) are
// not: registries know them. WithReferences is refused: the imports are
// the references.
//
// It fails with an *Error naming the registry and subject when a schema
// is not registered (and auto-registration is off), when the registry
// refuses it (an incompatible schema: HTTP 409), or when the registry
// cannot be reached (the error wraps ErrUnavailable).
func NewProtobufSerializer[T proto.Message](ctx context.Context, c *Client, topic string, opts ...SerdeOption) (*ProtobufSerializer[T], error) {
	cfg := serdeConfig{strategy: TopicName}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if c == nil || topic == "" || cfg.strategy == nil {
		return nil, errors.New("registry: NewProtobufSerializer needs a client, a topic and a subject name strategy")
	}
	if len(cfg.references) > 0 {
		return nil, errReferencesNotDerived
	}
	md, err := messageDescriptor[T]()
	if err != nil {
		return nil, err
	}
	subject := cfg.strategy(topic, cfg.key, string(md.FullName()))
	if subject == "" {
		return nil, fmt.Errorf("registry: the subject name strategy gave no subject for topic %q and message %s", topic, md.FullName())
	}
	s, err := protoSchema(ctx, c, md.ParentFile(), cfg.autoRegister)
	if err != nil {
		return nil, err
	}
	got, err := c.resolve(ctx, subject, s, cfg.autoRegister)
	if err != nil {
		return nil, err
	}
	return &ProtobufSerializer[T]{topic: topic, subject: subject, id: got.ID, index: messageIndex(md)}, nil
}

// messageDescriptor returns the descriptor of T, a generated message type.
func messageDescriptor[T proto.Message]() (md protoreflect.MessageDescriptor, err error) {
	var zero T
	defer func() {
		if recover() != nil {
			md, err = nil, fmt.Errorf("registry: %T is not a generated Protobuf message type (a pointer to a struct protoc-gen-go made): its nil value has no descriptor", zero)
		}
	}()
	if any(zero) == nil {
		return nil, errors.New("registry: the Protobuf serializer needs a generated message type (a pointer, *pb.Order), not an interface type")
	}
	return zero.ProtoReflect().Descriptor(), nil
}

// protoSchema returns fd's schema: its .proto text, and its imports as
// references, each resolved under the subject of its import path first.
func protoSchema(ctx context.Context, c *Client, fd protoreflect.FileDescriptor, autoRegister bool) (sr.Schema, error) {
	var p protoprint.Printer
	var text strings.Builder
	if err := p.PrintProtoFile(fd, &text); err != nil {
		return sr.Schema{}, fmt.Errorf("registry: print %s as .proto text: %w", fd.Path(), err)
	}
	s := sr.Schema{Schema: text.String(), Type: sr.TypeProtobuf}
	imports := fd.Imports()
	for i := range imports.Len() {
		imp := imports.Get(i)
		if wellKnown(imp.Path()) {
			continue
		}
		dep, err := protoSchema(ctx, c, imp.FileDescriptor, autoRegister)
		if err != nil {
			return sr.Schema{}, err
		}
		got, err := c.resolve(ctx, imp.Path(), dep, autoRegister)
		if err != nil {
			return sr.Schema{}, fmt.Errorf("registry: %s imports %s, which must be registered as a reference: %w", fd.Path(), imp.Path(), err)
		}
		s.References = append(s.References, sr.SchemaReference{Name: imp.Path(), Subject: imp.Path(), Version: got.Version})
	}
	return s, nil
}

// wellKnown reports whether path is one of Protobuf's own files (the
// well-known types, descriptor.proto), which registries hold built in.
func wellKnown(path string) bool { return strings.HasPrefix(path, "google/protobuf/") }

// messageIndex returns md's path from its file: the index of its
// top-level message among the file's, then of each nested one within its
// parent. It is what the Confluent header carries after the schema id.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var index []int
	var d protoreflect.Descriptor = md
	for {
		index = append(index, d.Index())
		p := d.Parent()
		if _, ok := p.(protoreflect.FileDescriptor); ok || p == nil {
			break
		}
		d = p
	}
	for i, j := 0, len(index)-1; i < j; i, j = i+1, j-1 {
		index[i], index[j] = index[j], index[i]
	}
	return index
}

// ID returns the schema id the serializer writes.
func (s *ProtobufSerializer[T]) ID() int { return s.id }

// Subject returns the subject the schema was resolved under.
func (s *ProtobufSerializer[T]) Subject() string { return s.subject }

// Topic returns the topic the serializer writes to.
func (s *ProtobufSerializer[T]) Topic() string { return s.topic }

// Encode returns v in the wire format: the 5-byte header, T's message
// indexes (one 0 byte for the file's first message), then v's Protobuf
// encoding.
func (s *ProtobufSerializer[T]) Encode(v T) ([]byte, error) {
	b, err := header.AppendEncode(make([]byte, 0, 64), s.id, s.index)
	if err != nil {
		return nil, err
	}
	b, err = proto.MarshalOptions{}.MarshalAppend(b, v)
	if err != nil {
		return nil, fmt.Errorf("registry: encode a value as schema id %d of subject %q: %w", s.id, s.subject, err)
	}
	return b, nil
}

// Values returns the record serializer of kafka.NewSink that writes each
// element, encoded, as the value of a record to the serializer's topic,
// with no key and the element's timestamp.
func (s *ProtobufSerializer[T]) Values() kafka.RecordSerializer[T] {
	return kafka.KeyValueSerializer(s.topic, func(v T) ([]byte, []byte, error) {
		b, err := s.Encode(v)
		return nil, b, err
	})
}

// ProtobufDeserializer reads Protobuf in the Confluent wire format: into
// a generated message type T (NewProtobufDeserializer), or into a
// *dynamicpb.Message of the writer's message type
// (NewDynamicProtobufDeserializer), where only the registry holds the
// schema. It fetches each writer schema id once, with the schemas it
// references, and parses its .proto text; the record's message indexes
// pick the message in it. It is safe for concurrent use.
//
// A record it cannot read (not in the wire format, an id the registry
// does not know, a schema that is not Protobuf or does not parse, message
// indexes the schema does not have, a message other than T's, bytes that
// do not decode as the message) gives an error that the source's
// bad-record policy handles. A registry it cannot reach is retried
// (WithRetries), then gives an error wrapping ErrUnavailable, which fails
// the job under every policy.
//
// Protobuf's own rules make evolution work: a field the writer has and
// the reader lacks is kept as an unknown field, one the reader has and
// the writer lacks reads as its zero value.
type ProtobufDeserializer[T proto.Message] struct {
	c *Client
	// want is T's descriptor; nil for the dynamic deserializer.
	want    protoreflect.MessageDescriptor
	writers *writerSchemas[protoreflect.FileDescriptor]
}

// NewProtobufDeserializer returns a deserializer into T, a generated
// message type (a pointer, *pb.Order). A record of another message type
// (by full name) is a bad record. It does not contact the registry until
// a record needs it. A nil client, or a T that is not a generated
// message type, is refused (it panics).
func NewProtobufDeserializer[T proto.Message](c *Client) *ProtobufDeserializer[T] {
	if c == nil {
		panic("registry: NewProtobufDeserializer needs a client")
	}
	md, err := messageDescriptor[T]()
	if err != nil {
		panic(err.Error())
	}
	d := &ProtobufDeserializer[T]{c: c, want: md}
	d.writers = newWriterSchemas(c, d.parse)
	return d
}

// NewDynamicProtobufDeserializer returns a deserializer that reads each
// record as a dynamic message of its writer's message type, parsed from
// the schema's .proto text: for a job with no generated code for the
// topic's messages. A nil client is refused (it panics).
func NewDynamicProtobufDeserializer(c *Client) *ProtobufDeserializer[*dynamicpb.Message] {
	if c == nil {
		panic("registry: NewDynamicProtobufDeserializer needs a client")
	}
	d := &ProtobufDeserializer[*dynamicpb.Message]{c: c}
	d.writers = newWriterSchemas(c, d.parse)
	return d
}

// Decode reads one value in the wire format.
func (d *ProtobufDeserializer[T]) Decode(b []byte) (T, error) {
	var zero T
	id, payload, err := decodeHeader(b, "Protobuf")
	if err != nil {
		return zero, err
	}
	index, payload, err := header.DecodeIndex(payload, maxMessageIndexes)
	if err != nil {
		return zero, fmt.Errorf("registry: the message indexes after schema id %d do not decode (more than %d, or cut short): %w", id, maxMessageIndexes, err)
	}
	fd, err := d.writers.get(id)
	if err != nil {
		return zero, err
	}
	md, err := messageAt(fd, index)
	if err != nil {
		return zero, fmt.Errorf("registry: %s: schema id %d: %w", d.c, id, err)
	}
	var m proto.Message
	if d.want == nil {
		m = dynamicpb.NewMessage(md)
	} else {
		if md.FullName() != d.want.FullName() {
			return zero, fmt.Errorf("registry: %s: the record holds a %s (schema id %d, message indexes %v), not the %s the deserializer reads", d.c, md.FullName(), id, index, d.want.FullName())
		}
		m = zero.ProtoReflect().New().Interface()
	}
	if err := proto.Unmarshal(payload, m); err != nil {
		return zero, fmt.Errorf("registry: the bytes do not decode as %s of schema id %d of %s: %w", md.FullName(), id, d.c, err)
	}
	return m.(T), nil
}

// messageAt returns the message index names in fd.
func messageAt(fd protoreflect.FileDescriptor, index []int) (protoreflect.MessageDescriptor, error) {
	if len(index) == 0 {
		return nil, errors.New("the record carries no message index")
	}
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for depth, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message indexes %v name no message: level %d has %d messages", index, depth, msgs.Len())
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}

// parse compiles id's .proto text, fetching the schemas it references
// (and theirs) by subject and version; well-known imports are built in.
func (d *ProtobufDeserializer[T]) parse(ctx context.Context, id int, s sr.Schema) (protoreflect.FileDescriptor, error) {
	if s.Type != sr.TypeProtobuf {
		return nil, fmt.Errorf("registry: %s: schema id %d is %s, not Protobuf", d.c, id, s.Type)
	}
	// The registry does not name the file itself; its imports name the
	// references.
	main := fmt.Sprintf("schema-id-%d.proto", id)
	sources := map[string]string{main: s.Schema}
	var fetch func(refs []sr.SchemaReference) error
	fetch = func(refs []sr.SchemaReference) error {
		for _, r := range refs {
			if _, ok := sources[r.Name]; ok {
				continue
			}
			got, err := d.c.schemaByVersion(ctx, r.Subject, r.Version)
			if err != nil {
				return fmt.Errorf("registry: schema id %d references %s: %w", id, r.Name, err)
			}
			sources[r.Name] = got.Schema.Schema
			if err := fetch(got.References); err != nil {
				return err
			}
		}
		return nil
	}
	if err := fetch(s.References); err != nil {
		return nil, err
	}
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(sources),
	})}
	files, err := comp.Compile(ctx, main)
	if err != nil {
		return nil, fmt.Errorf("registry: %s: schema id %d does not parse as Protobuf: %w", d.c, id, err)
	}
	return files[0], nil
}

// Values returns the deserializer of kafka.NewSource that reads each
// record's value.
func (d *ProtobufDeserializer[T]) Values() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Value) })
}

// Keys returns the deserializer of kafka.NewSource that reads each
// record's key.
func (d *ProtobufDeserializer[T]) Keys() kafka.Deserializer[T] {
	return kafka.DeserializerFunc[T](func(r *kgo.Record) (T, error) { return d.Decode(r.Key) })
}
