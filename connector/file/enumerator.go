package file

import (
	"encoding/binary"
	"fmt"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/connector/base"
)

// EnumeratorState is the enumerator's checkpoint: the splits not assigned to
// any reader, in the order they will be handed out.
type EnumeratorState struct {
	Pending []Split
}

// enumerator is base's StaticEnumerator in pull mode (one split per
// request, splits of a failed reader handed out first) under the file
// source's own checkpoint type. EnumeratorState is kept rather than
// base.StaticEnumeratorState because the type's name is part of the job
// fingerprint: checkpoints taken before the port restore only with it.
type enumerator struct {
	*base.StaticEnumerator[Split]
}

func newEnumerator(ctx connector.SplitEnumeratorContext[Split], pending []Split) (connector.SplitEnumerator[Split, EnumeratorState], error) {
	e, err := base.NewStaticEnumerator(ctx, pending)
	if err != nil {
		return nil, fmt.Errorf("file source: %w", err)
	}
	return enumerator{e}, nil
}

// SnapshotState implements connector.SplitEnumerator.
func (e enumerator) SnapshotState(checkpointID int64) (EnumeratorState, error) {
	return EnumeratorState{Pending: e.Pending()}, nil
}

// enumeratorStateVersion is the version EnumeratorStateSerializer writes.
//
// Version 1: a uvarint count, then each pending split as SplitSerializer
// version 1 writes it.
const enumeratorStateVersion = 1

// EnumeratorStateSerializer encodes EnumeratorStates for checkpoints. It is
// stateless and safe for concurrent use.
type EnumeratorStateSerializer struct{}

// Version implements connector.VersionedSerializer.
func (EnumeratorStateSerializer) Version() int { return enumeratorStateVersion }

// Serialize implements connector.VersionedSerializer.
func (EnumeratorStateSerializer) Serialize(st EnumeratorState) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(st.Pending)))
	for _, s := range st.Pending {
		b = appendSplit(b, s)
	}
	return b, nil
}

// Deserialize implements connector.VersionedSerializer.
func (EnumeratorStateSerializer) Deserialize(version int, data []byte) (EnumeratorState, error) {
	if version != enumeratorStateVersion {
		return EnumeratorState{}, fmt.Errorf("file source: enumerator state serializer version %d (this build reads %d): %w",
			version, enumeratorStateVersion, connector.ErrUnsupportedVersion)
	}
	d := decoder{buf: data}
	n := d.uvarint()
	// Every split takes at least five bytes; a larger count is corrupt and
	// must not drive a huge allocation.
	if d.err == nil && n > uint64(len(d.buf)/5) {
		d.err = fmt.Errorf("%d splits in %d bytes: %w", n, len(d.buf), errCorrupt)
	}
	var st EnumeratorState
	if d.err == nil && n > 0 {
		st.Pending = make([]Split, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		st.Pending = append(st.Pending, d.split())
	}
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.buf), errCorrupt)
	}
	if d.err != nil {
		return EnumeratorState{}, fmt.Errorf("file source: decode enumerator state: %w", d.err)
	}
	return st, nil
}
