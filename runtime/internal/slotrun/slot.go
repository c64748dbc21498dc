package slotrun

import "errors"

// ErrSlotLost is how a slot of a distributed job ends when another
// process took it over: its ownership log holds a newer claim, or the
// group no longer gives the slot to this process. Nothing the slot
// checkpointed after that is committed.
var ErrSlotLost = errors.New("the slot was taken over by another process")

// Slot is what an execution of one slot knows of its slot. The driver
// makes it; the execution reads it, and records its checkpoints and
// checks its claim through it, on its master goroutine.
type Slot struct {
	Index int
	// Epoch is the claim's (the sinks' connector.ClaimInfo).
	Epoch int64
	// RestorePath is the checkpoint the slot's log names as its restore
	// point (a chk-<id> under another claim's directory), or, for a slot
	// whose log names none, WithRestoreFrom's savepoint (FromSavepoint);
	// "" for a fresh slot.
	RestorePath   string
	FromSavepoint bool
	// NextID is the first checkpoint id the execution may take.
	NextID int64
	// ShuffleStarts are the job's recorded shuffle positions by channel
	// (connector.ShuffleStarts); read only.
	ShuffleStarts map[string][]int64
	// Incarnation is the job's run, from its start record
	// (connector.ClaimIncarnation); read only.
	Incarnation string

	// recordFn records checkpoint id in the slot's log; recorded is the
	// last id it recorded (master goroutine).
	recordFn func(id int64) error
	recorded int64
	// ownedFn reads the slot's log before the execution restarts within
	// the claim, and fails when a newer claim governs it.
	ownedFn func() error
}

// Record records checkpoint id in the slot's log; the checkpoint may be
// notified complete once it returns nil.
func (s *Slot) Record(id int64) error {
	if err := s.recordFn(id); err != nil {
		return err
	}
	s.recorded = id
	return nil
}

// Recorded is the last checkpoint the execution recorded in the slot's
// log, 0 for none: a restart within the claim restores it.
func (s *Slot) Recorded() int64 { return s.recorded }

// Owned reads the slot's log before the execution restarts within the
// claim: ErrSlotLost when a newer claim governs it.
func (s *Slot) Owned() error {
	if s.ownedFn == nil {
		return nil
	}
	return s.ownedFn()
}
