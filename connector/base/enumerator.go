package base

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/connector"
)

// StaticEnumeratorState is the checkpoint of a StaticEnumerator: the splits
// no reader holds, in the order they will be handed out.
type StaticEnumeratorState[S connector.Split] struct {
	Pending []S
}

// StaticEnumerator is a connector.SplitEnumerator over a set of splits
// known when the job starts, for sources without discovery: files listed
// once, a generator's ranges, a table's key ranges. It hands splits out in
// one of two modes (see SourceOption):
//
//   - pull (the default): one split per split request, so a fast reader
//     takes more splits than a slow one; a request with nothing left is
//     answered with "no more splits". Readers must ask (WithPullMode, which
//     NewSimpleReader sets in this mode).
//   - push (WithPushAssignment, WithSplitOwner): every split has an owner
//     subtask, fixed when the enumerator starts, round robin over the
//     pending splits or by a function; a reader gets all its splits when it
//     registers, then "no more splits". Splits that never finish, such as
//     an unbounded generator's, need this mode: in pull mode a reader asks
//     for the next split only when one finishes.
//
// Splits that come back from a failed reader (AddSplitsBack: assigned after
// that reader's last checkpoint, so in no checkpoint's reader state) are
// pending again: in pull mode at the front, handed out before splits nobody
// started; in push mode to the subtask they came from, which gets them when
// its restarted reader registers, or, for a subtask beyond the parallelism
// (a restore at a lower one handing the old readers' splits to the
// enumerator), to an owner placed as in Start; with an owner function
// always to the subtask it names. Together with the engine's
// booking of every assignment, a split is read once across failures (the
// booking rule and the one-place rule of DESIGN.md).
//
// Like every enumerator it runs on the coordinator goroutine only, so it has
// no lock.
type StaticEnumerator[S connector.Split] struct {
	ctx   connector.SplitEnumeratorContext[S]
	cfg   sourceConfig
	owner func(S, int) int // push mode only

	// Pull mode, and push mode before Start: the pending splits in order.
	pending []S
	// Push mode after Start: the pending splits of each subtask.
	owned   map[int][]S
	started bool
	// roundRobin counts the splits placed round robin, so that splits
	// placed after Start go on where Start stopped.
	roundRobin int
}

// NewStaticEnumerator returns an enumerator handing out pending: all splits
// for a fresh start, or StaticEnumeratorState.Pending on restore. The
// options that concern it are WithPushAssignment and WithSplitOwner;
// others are ignored. It fails when two splits share an ID (they would be
// read as one) or WithSplitOwner's function is for another split type.
func NewStaticEnumerator[S connector.Split](ctx connector.SplitEnumeratorContext[S], pending []S, opts ...SourceOption) (*StaticEnumerator[S], error) {
	cfg := defaultSourceConfig()
	for _, o := range opts {
		o.applySource(&cfg)
	}
	e := &StaticEnumerator[S]{ctx: ctx, cfg: cfg, pending: slices.Clone(pending)}
	if cfg.owner != nil {
		fn, ok := cfg.owner.(func(S, int) int)
		if !ok {
			var zero S
			return nil, fmt.Errorf("base: WithSplitOwner's function is a %T; this enumerator's splits are %T", cfg.owner, zero)
		}
		e.owner = fn
	}
	seen := make(map[string]bool, len(pending))
	for _, s := range pending {
		id := s.SplitID()
		if seen[id] {
			return nil, fmt.Errorf("base: split ID %q listed twice; every split needs its own ID, or its records are read once for both", id)
		}
		seen[id] = true
	}
	return e, nil
}

// Start implements connector.SplitEnumerator. In push mode it gives every
// pending split its owner.
func (e *StaticEnumerator[S]) Start() error {
	if e.started {
		return nil
	}
	e.started = true
	if !e.cfg.push {
		return nil
	}
	e.owned = make(map[int][]S)
	pending := e.pending
	e.pending = nil
	return e.place(pending)
}

// place gives each split an owner among the subtasks of the parallelism
// the enumerator runs with, by the owner function or round robin, and
// appends it to that subtask's pending splits.
func (e *StaticEnumerator[S]) place(splits []S) error {
	par := e.ctx.CurrentParallelism()
	for _, s := range splits {
		sub := e.roundRobin % par
		e.roundRobin++
		if e.owner != nil {
			sub = e.owner(s, par)
			if sub < 0 || sub >= par {
				return fmt.Errorf("base: the split owner put split %q on subtask %d; want one of [0, %d)", s.SplitID(), sub, par)
			}
		}
		e.owned[sub] = append(e.owned[sub], s)
	}
	return nil
}

// HandleSplitRequest implements connector.SplitEnumerator: in pull mode the
// next pending split, or "no more splits" when none is left. In push mode
// readers are served when they register, and a request changes nothing.
func (e *StaticEnumerator[S]) HandleSplitRequest(subtask int) error {
	if e.cfg.push {
		return nil
	}
	if len(e.pending) == 0 {
		return e.ctx.SignalNoMoreSplits(subtask)
	}
	if err := e.ctx.AssignSplit(e.pending[0], subtask); err != nil {
		return err
	}
	e.pending = e.pending[1:]
	return nil
}

// AddSplitsBack implements connector.SplitEnumerator: the splits are
// pending again, at the front in pull mode, for subtask in push mode. A
// subtask beyond the parallelism is one of a restore at a lower
// parallelism that hands the old readers' splits to the enumerator
// (runtime.WithRescaledSplitsToEnumerator): no reader of it will
// register, so its splits get owners among the subtasks there are, as in
// Start. With WithSplitOwner's function every split given back goes
// where the function says, so that a restore at another parallelism
// places it by the rule of the split alone.
func (e *StaticEnumerator[S]) AddSplitsBack(splits []S, subtask int) error {
	if !e.cfg.push || !e.started {
		e.pending = append(slices.Clone(splits), e.pending...)
		return nil
	}
	if subtask < 0 || subtask >= e.ctx.CurrentParallelism() || e.owner != nil {
		// With an owner function the function places them, whoever gave
		// them back: in a distributed job every slot's enumerator must
		// agree on a split's reader.
		return e.place(splits)
	}
	e.owned[subtask] = append(slices.Clone(splits), e.owned[subtask]...)
	return nil
}

