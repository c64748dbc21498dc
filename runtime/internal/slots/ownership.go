package slots

import (
	"errors"
	"fmt"
	"slices"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Ownership errors. Match them with errors.Is; they come wrapped in a
// *ClaimError.
var (
	// ErrNotAssigned: the group does not give this member the slot in
	// its current generation (Confirm was refused): its assignment is
	// stale, and it must not touch the slot.
	ErrNotAssigned = errors.New("slots: the group no longer assigns the slot to this member")
	// ErrSlotLost: a newer claim was recorded while this member owned the
	// slot. It must stop the slot's work at once and commit nothing more:
	// its later checkpoints will never be restored.
	ErrSlotLost = errors.New("slots: a newer owner claimed the slot")
	// ErrLogMissing: the slot's storage holds checkpoints but its log is
	// empty. Starting the slot from scratch would replay or lose what
	// those checkpoints' sinks committed, so the claim stops instead.
	ErrLogMissing = errors.New("slots: the slot's storage holds checkpoints but no ownership log")
)

// ClaimError is an ownership that could not go on: which slot, whose
// claim, and, where there is one, the claim in the way.
type ClaimError struct {
	Slot int
	// Generation is the group generation of the member's assignment.
	Generation int64
	Member     string
	// Holder is the claim governing the log when the ownership stopped
	// (ErrNotAssigned, ErrSlotLost); zero when there is none.
	Holder Record
	Err    error
}

func (e *ClaimError) Error() string {
	s := fmt.Sprintf("slot %d, claim by %s (generation %d): %v", e.Slot, e.Member, e.Generation, e.Err)
	if e.Holder.Seq != 0 {
		s += fmt.Sprintf(" (log %v)", e.Holder)
	}
	return s
}

func (e *ClaimError) Unwrap() error { return e.Err }

// Action is something an Ownership asks its driver to do. The driver
// performs the actions of one step in order before it feeds the next
// event.
type Action interface{ isAction() }

// ReadLog asks the driver to read the slot's whole log (slots.LoadLog)
// and the ids of the checkpoints its storage holds (Storage.List), and to
// report both with LogRead.
type ReadLog struct{}

// Confirm asks the driver to prove that the group gives this member the
// slot now (Membership.Confirm: an offset commit under the member's
// current generation, which the group coordinator accepts only from a
// member of its current generation) and report with Confirmed. It comes
// after every read of the log that precedes a claim, so the proof is later
// than every claim the member read.
type Confirm struct{}

// Append asks the driver to create Record at its position
// (slots.StoreRecord) and report with Appended(Record.Seq, err).
type Append struct{ Record Record }

// Restore: the claim is recorded. The driver restores the slot from
// Checkpoint (0: from scratch) and runs it, numbering the slot's next
// checkpoints from NextCheckpointID: above every id in the storage and the
// log, so that a zombie's checkpoint, recorded or not, is never
// overwritten or mistaken for the new owner's. Restoring commits the
// checkpoint's committables first; the slot's sinks then write under
// transactional ids of the new claim (txn.ClaimTransactionalID) and abort
// what older claims left open.
type Restore struct {
	Checkpoint int64
	// Epoch is the epoch Checkpoint was written under; ClaimEpoch is this
	// member's claim's, under which its own checkpoints are written.
	Epoch            int64
	ClaimEpoch       int64
	NextCheckpointID int64
	// Ignored are the log's checkpoint records that do not count, for the
	// driver's log.
	Ignored []Record
}

// CheckFloor: the record at Seq was created. Before it counts, the driver
// finds the highest floor marker in the slot's storage
// (slots.HighestFloorMarker) and reports it with FloorChecked: a record
// created below a floor was created again at a position compaction had
// deleted (by a writer that read the log before), and is not in the log.
type CheckFloor struct{ Seq int64 }

// Compact: the floor at position Floor is in the log; the driver deletes
// what it makes unneeded (slots.CompactLog) and reports nothing: a failure
// leaves records a later compaction deletes, and readers never read below
// the highest floor.
type Compact struct{ Floor int64 }

// NotifyComplete: checkpoint ID is recorded under this member's claim;
// only now may the slot's sinks commit it.
type NotifyComplete struct{ ID int64 }

// Stop: the ownership is over, Err says why (*ClaimError wrapping
// ErrNotAssigned, ErrSlotLost or ErrLogMissing). The driver stops the
// slot's work without committing anything not yet notified, and drops
// the Ownership. Checkpoints persisted but not notified are abandoned:
// the new owner restores from the log, which does not count them.
type Stop struct{ Err error }

// Fail: reading or appending the log failed (Err). Whether the last
// append took effect is unknown: the driver calls Start again, after a
// pause of its choosing, which reads the log and goes on from what it
// holds (an own claim found there is not made twice).
type Fail struct{ Err error }

func (ReadLog) isAction()        {}
func (Confirm) isAction()        {}
func (Append) isAction()         {}
func (CheckFloor) isAction()     {}
func (Compact) isAction()        {}
func (Restore) isAction()        {}
func (NotifyComplete) isAction() {}
func (Stop) isAction()           {}
func (Fail) isAction()           {}

type ownPhase int

const (
	// idle: created, or after Fail; waiting for Start.
	idle ownPhase = iota
	// claiming: reading the log to claim, or appending the claim.
	claiming
	// running: the claim is recorded; checkpoints are recorded in order.
	running
	// over: Stop was returned; every event is ignored.
	over
)

// Ownership is the deterministic core of one member's ownership of one
// slot: the claim, the choice of restore point and the recording of
// completed checkpoints in the slot's log. Like the checkpoint coordinator
// it reads no clock and does no I/O: the driver feeds it events and
// performs the actions they return, in order. One goroutine owns it.
//
// The rules it keeps (Invariant 12, at most one owner can commit output or
// state for a slot):
//   - the claim is recorded before anything is restored, by a conditional
//     write at the log's next position, under an epoch one above every
//     claim in the log as read, and only after the group confirmed, later
//     than that read, that it gives the member the slot in its current
//     generation (Confirm): so claims are in the log in the order of
//     their confirmations, and the last claim is the member the group
//     confirmed last;
//   - a checkpoint is notified complete only once its record is in the log
//     under this member's claim; a record that cannot be appended because
//     a newer claim took the log's next position ends the ownership
//     (ErrSlotLost) without notifying, so a zombie commits nothing after
//     the new owner claimed;
//   - the restore point is Decide's.
type Ownership struct {
	slot       int
	member     string
	generation int64
	// epoch is the claim's epoch, known once the claim is recorded (or
	// about to be appended).
	epoch int64

	phase ownPhase
	// confirming: a Confirm is out, after the last read of the log.
	confirming bool
	// log is the log as far as this member knows it, in order.
	log []Record
	// claimed: this member's claim is in log.
	claimed bool
	// queue are checkpoints persisted and not yet recorded, in id order.
	queue []int64
	// pending is the record being appended (a claim, queue[0]'s record,
	// or a floor); Seq 0 when none. checking: it was created, and
	// CheckFloor is out.
	pending  Record
	checking bool
	// compactAfter: a floor is appended once the log since the last one
	// holds this many records.
	compactAfter int
	lastID       int64 // the highest checkpoint id persisted or recorded
	// maxStored is the highest checkpoint id the storage held at the last
	// LogRead.
	maxStored int64
}

// DefaultCompactAfter is how many records the log holds since its floor
// (or its start) before the owner compacts it (WithCompactAfter).
const DefaultCompactAfter = 64

// OwnershipOption configures NewOwnership.
type OwnershipOption func(*Ownership)

// WithCompactAfter: once the slot's log holds n records since its floor
// (or its start), the owner appends a floor summing them up and deletes
// them (default DefaultCompactAfter; at least 2). A claim reads the log
// from its floor, so this bounds what a claim reads.
func WithCompactAfter(n int) OwnershipOption { return func(o *Ownership) { o.compactAfter = n } }

// NewOwnership is member's ownership of slot, assigned in group
// generation generation (>= 1; Change.Generation). member must be unique
// among the processes of the job and never reused (the group member id,
// which the coordinator makes up for each membership).
func NewOwnership(slot int, member string, generation int64, opts ...OwnershipOption) (*Ownership, error) {
	o := &Ownership{slot: slot, member: member, generation: generation, compactAfter: DefaultCompactAfter}
	for _, opt := range opts {
		opt(o)
	}
	switch {
	case o.compactAfter < 2:
		return nil, fmt.Errorf("slots: compact after %d records; at least 2 (default %d)", o.compactAfter, DefaultCompactAfter)
	case slot < 0:
		return nil, fmt.Errorf("slots: slot %d; slots are numbered from 0", slot)
	case member == "":
		return nil, errors.New("slots: empty member id; use the consumer group member id")
	case generation < 1:
		return nil, fmt.Errorf("slots: generation %d; group generations start at 1", generation)
	}
	return o, nil
}

// Start begins the claim, or resumes after Fail: it asks for the log.
func (o *Ownership) Start() []Action {
	if o.phase == over {
		return nil
	}
	if o.phase == idle {
		o.phase = claiming
	}
	o.pending, o.checking = Record{}, false
	o.confirming = false
	return []Action{ReadLog{}}
}

// LogRead reports the slot's log (records in position order) and the ids
// of the checkpoints its storage holds, or the error reading them.
func (o *Ownership) LogRead(records []Record, stored []int64, err error) []Action {
	if o.phase == idle || o.phase == over {
		return nil
	}
	if err == nil {
		err = checkLog(records)
	}
	if err != nil {
		return o.fail(err)
	}
	o.log = slices.Clone(records)
	for _, id := range stored {
		o.maxStored = max(o.maxStored, id)
	}
	rp := Decide(o.log)
	if o.phase == claiming {
		// Our claim governs already when an append's answer was lost.
		o.claimed = rp.Owner.Member == o.member && rp.Owner.Generation == o.generation
	} else {
		o.claimed = rp.Owner.Member == o.member && rp.Owner.Epoch == o.epoch
	}
	switch {
	case o.phase == claiming && o.claimed:
		o.epoch = rp.Owner.Epoch
		return o.restore(rp)
	case o.phase == claiming && len(o.log) == 0 && len(stored) > 0:
		return o.stop(ErrLogMissing, Record{})
	case o.phase == claiming:
		o.confirming = true
		return []Action{Confirm{}}
	case !o.claimed:
		// Running, and a newer claim governs the log.
		return o.stop(ErrSlotLost, rp.Owner)
	default:
		// Running, still governing. Checkpoints whose records made it
		// (an append that failed with its fate unknown) are notified, not
		// recorded twice; whatever else took the position does not
		// count: append again after it.
		var acts []Action
		for len(o.queue) > 0 && o.recorded(o.queue[0]) {
			acts = append(acts, NotifyComplete{ID: o.queue[0]})
			o.queue = o.queue[1:]
		}
		return o.appendNext(acts)
	}
}

// Confirmed reports the answer to Confirm: nil when the group gives this
// member the slot in its current generation, an error wrapping
// ErrNotAssigned when it does not (the ownership stops), any other error
// when it could not tell (Fail: the driver starts again).
func (o *Ownership) Confirmed(err error) []Action {
	if o.phase != claiming || !o.confirming {
		return nil
	}
	o.confirming = false
	switch {
	case errors.Is(err, ErrNotAssigned):
		return o.stop(ErrNotAssigned, Decide(o.log).Owner)
	case err != nil:
		return o.fail(err)
	}
	// One above every claim in the log: epochs are the log's own, so a
	// group whose generations started again (it was deleted) claims above
	// its earlier life's, and the conditional write at the next position
	// makes the epoch one claimant's.
	o.epoch = Decide(o.log).Owner.Epoch + 1
	return o.append(Record{Seq: o.next(), Kind: Claim, Epoch: o.epoch, Generation: o.generation, Member: o.member})
}

// Appended reports the append of the record at position seq: nil once it
// is durable, an error wrapping checkpoint.ErrRecordExists when another
// writer took the position, any other error when its fate is unknown.
func (o *Ownership) Appended(seq int64, err error) []Action {
	if o.phase == idle || o.phase == over || o.pending.Seq == 0 || o.checking || seq != o.pending.Seq {
		return nil // not the append asked for
	}
	switch {
	case errors.Is(err, checkpoint.ErrRecordExists):
		o.pending = Record{}
		return []Action{ReadLog{}}
	case err != nil:
		return o.fail(err)
	}
	o.checking = true
	return []Action{CheckFloor{Seq: seq}}
}

// FloorChecked reports the highest floor marker in the slot's storage (0:
// none) after the record at seq was created, or the error listing them.
// Below the marker the record is not in the log: it is as if another
// writer had taken the position, and the log is read again.
func (o *Ownership) FloorChecked(seq, marker int64, err error) []Action {
	if o.phase == idle || o.phase == over || !o.checking || seq != o.pending.Seq {
		return nil
	}
	if err != nil {
		return o.fail(err)
	}
	r := o.pending
	o.pending, o.checking = Record{}, false
	if marker > seq {
		return []Action{ReadLog{}}
	}
	o.log = append(o.log, r)
	switch r.Kind {
	case Claim:
		o.claimed = true
		return o.restore(Decide(o.log))
	case Floor:
		o.log = o.log[len(o.log)-1:]
		return o.appendNext([]Action{Compact{Floor: seq}})
	default:
		o.queue = o.queue[1:]
		return o.appendNext([]Action{NotifyComplete{ID: r.Checkpoint}})
	}
}

// Persisted reports that checkpoint id's metadata is durable in the slot's
// storage (the coordinator's Persisted(id, nil)). Its record is appended
// after those of earlier checkpoints; NotifyComplete follows once it is
// in the log. An id not above every earlier one is ignored.
func (o *Ownership) Persisted(id int64) []Action {
	if o.phase != running || id <= o.lastID {
		return nil
	}
	o.lastID = id
	o.queue = append(o.queue, id)
	return o.appendNext(nil)
}

// Owns reports whether the claim is recorded and not lost.
func (o *Ownership) Owns() bool { return o.phase == running }

// Epoch is the claim's epoch, known once Restore was returned.
func (o *Ownership) Epoch() int64 { return o.epoch }

// recorded reports whether the log holds checkpoint id's record by this
// member under its epoch.
func (o *Ownership) recorded(id int64) bool {
	return slices.ContainsFunc(o.log, func(r Record) bool {
		return r.Kind == Completed && r.Checkpoint == id && r.Epoch == o.epoch && r.Member == o.member
	})
}

func (o *Ownership) next() int64 {
	if len(o.log) == 0 {
		return 1
	}
	return o.log[len(o.log)-1].Seq + 1
}

func (o *Ownership) restore(rp RestorePoint) []Action {
	o.phase = running
	next := max(rp.MaxCheckpoint, o.lastID, o.maxStored)
	o.lastID = next
	return []Action{Restore{Checkpoint: rp.Checkpoint, Epoch: rp.Epoch, ClaimEpoch: o.epoch, NextCheckpointID: next + 1, Ignored: rp.Ignored}}
}

// appendNext appends the next record the log needs, if none is being
// appended: the first queued checkpoint's, or else a floor once the log
// since the last one is long enough.
func (o *Ownership) appendNext(acts []Action) []Action {
	switch {
	case o.pending.Seq != 0:
		return acts
	case len(o.queue) > 0:
		return append(acts, o.append(Record{Seq: o.next(), Kind: Completed, Epoch: o.epoch, Member: o.member, Checkpoint: o.queue[0]})...)
	case len(o.log) > o.compactAfter:
		rp := Decide(o.log)
		return append(acts, o.append(Record{Seq: o.next(), Kind: Floor, Epoch: o.epoch, Generation: o.generation, Member: o.member,
			Checkpoint: rp.Checkpoint, RestoreEpoch: rp.Epoch, MaxCheckpoint: rp.MaxCheckpoint})...)
	}
	return acts
}

func (o *Ownership) append(r Record) []Action {
	o.pending = r
	return []Action{Append{r}}
}

func (o *Ownership) stop(err error, holder Record) []Action {
	o.phase = over
	o.queue = nil
	return []Action{Stop{Err: &ClaimError{Slot: o.slot, Generation: o.generation, Member: o.member, Holder: holder, Err: err}}}
}

func (o *Ownership) fail(err error) []Action {
	if o.phase == claiming {
		o.phase = idle
	}
	o.pending, o.checking = Record{}, false
	o.confirming = false
	return []Action{Fail{Err: fmt.Errorf("slot %d: %w", o.slot, err)}}
}
