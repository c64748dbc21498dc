// Package registry reads and writes Kafka records in the schema registry
// wire format (a magic byte 0, the schema's 4-byte id, for Protobuf the
// message indexes, then the encoded value), with a registry that speaks
// the Confluent API (Confluent Schema Registry, Apicurio Registry's
// /apis/ccompat/v7, Redpanda), in three formats: Avro (hamba/avro),
// Protobuf (generated message types, or dynamic messages of the
// registry's schema) and JSON Schema. It also reads plain JSON strictly,
// with no registry (StrictJSONDeserializer).
//
// A Client holds the connection: URLs, basic auth or a bearer token, TLS,
// timeouts and retries. Its credentials never appear in its String, its
// log value or its errors.
//
// The serializers (AvroSerializer, ProtobufSerializer,
// JSONSchemaSerializer) plug into kafka.NewSink (Values, or Records for a
// key too, of any format). Each resolves its schema's id once, when it is
// made: by looking it up under its subject, or with WithAutoRegister (off
// by default) by registering it, which the registry checks against the
// subject's compatibility rule. It never calls the registry per record.
// The Protobuf serializer registers the .proto text of its message's file
// and, first, each file it imports (but the well-known types) as a schema
// reference under the subject of its import path; each record carries
// its message's indexes in the file. The Avro and JSON Schema
// serializers are given the schemas their schema references (registered
// beforehand under their own subjects) with WithReferences (default
// none): they fetch them to parse or compile their own schema, and look
// it up or register it with them. The JSON Schema serializer does not
// write a value its schema does not validate.
//
// The deserializers (AvroDeserializer, ProtobufDeserializer,
// JSONSchemaDeserializer) plug into kafka.NewSource (Values or Keys). Each
// fetches each writer schema id once, on the first record that carries
// it. Avro reads the writer's bytes into the reader's schema by Avro's
// resolution rules, so a producer that moves to a compatible schema
// mid-stream is read correctly; Protobuf parses the writer's .proto text
// (protocompile) with its references and reads the message the indexes
// name, into the generated type (another message is a bad record) or a
// dynamic one; JSON Schema validates each value against the writer's
// schema (santhosh-tekuri/jsonschema) before reading it.
//
// Schema references work in all three formats: a deserializer fetches
// each reference of a writer schema by subject and version, and the ones
// those reference, once per schema id. Avro parses them first, so that the
// named types they define (a reference's name is the type's full name)
// resolve in the writer's schema; a JSON schema's $ref to a reference's
// name reads that reference, and a $ref to anything outside the schema
// and its references is an error naming it. A reference the registry does
// not have, or references that form a cycle, make the record a bad one,
// with an error naming the schema id and the chain of references.
//
// A record a deserializer cannot read, or that does not validate, is a
// bad record for the source's policy (fail, WithSkipBadRecords,
// WithDeadLetterOutput); a registry it cannot reach, after its retries,
// fails the job under every policy (ErrUnavailable wraps
// kafka.ErrDeserializerUnavailable).
//
// StrictJSONDeserializer reads plain JSON values into a Go type so that a
// renamed or dropped field is a bad record rather than a silent zero: a
// member no field has, a field without omitempty or omitzero left out, and
// a number that overflows its field are errors.
package registry
