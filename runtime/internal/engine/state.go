package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/splitflow/splitflow/connector"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/internal/stateformat"
)

// State blobs are framed so that every piece records the version of the
// serializer that wrote it (connector.VersionedSerializer): a newer build
// reads an older checkpoint by passing that version to Deserialize. The
// frames are defined once, in runtime/internal/stateformat, which the
// checkpoint inspector reads them with too.

// ErrShortState is the error of the engine's own decoders of encoded
// values (runtime/internal/statecodec, runtime's pebblestate.go) for
// bytes that end too soon.
var ErrShortState = errors.New("state blob is truncated")

var errNilSerializer = errors.New("no serializer for checkpointed state (the connector returned nil)")

func EncodeVersioned[X any](x X, ser connector.VersionedSerializer[X]) ([]byte, error) {
	if ser == nil {
		return nil, errNilSerializer
	}
	data, err := ser.Serialize(x)
	if err != nil {
		return nil, err
	}
	return stateformat.AppendVersioned(nil, ser.Version(), data), nil
}

func DecodeVersioned[X any](b []byte, ser connector.VersionedSerializer[X]) (X, error) {
	var zero X
	if ser == nil {
		return zero, errNilSerializer
	}
	v, data, err := stateformat.SplitVersioned(b)
	if err != nil {
		return zero, err
	}
	return ser.Deserialize(int(v), data)
}

func EncodeList[X any](xs []X, ser connector.VersionedSerializer[X]) ([]byte, error) {
	if ser == nil {
		return nil, errNilSerializer
	}
	w := stateformat.NewList(ser.Version(), len(xs))
	for _, x := range xs {
		data, err := ser.Serialize(x)
		if err != nil {
			return nil, err
		}
		w.Add(data)
	}
	return w.Bytes(), nil
}

func DecodeList[X any](b []byte, ser connector.VersionedSerializer[X]) ([]X, error) {
	if ser == nil {
		return nil, errNilSerializer
	}
	v, items, err := stateformat.SplitList(b)
	if err != nil {
		return nil, err
	}
	xs := make([]X, 0, len(items))
	for _, item := range items {
		x, err := ser.Deserialize(int(v), item)
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	return xs, nil
}

// RestoredState is the checkpoint a task or coordinator restores from; nil
// for a fresh start. The checkpoint keeps the blobs it read when it was
// verified, so that restoring reads each from storage once; the last of
// the tasks built from it to open drops them.
type RestoredState struct {
	Chk *checkpoint.Checkpoint
	// Path is where chk was loaded from when it is not the job's own
	// storage (WithRestoreFrom); foreign is then true: the shared files
	// it uses are not in the job's storage, so a state backend puts them
	// there again before a checkpoint of the job refers to them.
	Path    string
	Foreign bool
	// Parallelism is the parallelism chk was written at when it holds
	// fewer subtasks than that: a slot's checkpoint holds its own
	// subtask only (runtime/internal/slotrun). 0: the highest subtask it holds + 1.
	Parallelism int
	// opening counts the tasks built from it that have not opened yet.
	opening atomic.Int64
}

// Expect notes n more tasks that restore from r.
func (r *RestoredState) Expect(n int) {
	if r != nil {
		r.opening.Add(int64(n))
	}
}

// Opened is called by each task expected once its operators have
// restored.
func (r *RestoredState) Opened() {
	if r != nil && r.Chk != nil && r.opening.Add(-1) == 0 {
		r.Chk.DropVerified()
	}
}

// OutputCommitted reports whether r is a savepoint whose job committed
// every committable of its checkpoint (checkpoint.MarkSavepointCommitted).
func (r *RestoredState) OutputCommitted() bool {
	return r != nil && r.Chk != nil && r.Chk.OutputCommitted
}

func (r *RestoredState) ID() int64 {
	if r == nil || r.Chk == nil {
		return 0
	}
	return r.Chk.ID
}

// Coordinator returns the state of operator uid's coordinator, nil if none.
func (r *RestoredState) Coordinator(uid string) ([]byte, error) {
	if r == nil || r.Chk == nil {
		return nil, nil
	}
	data, _, err := r.Chk.State(checkpoint.CoordinatorOwner(uid))
	return data, err
}

// Subtasks returns the state of every subtask of operator uid as it was
// checkpointed, indexed by the subtask that wrote it; the length of the
// result is the parallelism the operator had then (0: no state).
func (r *RestoredState) Subtasks(uid string) ([][]byte, error) {
	if r == nil || r.Chk == nil {
		return nil, nil
	}
	var owners []checkpoint.Owner
	for _, h := range r.Chk.States {
		if h.Owner.UID == uid && !h.Owner.IsCoordinator() {
			owners = append(owners, h.Owner)
		}
	}
	if len(owners) == 0 {
		return nil, nil
	}
	par := slices.MaxFunc(owners, func(a, b checkpoint.Owner) int { return a.Subtask - b.Subtask }).Subtask + 1
	par = max(par, r.Parallelism)
	out := make([][]byte, par)
	for _, o := range owners {
		data, _, err := r.Chk.State(o)
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", o, err)
		}
		out[o.Subtask] = data
	}
	return out, nil
}

// ForSubtask picks what subtask of parallelism restores of an operator list
// state written with len(old) subtasks: its own blob when the parallelism
// is unchanged, otherwise every old subtask's blob whose index maps to it
// round-robin (old subtask i goes to i mod parallelism), so that nothing
// is restored twice or lost when the parallelism changes.
func ForSubtask(old [][]byte, subtask, parallelism int) [][]byte {
	var out [][]byte
	for i, b := range old {
		if i%parallelism == subtask && b != nil {
			out = append(out, b)
		}
	}
	return out
}
