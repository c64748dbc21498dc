package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// State blobs are framed so that every piece records the version of the
// serializer that wrote it (connector.VersionedSerializer): a newer build
// reads an older checkpoint by passing that version to Deserialize.
//
//	versioned:  uvarint(version) bytes
//	list:       uvarint(version) uvarint(n) n x (uvarint(len) bytes)

var errShortState = errors.New("state blob is truncated")

func encodeVersioned[X any](x X, ser connector.VersionedSerializer[X]) ([]byte, error) {
	if ser == nil {
		return nil, errors.New("no serializer for checkpointed state (the connector returned nil)")
	}
	data, err := ser.Serialize(x)
	if err != nil {
		return nil, err
	}
	out := binary.AppendUvarint(nil, uint64(ser.Version()))
	return append(out, data...), nil
}

func decodeVersioned[X any](b []byte, ser connector.VersionedSerializer[X]) (X, error) {
	var zero X
	if ser == nil {
		return zero, errors.New("no serializer for checkpointed state (the connector returned nil)")
	}
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return zero, errShortState
	}
	return ser.Deserialize(int(v), b[n:])
}

func encodeList[X any](xs []X, ser connector.VersionedSerializer[X]) ([]byte, error) {
	if ser == nil {
		return nil, errors.New("no serializer for checkpointed state (the connector returned nil)")
	}
	out := binary.AppendUvarint(nil, uint64(ser.Version()))
	out = binary.AppendUvarint(out, uint64(len(xs)))
	for _, x := range xs {
		data, err := ser.Serialize(x)
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(data)))
		out = append(out, data...)
	}
	return out, nil
}

func decodeList[X any](b []byte, ser connector.VersionedSerializer[X]) ([]X, error) {
	if ser == nil {
		return nil, errors.New("no serializer for checkpointed state (the connector returned nil)")
	}
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errShortState
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, errShortState
	}
	b = b[n:]
	xs := make([]X, 0, count)
	for range count {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, errShortState
		}
		x, err := ser.Deserialize(int(v), b[n:n+int(l)])
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
		b = b[n+int(l):]
	}
	return xs, nil
}

// restoredState is the checkpoint a task or coordinator restores from; nil
// for a fresh start. The checkpoint keeps the blobs it read when it was
// verified, so that restoring reads each from storage once; the last of
// the tasks built from it to open drops them.
type restoredState struct {
	chk *checkpoint.Checkpoint
	// opening counts the tasks built from it that have not opened yet.
	opening atomic.Int64
}

// expect notes n more tasks that restore from r.
func (r *restoredState) expect(n int) {
	if r != nil {
		r.opening.Add(int64(n))
	}
}

// opened is called by each task expected once its operators have
// restored.
func (r *restoredState) opened() {
	if r != nil && r.chk != nil && r.opening.Add(-1) == 0 {
		r.chk.DropVerified()
	}
}

func (r *restoredState) id() int64 {
	if r == nil || r.chk == nil {
		return 0
	}
	return r.chk.ID
}

// coordinator returns the state of operator uid's coordinator, nil if none.
func (r *restoredState) coordinator(uid string) ([]byte, error) {
	if r == nil || r.chk == nil {
		return nil, nil
	}
	data, _, err := r.chk.State(checkpoint.CoordinatorOwner(uid))
	return data, err
}

// subtasks returns the state of every subtask of operator uid as it was
// checkpointed, indexed by the subtask that wrote it; the length of the
// result is the parallelism the operator had then (0: no state).
func (r *restoredState) subtasks(uid string) ([][]byte, error) {
	if r == nil || r.chk == nil {
		return nil, nil
	}
	var owners []checkpoint.Owner
	for _, h := range r.chk.States {
		if h.Owner.UID == uid && !h.Owner.IsCoordinator() {
			owners = append(owners, h.Owner)
		}
	}
	if len(owners) == 0 {
		return nil, nil
	}
	par := slices.MaxFunc(owners, func(a, b checkpoint.Owner) int { return a.Subtask - b.Subtask }).Subtask + 1
	out := make([][]byte, par)
	for _, o := range owners {
		data, _, err := r.chk.State(o)
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", o, err)
		}
		out[o.Subtask] = data
	}
	return out, nil
}

// forSubtask picks what subtask of parallelism restores of an operator list
// state written with len(old) subtasks: its own blob when the parallelism
// is unchanged, otherwise every old subtask's blob whose index maps to it
// round-robin (old subtask i goes to i mod parallelism), so that nothing
// is restored twice or lost when the parallelism changes.
func forSubtask(old [][]byte, subtask, parallelism int) [][]byte {
	var out [][]byte
	for i, b := range old {
		if i%parallelism == subtask && b != nil {
			out = append(out, b)
		}
	}
	return out
}
