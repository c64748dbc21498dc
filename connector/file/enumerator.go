package file

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/connector"
)

// EnumeratorState is the enumerator's checkpoint: the splits not assigned to
// any reader, in the order they will be handed out.
type EnumeratorState struct {
	Pending []Split
}

// enumerator hands pending splits out one per split request. Like every
// enumerator it runs on the coordinator goroutine only (the single-threaded
// enumerator of DESIGN.md), so it has no lock.
type enumerator struct {
	ctx     connector.SplitEnumeratorContext[Split]
	pending []Split
}

func newEnumerator(ctx connector.SplitEnumeratorContext[Split], pending []Split) *enumerator {
	return &enumerator{ctx: ctx, pending: slices.Clone(pending)}
}

// Start implements connector.SplitEnumerator. Splits are known from the
// start, so there is no discovery to schedule.
func (e *enumerator) Start() error { return nil }

// HandleSplitRequest implements connector.SplitEnumerator: the next pending
// split, or "no more splits" when none is left.
func (e *enumerator) HandleSplitRequest(subtask int) error {
	if len(e.pending) == 0 {
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	s := e.pending[0]
	if err := e.ctx.AssignSplit(s, subtask); err != nil {
		return err
	}
	e.pending = e.pending[1:]
	return nil
}

// AddSplitsBack implements connector.SplitEnumerator. Returned splits go to
// the front, so they are read again before splits nobody has started.
func (e *enumerator) AddSplitsBack(splits []Split, subtask int) error {
	e.pending = append(slices.Clone(splits), e.pending...)
	return nil
}

// AddReader implements connector.SplitEnumerator. Readers ask for splits
// themselves, so registration needs no action.
func (e *enumerator) AddReader(subtask int) error { return nil }

// SnapshotState implements connector.SplitEnumerator.
func (e *enumerator) SnapshotState(checkpointID int64) (EnumeratorState, error) {
	return EnumeratorState{Pending: slices.Clone(e.pending)}, nil
}

// NotifyCheckpointComplete implements connector.SplitEnumerator.
func (e *enumerator) NotifyCheckpointComplete(checkpointID int64) error { return nil }

// HandleSourceEvent implements connector.SplitEnumerator; the file source
// defines no events.
func (e *enumerator) HandleSourceEvent(subtask int, event connector.SourceEvent) error { return nil }

// Close implements connector.SplitEnumerator.
func (e *enumerator) Close() error { return nil }

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