// AddReader implements connector.SplitEnumerator. In push mode the reader
// gets every split it owns, then "no more splits"; its restarted reader
// is served the same way, with the splits that came back meanwhile.
func (e *StaticEnumerator[S]) AddReader(subtask int) error {
	if !e.cfg.push {
		return nil
	}
	if mine := e.owned[subtask]; len(mine) > 0 {
		err := e.ctx.AssignSplits(connector.SplitsAssignment[S]{Assignment: map[int][]S{subtask: mine}})
		if err != nil {
			return err
		}
		delete(e.owned, subtask)
	}
	return e.ctx.SignalNoMoreSplits(subtask)
}

// SnapshotState implements connector.SplitEnumerator. In push mode the
// pending splits are listed by owner; a restore gives them owners again,
// at the parallelism it runs with.
func (e *StaticEnumerator[S]) SnapshotState(checkpointID int64) (StaticEnumeratorState[S], error) {
	return StaticEnumeratorState[S]{Pending: e.Pending()}, nil
}

// Pending returns a copy of the splits no reader holds.
func (e *StaticEnumerator[S]) Pending() []S {
	out := slices.Clone(e.pending)
	subs := make([]int, 0, len(e.owned))
	for sub := range e.owned {
		subs = append(subs, sub)
	}
	slices.Sort(subs)
	for _, sub := range subs {
		out = append(out, e.owned[sub]...)
	}
	return out
}

// NotifyCheckpointComplete implements connector.SplitEnumerator.
func (e *StaticEnumerator[S]) NotifyCheckpointComplete(checkpointID int64) error { return nil }

// HandleSourceEvent implements connector.SplitEnumerator; it defines no
// events.
func (e *StaticEnumerator[S]) HandleSourceEvent(subtask int, event connector.SourceEvent) error {
	return nil
}

// Close implements connector.SplitEnumerator.
func (e *StaticEnumerator[S]) Close() error { return nil }

// staticStateVersion is the version StaticEnumeratorStateSerializer writes.
//
// Version 1: a uvarint version of the split serializer, a uvarint count,
// then each split as a uvarint length and the split serializer's bytes.
const staticStateVersion = 1

// errCorruptState is wrapped for enumerator state that cannot be decoded.
var errCorruptState = errors.New("corrupt enumerator state")

// StaticEnumeratorStateSerializer encodes StaticEnumeratorStates with the
// source's split serializer, recording that serializer's version, so a
// split format changed later still restores. It is safe for concurrent use
// if the split serializer is.
type StaticEnumeratorStateSerializer[S connector.Split] struct {
	Splits connector.VersionedSerializer[S]
}

// Version implements connector.VersionedSerializer.
func (StaticEnumeratorStateSerializer[S]) Version() int { return staticStateVersion }

// Serialize implements connector.VersionedSerializer.
func (z StaticEnumeratorStateSerializer[S]) Serialize(st StaticEnumeratorState[S]) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(z.Splits.Version()))
	b = binary.AppendUvarint(b, uint64(len(st.Pending)))
	for _, s := range st.Pending {
		enc, err := z.Splits.Serialize(s)
		if err != nil {
			return nil, fmt.Errorf("base: encode pending split %q: %w", s.SplitID(), err)
		}
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b, nil
}

// Deserialize implements connector.VersionedSerializer.
func (z StaticEnumeratorStateSerializer[S]) Deserialize(version int, data []byte) (StaticEnumeratorState[S], error) {
	var st StaticEnumeratorState[S]
	if version != staticStateVersion {
		return st, fmt.Errorf("base: static enumerator state version %d (this build reads %d): %w",
			version, staticStateVersion, connector.ErrUnsupportedVersion)
	}
	next := func() (uint64, error) {
		v, n := binary.Uvarint(data)
		if n <= 0 {
			return 0, fmt.Errorf("base: decode static enumerator state: bad uvarint: %w", errCorruptState)
		}
		data = data[n:]
		return v, nil
	}
	splitVersion, err := next()
	if err != nil {
		return st, err
	}
	count, err := next()
	if err != nil {
		return st, err
	}
	// Every split takes at least its length byte; a larger count is
	// corrupt and must not drive a huge allocation.
	if count > uint64(len(data)) {
		return st, fmt.Errorf("base: decode static enumerator state: %d splits in %d bytes: %w", count, len(data), errCorruptState)
	}
	st.Pending = make([]S, 0, count)
	for range count {
		n, err := next()
		if err != nil {
			return StaticEnumeratorState[S]{}, err
		}
		if n > uint64(len(data)) {
			return StaticEnumeratorState[S]{}, fmt.Errorf("base: decode static enumerator state: split of %d bytes in %d: %w", n, len(data), errCorruptState)
		}
		s, err := z.Splits.Deserialize(int(splitVersion), data[:n])
		if err != nil {
			return StaticEnumeratorState[S]{}, fmt.Errorf("base: decode static enumerator state: %w", err)
		}
		st.Pending = append(st.Pending, s)
		data = data[n:]
	}
	if len(data) > 0 {
		return StaticEnumeratorState[S]{}, fmt.Errorf("base: decode static enumerator state: %d trailing bytes: %w", len(data), errCorruptState)
	}
	return st, nil
}
