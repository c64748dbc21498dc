// Package registry reads and writes Kafka records in the schema registry
// wire format (a magic byte 0, the schema's 4-byte id, the encoded value),
// with a registry that speaks the Confluent API (Confluent Schema
// Registry, Apicurio Registry's /apis/ccompat/v7, Redpanda).
//
// A Client holds the connection: URLs, basic auth or a bearer token, TLS,
// timeouts and retries. Its credentials never appear in its String, its
// log value or its errors.
//
// AvroSerializer plugs into kafka.NewSink (Values, or Records for a key
// too). It resolves its schema's id once, when it is made: by looking it
// up under its subject, or with WithAutoRegister (off by default) by
// registering it, which the registry checks against the subject's
// compatibility rule. It never calls the registry per record.
//
// AvroDeserializer plugs into kafka.NewSource (Values or Keys). It fetches
// each writer schema id once, on the first record that carries it, and
// reads the writer's bytes into the reader's schema by Avro's resolution
// rules, so a producer that moves to a compatible schema mid-stream is
// read correctly. A record it cannot read is a bad record for the
// source's policy (fail, WithSkipBadRecords, WithDeadLetterOutput); a
// registry it cannot reach, after its retries, fails the job under every
// policy (ErrUnavailable wraps kafka.ErrDeserializerUnavailable).
package registry
