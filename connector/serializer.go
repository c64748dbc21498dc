package connector

import "errors"

// ErrUnsupportedVersion is wrapped by VersionedSerializer.Deserialize when
// the data was written in a version this build cannot read, typically a
// checkpoint taken by a newer release. Match it with errors.Is.
var ErrUnsupportedVersion = errors.New("unsupported serializer version")

// ErrInvalidConfiguration is wrapped by a connector's error that no restart
// can fix, such as a Kafka sink whose transaction timeout is shorter than a
// checkpoint can take. The engine fails the job with it at once instead of
// restarting under its restart strategy. Match it with errors.Is.
var ErrInvalidConfiguration = errors.New("invalid configuration")

// VersionedSerializer encodes values that go into checkpoints: splits,
// enumerator state, committables, writer state. The engine stores the version
// next to the bytes, so a later release can still read what an earlier one
// wrote.
//
// Implementations must be safe for concurrent use: the engine may serialize
// from several goroutines at once.
type VersionedSerializer[X any] interface {
	// Version is the version Serialize writes. Bump it whenever the encoding
	// changes, and keep Deserialize able to read every older version.
	Version() int

	// Serialize encodes x. The returned slice is the caller's.
	Serialize(x X) ([]byte, error)

	// Deserialize decodes data written by Serialize of the given version.
	// It must not keep a reference to data. For a version it does not know
	// it returns an error wrapping ErrUnsupportedVersion.
	Deserialize(version int, data []byte) (X, error)
}
