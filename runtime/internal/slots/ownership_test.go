package slots

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// slotStorage is one slot's storage, shared by every member in a test: a
// real MemoryStorage, whose records are the log and whose checkpoints are
// what the members persisted.
func slotStorage(t *testing.T) *checkpoint.MemoryStorage {
	t.Helper()
	s, err := checkpoint.NewMemoryStorage(checkpoint.WithRetained(100))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// member drives one Ownership against the shared storage, recording what
// it was told: a test driver that does each action's I/O at once, so that
// tests interleave members by choosing who steps next.
type member struct {
	t        *testing.T
	name     string
	o        *Ownership
	st       *checkpoint.MemoryStorage
	restored []Restore
	notified []int64
	stopped  error
	failed   error
	// appendFault, when set, is the answer to the next Append, after the
	// record was stored (the answer lost).
	appendFault error
	// faultOn, when set, keeps appendFault for the next append of a
	// record of that kind.
	faultOn Kind
	// stale: the group no longer gives this member the slot, so Confirm
	// is refused (ErrNotAssigned), as a stale generation's offset commit.
	stale bool
	// confirms counts the Confirms performed.
	confirms int
	// confirm, when set, answers Confirm instead of stale (a real
	// Membership's Confirm).
	confirm func() error
	// compactions counts Compact actions; skipCompact leaves them undone
	// (a crash between the floor record and the deletions).
	compactions int
	skipCompact bool
	// rs, when set, is the storage's records as this member sees them (a
	// counting journal); st otherwise.
	rs checkpoint.RecordStorage
}

func (m *member) records() checkpoint.RecordStorage {
	if m.rs != nil {
		return m.rs
	}
	return m.st
}

func newMember(t *testing.T, st *checkpoint.MemoryStorage, name string, generation int64) *member {
	t.Helper()
	o, err := NewOwnership(3, name, generation)
	if err != nil {
		t.Fatal(err)
	}
	return &member{t: t, name: name, o: o, st: st}
}

// step takes terminal actions into the record and performs the one I/O
// action, returning the actions of the event it fed.
func (m *member) step(acts []Action) []Action {
	m.t.Helper()
	for i, a := range acts {
		switch a := a.(type) {
		case Restore:
			m.restored = append(m.restored, a)
		case NotifyComplete:
			m.notified = append(m.notified, a.ID)
		case Stop:
			m.stopped = a.Err
		case Fail:
			m.failed = a.Err
		case Compact:
			m.compactions++
			if !m.skipCompact {
				if err := CompactLog(m.records(), a.Floor); err != nil {
					m.t.Fatalf("%s: CompactLog(%d): %v", m.name, a.Floor, err)
				}
			}
		case ReadLog, Confirm, Append, CheckFloor:
			if i != len(acts)-1 {
				m.t.Fatalf("%s: I/O action %T is not the last of %v", m.name, a, acts)
			}
			return m.perform(a)
		}
	}
	return nil
}

func (m *member) perform(a Action) []Action {
	m.t.Helper()
	switch a := a.(type) {
	case ReadLog:
		recs, err := LoadLog(m.records())
		if err != nil {
			m.t.Fatal(err)
		}
		ids, err := m.st.List()
		if err != nil {
			m.t.Fatal(err)
		}
		return m.o.LogRead(recs, ids, nil)
	case Confirm:
		m.confirms++
		if m.confirm != nil {
			return m.o.Confirmed(m.confirm())
		}
		if m.stale {
			return m.o.Confirmed(fmt.Errorf("offset commit: ILLEGAL_GENERATION: %w", ErrNotAssigned))
		}
		return m.o.Confirmed(nil)
	case Append:
		err := StoreRecord(m.records(), a.Record)
		if err == nil && m.appendFault != nil && (m.faultOn == "" || m.faultOn == a.Record.Kind) {
			err, m.appendFault = m.appendFault, nil
		}
		return m.o.Appended(a.Record.Seq, err)
	case CheckFloor:
		top, err := HighestFloorMarker(m.records())
		return m.o.FloorChecked(a.Seq, top, err)
	}
	m.t.Fatalf("%s: cannot perform %T", m.name, a)
	return nil
}

// run steps until nothing is left to do.
func (m *member) run(acts []Action) {
	m.t.Helper()
	for len(acts) > 0 {
		acts = m.step(acts)
	}
}

func (m *member) claim() { m.t.Helper(); m.run(m.o.Start()) }

// checkpoint persists checkpoint id's metadata in the slot's storage and
// reports it to the Ownership, as the coordinator's driver would.
func (m *member) checkpoint(id int64) {
	m.t.Helper()
	w, err := m.st.Begin(id)
	if err != nil {
		m.t.Fatalf("%s: Begin(%d): %v", m.name, id, err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: id, Fingerprint: m.name}); err != nil {
		m.t.Fatalf("%s: Commit(%d): %v", m.name, id, err)
	}
	m.run(m.o.Persisted(id))
}

func (m *member) lastRestore() Restore {
	m.t.Helper()
	if len(m.restored) == 0 {
		m.t.Fatalf("%s never restored (stopped: %v, failed: %v)", m.name, m.stopped, m.failed)
	}
	return m.restored[len(m.restored)-1]
}

func (m *member) wantRestore(checkpoint, epoch, next int64) {
	m.t.Helper()
	r := m.lastRestore()
	if r.Checkpoint != checkpoint || r.Epoch != epoch || r.NextCheckpointID != next {
		m.t.Fatalf("%s restores %+v; want checkpoint %d of epoch %d, next id %d", m.name, r, checkpoint, epoch, next)
	}
}

func (m *member) wantNotified(ids ...int64) {
	m.t.Helper()
	if !slices.Equal(m.notified, ids) {
		m.t.Fatalf("%s was told to commit %v; want %v", m.name, m.notified, ids)
	}
}

func (m *member) wantStopped(target error, holder string) {
	m.t.Helper()
	var ce *ClaimError
	if !errors.Is(m.stopped, target) || !errors.As(m.stopped, &ce) || ce.Holder.Member != holder {
		m.t.Fatalf("%s stopped with %v; want %v with the claim of %q in the way", m.name, m.stopped, target, holder)
	}
	if m.o.Owns() {
		m.t.Fatalf("%s still owns the slot after Stop", m.name)
	}
}

func logOf(t *testing.T, st *checkpoint.MemoryStorage) []Record {
	t.Helper()
	recs, err := LoadLog(st)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A takeover: the new owner, of a higher epoch, claims and restores the
// latest checkpoint completed under the claim it replaces, numbers its own
// checkpoints after every id there is, and its successor restores its
// checkpoints in turn.
func TestTakeoverRestoresLatestCheckpointOfHighestEpoch(t *testing.T) {
	st := slotStorage(t)
	a := newMember(t, st, "a", 1)
	a.claim()
	a.wantRestore(0, 0, 1)
	a.checkpoint(1)
	a.checkpoint(2)
	a.wantNotified(1, 2)

	b := newMember(t, st, "b", 3)
	b.claim()
	b.wantRestore(2, 1, 3)
	b.checkpoint(3)
	b.wantNotified(3)

	c := newMember(t, st, "c", 5)
	c.claim()
	c.wantRestore(3, 2, 4)
	if n := len(logOf(t, st)); n != 6 {
		t.Fatalf("log holds %d records; want 3 claims and 3 checkpoints", n)
	}
}

// A zombie (a paused owner that lost its slot without knowing) persists a
// checkpoint after the new owner's claim: its record cannot take the
// log's next position (the claim holds it), so it learns it lost the slot
// and is never told to commit; the checkpoint is in storage but no later
// owner restores it, and none reuses its id.
func TestZombieCheckpointAfterLosingSlotIsNeverCommittedNorRestored(t *testing.T) {
	st := slotStorage(t)
	a := newMember(t, st, "a", 1)
	a.claim()
	a.checkpoint(1)

	b := newMember(t, st, "b", 2)
	b.claim()
	b.wantRestore(1, 1, 2)

	a.checkpoint(2) // the zombie wakes up and completes checkpoint 2
	a.wantNotified(1)
	a.wantStopped(ErrSlotLost, "b")
	a.run(a.o.Persisted(3)) // and anything after is ignored
	a.wantNotified(1)

	// b numbered from 2, but the zombie's 2 is in storage: its driver's
	// Begin(2) fails with ErrExists and it takes the next id.
	if _, err := st.Begin(2); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("Begin(2) = %v; the zombie's checkpoint 2 should be stored", err)
	}
	b.checkpoint(3)
	b.wantNotified(3)

	c := newMember(t, st, "c", 4)
	c.claim()
	c.wantRestore(3, 2, 4)

	// b dies before any checkpoint of its own: its successor still passes
	// over the zombie's checkpoint 2 and takes 1, numbering from 3.
	st2 := slotStorage(t)
	a2 := newMember(t, st2, "a", 1)
	a2.claim()
	a2.checkpoint(1)
	b2 := newMember(t, st2, "b", 2)
	b2.claim()
	a2.checkpoint(2)
	a2.wantStopped(ErrSlotLost, "b")
	c2 := newMember(t, st2, "c", 3)
	c2.claim()
	c2.wantRestore(1, 1, 3)
}

// Two members each believe the group gave them the slot, one of them
// stale (its generation is over): both read the log and race for its next
// position. Whichever order the steps take, the member the group still
// assigns the slot to ends up governing the log, and the stale one never
// restores after the current one's claim nor is told to commit anything.
// The same after a group reset: the log's epoch (7) is above both
// members' generations (1 and 2).
func TestStaleAssignmentNeverWinsOverTheCurrentOne(t *testing.T) {
	for _, reset := range []bool{false, true} {
		for _, order := range []string{"current claims first", "stale confirms too late", "stale wins the position then goes stale"} {
			name := order
			if reset {
				name += " after a group reset"
			}
			t.Run(name, func(t *testing.T) { staleAgainstCurrent(t, order, reset) })
		}
	}
}

func staleAgainstCurrent(t *testing.T, order string, reset bool) {
	st := slotStorage(t)
	aEpoch, oldGen, curGen := int64(1), int64(4), int64(5)
	if reset {
		aEpoch, oldGen, curGen = 7, 1, 2
		for _, r := range []Record{
			{Seq: 1, Kind: Claim, Epoch: 7, Generation: 7, Member: "a"},
			{Seq: 2, Kind: Completed, Epoch: 7, Member: "a", Checkpoint: 1},
		} {
			if err := StoreRecord(st, r); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		a := newMember(t, st, "a", 1)
		a.claim()
		a.checkpoint(1)
	}

	cur := newMember(t, st, "cur", curGen)
	old := newMember(t, st, "old", oldGen)
	curActs := cur.step(cur.o.Start()) // both read the log
	oldActs := old.step(old.o.Start())
	if _, ok := curActs[0].(Confirm); !ok {
		t.Fatalf("after reading the log the claimant does %v; want Confirm", curActs)
	}
	switch order {
	case "current claims first":
		// old confirmed while still assigned, then the group moved
		// the slot and cur claimed: old's append meets cur's claim,
		// and its second confirmation is refused.
		oldActs = old.step(oldActs)
		cur.run(curActs)
		old.stale = true
		old.run(oldActs)
		old.wantStopped(ErrNotAssigned, "cur")
	case "stale confirms too late":
		old.stale = true
		old.run(oldActs)
		old.wantStopped(ErrNotAssigned, "a")
		cur.run(curActs)
	case "stale wins the position then goes stale":
		// old was still assigned when it confirmed, and its claim
		// takes the position; the group then moves the slot to cur,
		// whose append meets old's claim: cur reads again, confirms
		// again (later than old's claim) and claims above it.
		oldActs = old.step(oldActs) // Confirmed: the Append
		curActs = cur.step(curActs)
		old.run(oldActs)
		old.wantRestore(1, aEpoch, 2)
		old.stale = true
		cur.run(curActs)
		if cur.confirms != 2 {
			t.Fatalf("cur confirmed %d times; want again after its lost race", cur.confirms)
		}
		old.checkpoint(2)
		old.wantStopped(ErrSlotLost, "cur")
		old.wantNotified()
	}
	cur.wantRestore(1, aEpoch, 2)
	cur.checkpoint(3)
	cur.wantNotified(3)
	if rp := Decide(logOf(t, st)); rp.Owner.Member != "cur" || rp.Owner.Epoch <= aEpoch || rp.Checkpoint != 3 {
		t.Fatalf("Decide = %+v; want cur governing above epoch %d with checkpoint 3", rp, aEpoch)
	}
	for _, r := range old.restored {
		if r.Checkpoint > 1 {
			t.Fatalf("the stale member restored %+v", r)
		}
	}
}

func (a Append) withMember(m string) Action { a.Record.Member = m; return a }

// Restarts with no checkpoint yet: the first claim of a slot starts from
// scratch, and so does every later claim while no checkpoint was recorded,
// even when one was persisted and never recorded (its owner died between
// the two), whose id is still never reused.
func TestRestartWithNoCheckpointYetStartsFromScratch(t *testing.T) {
	st := slotStorage(t)
	a := newMember(t, st, "a", 1)
	a.claim()
	a.wantRestore(0, 0, 1)

	b := newMember(t, st, "b", 2)
	b.claim()
	b.wantRestore(0, 0, 1)
	w, err := st.Begin(1) // b dies after persisting 1, before recording it
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 1}); err != nil {
		t.Fatal(err)
	}

	c := newMember(t, st, "c", 3)
	c.claim()
	c.wantRestore(0, 0, 2)
}

// A storage that holds checkpoints but no log is refused: a fresh start
// would replay or lose what those checkpoints' sinks committed.
func TestClaimRefusesCheckpointsWithoutLog(t *testing.T) {
	st := slotStorage(t)
	w, err := st.Begin(7)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(checkpoint.Metadata{ID: 7}); err != nil {
		t.Fatal(err)
	}
	a := newMember(t, st, "a", 1)
	a.claim()
	if !errors.Is(a.stopped, ErrLogMissing) || len(a.restored) != 0 {
		t.Fatalf("stopped %v, restored %v; want ErrLogMissing and no restore", a.stopped, a.restored)
	}
	if len(logOf(t, st)) != 0 {
		t.Fatal("the refused claim wrote to the log")
	}
}

// An append whose answer was lost (stored, then an error) fails; starting
// again finds the member's own record and goes on from it: a claim is not
// made twice, a checkpoint is not recorded twice and is notified once.
func TestAppendWithLostAnswerIsNotMadeTwice(t *testing.T) {
	st := slotStorage(t)
	a := newMember(t, st, "a", 1)
	a.appendFault = errors.New("connection reset")
	a.claim()
	if a.failed == nil || len(a.restored) != 0 {
		t.Fatalf("failed %v, restored %v; want a failure and no restore yet", a.failed, a.restored)
	}
	a.failed = nil
	a.claim()
	a.wantRestore(0, 0, 1)

	a.appendFault = errors.New("timeout")
	a.checkpoint(1)
	a.wantNotified()
	a.run(a.o.Start())
	a.wantNotified(1)
	a.checkpoint(2)
	a.wantNotified(1, 2)
	var kinds []string
	for _, r := range logOf(t, st) {
		kinds = append(kinds, r.String())
	}
	if len(kinds) != 3 {
		t.Fatalf("log %v; want one claim and two checkpoint records", kinds)
	}
}

// Checkpoints are recorded one at a time in id order, each notified only
// once its record is in the log; a position taken by a record that does
// not count (a zombie's, written blind) is stepped over.
func TestCheckpointsAreRecordedInOrderBeforeNotification(t *testing.T) {
	st := slotStorage(t)
	a := newMember(t, st, "a", 2)
	a.claim()
	acts := a.o.Persisted(1)
	acts2 := a.o.Persisted(2)
	if len(acts2) != 0 {
		t.Fatalf("a second checkpoint was appended while the first was: %v", acts2)
	}
	// A zombie of epoch 1 writes a record at the position a asked for.
	pos := acts[0].(Append).Record.Seq
	if err := StoreRecord(st, Record{Seq: pos, Kind: Completed, Epoch: 1, Member: "zombie", Checkpoint: 9}); err != nil {
		t.Fatal(err)
	}
	a.run(acts)
	a.wantNotified(1, 2)
	rp := Decide(logOf(t, st))
	if rp.Checkpoint != 2 || len(rp.Ignored) != 1 || rp.Ignored[0].Member != "zombie" {
		t.Fatalf("Decide = %+v; want checkpoint 2 with the zombie's record ignored", rp)
	}
}

// Decide's rules on logs written by hand, including ones the Ownership
// itself never writes (blind writers, older builds).
func TestDecideTakesLatestCheckpointOfHighestEpoch(t *testing.T) {
	claim := func(seq, epoch int64, m string) Record {
		return Record{Seq: seq, Kind: Claim, Epoch: epoch, Member: m}
	}
	chk := func(seq, id, epoch int64, m string) Record {
		return Record{Seq: seq, Kind: Completed, Epoch: epoch, Member: m, Checkpoint: id}
	}
	floor := func(seq, epoch int64, m string, restore, restoreEpoch, maxID int64) Record {
		return Record{Seq: seq, Kind: Floor, Epoch: epoch, Generation: 1, Member: m, Checkpoint: restore, RestoreEpoch: restoreEpoch, MaxCheckpoint: maxID}
	}
	for _, c := range []struct {
		name          string
		log           []Record
		owner         string
		checkpoint    int64
		epoch         int64
		ignored       int
		maxCheckpoint int64
	}{
		{"empty", nil, "", 0, 0, 0, 0},
		{"one claim", []Record{claim(1, 1, "a")}, "a", 0, 0, 0, 0},
		{"one owner", []Record{claim(1, 1, "a"), chk(2, 1, 1, "a"), chk(3, 2, 1, "a")}, "a", 2, 1, 0, 2},
		{"takeover without checkpoint", []Record{claim(1, 1, "a"), chk(2, 1, 1, "a"), claim(3, 2, "b")}, "b", 1, 1, 0, 1},
		{"zombie after newer claim", []Record{claim(1, 1, "a"), chk(2, 1, 1, "a"), claim(3, 2, "b"), chk(4, 2, 1, "a")}, "b", 1, 1, 1, 2},
		{"newer owner's checkpoint", []Record{claim(1, 1, "a"), claim(2, 2, "b"), chk(3, 5, 2, "b"), chk(4, 6, 1, "a")}, "b", 5, 2, 1, 6},
		{"same epoch claimed twice", []Record{claim(1, 2, "a"), claim(2, 2, "b"), chk(3, 1, 2, "b"), chk(4, 2, 2, "a")}, "a", 2, 2, 1, 2},
		{"stale claim after newer", []Record{claim(1, 5, "a"), claim(2, 3, "b"), chk(3, 1, 3, "b"), chk(4, 2, 5, "a")}, "a", 2, 5, 1, 2},
		{"checkpoint before any claim", []Record{chk(1, 1, 1, "a"), claim(2, 1, "a")}, "a", 0, 0, 1, 1},
		{"older epochs' checkpoints kept across claims without one", []Record{claim(1, 1, "a"), chk(2, 4, 1, "a"), claim(3, 2, "b"), claim(4, 3, "c")}, "c", 4, 1, 0, 4},
		{"log read from its floor", []Record{floor(9, 3, "b", 7, 2, 8), chk(10, 9, 3, "b")}, "b", 9, 3, 0, 9},
		{"floor without checkpoint, then a takeover", []Record{floor(9, 3, "b", 0, 0, 4), claim(10, 4, "c")}, "c", 0, 0, 0, 4},
		{"floor by the governing owner mid-log", []Record{claim(1, 1, "a"), chk(2, 1, 1, "a"), floor(3, 1, "a", 1, 1, 1), chk(4, 2, 1, "a")}, "a", 2, 1, 0, 2},
		{"floor by a zombie after a newer claim", []Record{claim(1, 1, "a"), chk(2, 1, 1, "a"), claim(3, 2, "b"), floor(4, 1, "a", 9, 1, 9)}, "b", 1, 1, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rp := Decide(c.log)
			if rp.Owner.Member != c.owner || rp.Checkpoint != c.checkpoint || rp.Epoch != c.epoch || len(rp.Ignored) != c.ignored || rp.MaxCheckpoint != c.maxCheckpoint {
				t.Fatalf("Decide = %+v; want owner %q, checkpoint %d of epoch %d, %d ignored, max id %d", rp, c.owner, c.checkpoint, c.epoch, c.ignored, c.maxCheckpoint)
			}
		})
	}
}

// Records round-trip through their stored form; malformed ones and those
// of another format version are refused, and the log is read in position
// order whatever else the storage holds.
func TestLogRecordsRoundTrip(t *testing.T) {
	st := slotStorage(t)
	want := []Record{
		{Seq: 1, Kind: Floor, Epoch: 4, Generation: 1, Member: "b-7f3e", Checkpoint: 1, RestoreEpoch: 1, MaxCheckpoint: 2},
		{Seq: 2, Kind: Claim, Epoch: 5, Generation: 3, Member: "a"},
		{Seq: 3, Kind: Completed, Epoch: 5, Member: "a", Checkpoint: 3},
		{Seq: 10, Kind: Claim, Epoch: 6, Generation: 1, Member: "c"},
	}
	for _, r := range slices.Backward(want) {
		if err := StoreRecord(st, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateRecord("not-a-log-entry", []byte("x")); err != nil {
		t.Fatal(err)
	}
	got := logOf(t, st)
	if !slices.Equal(got, want) {
		t.Fatalf("LoadLog = %v; want %v", got, want)
	}
	for _, bad := range []Record{
		{Seq: 0, Kind: Claim, Epoch: 1, Generation: 1, Member: "a"},
		{Seq: 1, Kind: "lease", Epoch: 1, Member: "a"},
		{Seq: 1, Kind: Claim, Epoch: 0, Generation: 1, Member: "a"},
		{Seq: 1, Kind: Claim, Epoch: 1, Generation: 1},
		{Seq: 1, Kind: Completed, Epoch: 1, Member: "a"},
		{Seq: 1, Kind: Claim, Epoch: 1, Generation: 1, Member: "a", Checkpoint: 3},
		{Seq: 1, Kind: Claim, Epoch: 1, Member: "a"},
		{Seq: 1, Kind: Completed, Epoch: 1, Generation: 2, Member: "a", Checkpoint: 3},
		{Seq: 1, Kind: Floor, Epoch: 2, Member: "a", Checkpoint: 3, RestoreEpoch: 1, MaxCheckpoint: 3},
		{Seq: 1, Kind: Floor, Epoch: 2, Generation: 1, Member: "a", Checkpoint: 3, RestoreEpoch: 3, MaxCheckpoint: 3},
		{Seq: 1, Kind: Floor, Epoch: 2, Generation: 1, Member: "a", Checkpoint: 3, RestoreEpoch: 1, MaxCheckpoint: 2},
		{Seq: 1, Kind: Floor, Epoch: 2, Generation: 1, Member: "a", Checkpoint: 3, MaxCheckpoint: 3},
		{Seq: 1, Kind: Completed, Epoch: 1, Member: "a", Checkpoint: 3, MaxCheckpoint: 3},
	} {
		if _, err := EncodeRecord(bad); err == nil {
			t.Errorf("EncodeRecord(%+v) succeeded; want an error", bad)
		}
	}
	if _, err := DecodeRecord(1, []byte(`{"version":2,"kind":"claim","epoch":1,"member":"a"}`)); err == nil {
		t.Error("a record of format version 2 decoded")
	}
	if err := StoreRecord(st, Record{Seq: 2, Kind: Claim, Epoch: 9, Generation: 9, Member: "x"}); !errors.Is(err, checkpoint.ErrRecordExists) {
		t.Fatalf("StoreRecord at a taken position = %v; want ErrRecordExists", err)
	}
}

// The job's consumer group was deleted (Kafka deletes an empty group once
// its offsets expire) and its generations start again at 1: a member
// assigned the slot in the new life of the group claims it above the log's
// epoch 7 and restores the last owner's checkpoint. The old life's owner,
// a zombie, is fenced by that claim; a stale member of the new life (its
// generation over) claims nothing; the next owner claims above again.
func TestClaimAfterGroupResetRestoresAboveTheLogsEpochs(t *testing.T) {
	st := slotStorage(t)
	// The group's old life: the slot's last owner, a, claimed it in
	// generation 7 under epoch 7.
	for _, r := range []Record{
		{Seq: 1, Kind: Claim, Epoch: 7, Generation: 7, Member: "a"},
		{Seq: 2, Kind: Completed, Epoch: 7, Member: "a", Checkpoint: 1},
	} {
		if err := StoreRecord(st, r); err != nil {
			t.Fatal(err)
		}
	}
	a := newMember(t, st, "a", 7)
	a.claim() // finds its own claim: a still runs, unaware
	a.wantRestore(1, 7, 2)

	b := newMember(t, st, "b", 1) // the group's new life
	b.claim()
	b.wantRestore(1, 7, 2)
	b.checkpoint(2)
	b.wantNotified(2)
	if got := Decide(logOf(t, st)).Owner; got.Member != "b" || got.Epoch != 8 || got.Generation != 1 {
		t.Fatalf("governing claim %v; want b's, of epoch 8, generation 1", got)
	}

	a.checkpoint(3)
	a.wantStopped(ErrSlotLost, "b")
	a.wantNotified()

	before := len(logOf(t, st))
	c := newMember(t, st, "c", 1)
	c.stale = true
	c.claim()
	c.wantStopped(ErrNotAssigned, "b")
	if after := len(logOf(t, st)); after != before {
		t.Fatalf("a stale claimant wrote to the log: %d records, then %d", before, after)
	}

	d := newMember(t, st, "d", 2)
	d.claim()
	d.wantRestore(2, 8, 4)
	if got := Decide(logOf(t, st)).Owner; got.Member != "d" || got.Epoch != 9 {
		t.Fatalf("governing claim %v; want d's, of epoch 9", got)
	}
}

// journal is a slot storage's records seen through a counter: it counts
// reads and keeps every log record ever created, so that a test can
// compare the compacted log with the whole one.
type journal struct {
	checkpoint.RecordStorage
	mu    sync.Mutex
	reads int
	all   []Record
}

func (j *journal) ReadRecord(name string) ([]byte, error) {
	j.mu.Lock()
	j.reads++
	j.mu.Unlock()
	return j.RecordStorage.ReadRecord(name)
}

func (j *journal) CreateRecord(name string, data []byte) error {
	err := j.RecordStorage.CreateRecord(name, data)
	if seq, ok := parseRecordName(name); ok && err == nil {
		r, derr := DecodeRecord(seq, data)
		if derr != nil {
			return derr
		}
		j.mu.Lock()
		j.all = append(j.all, r)
		j.mu.Unlock()
	}
	return err
}

func (j *journal) readCount() int { j.mu.Lock(); defer j.mu.Unlock(); return j.reads }

// whole is the log as it would be without compaction: every record
// created at a position nobody had before, floors left out.
func (j *journal) whole() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	seen := map[int64]bool{}
	var out []Record
	for _, r := range j.all {
		if r.Kind == Floor || seen[r.Seq] {
			continue
		}
		seen[r.Seq] = true
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func compactingMember(t *testing.T, st *checkpoint.MemoryStorage, j *journal, name string, generation int64, after int) *member {
	t.Helper()
	m := newMember(t, st, name, generation)
	o, err := NewOwnership(3, name, generation, WithCompactAfter(after))
	if err != nil {
		t.Fatal(err)
	}
	m.o, m.rs = o, j
	return m
}

// sameRestorePoint fails unless the compacted log and the whole one say
// the same: owner, restore point and highest id.
func sameRestorePoint(t *testing.T, j *journal) RestorePoint {
	t.Helper()
	recs, err := LoadLog(j)
	if err != nil {
		t.Fatal(err)
	}
	got, want := Decide(recs), Decide(j.whole())
	if got.Owner.Member != want.Owner.Member || got.Owner.Epoch != want.Owner.Epoch || got.Owner.Generation != want.Owner.Generation ||
		got.Checkpoint != want.Checkpoint || got.Epoch != want.Epoch || got.MaxCheckpoint != want.MaxCheckpoint {
		t.Fatalf("compacted log decides %+v; the whole log %+v", got, want)
	}
	return got
}

func logRecordsStored(t *testing.T, st *checkpoint.MemoryStorage) int {
	t.Helper()
	names, err := st.ListRecords()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if _, ok := parseRecordName(name); ok {
			n++
		}
	}
	return n
}

// Compaction changes nothing a reader decides: through owners, takeovers
// and a zombie's ignored record, the log read from its floor gives the
// owner, restore point and highest id the whole log gives, and the
// storage holds a bounded number of log records.
func TestCompactionLeavesTheRestorePointUnchanged(t *testing.T) {
	st := slotStorage(t)
	j := &journal{RecordStorage: st}
	const after = 4
	a := compactingMember(t, st, j, "a", 1, after)
	a.claim()
	for id := int64(1); id <= 10; id++ {
		a.checkpoint(id)
		sameRestorePoint(t, j)
		if n := logRecordsStored(t, st); n > after+2 {
			t.Fatalf("after checkpoint %d the storage holds %d log records; compaction after %d should bound it", id, n, after)
		}
	}
	a.wantNotified(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if a.compactions == 0 {
		t.Fatal("the log was never compacted")
	}

	b := compactingMember(t, st, j, "b", 2, after)
	b.claim()
	b.wantRestore(10, 1, 11)
	a.checkpoint(11) // a zombie now
	a.wantStopped(ErrSlotLost, "b")
	for id := int64(12); id <= 20; id++ {
		b.checkpoint(id)
		sameRestorePoint(t, j)
	}
	c := compactingMember(t, st, j, "c", 3, after)
	c.claim()
	c.wantRestore(20, 2, 21)
	if rp := sameRestorePoint(t, j); rp.Owner.Member != "c" {
		t.Fatalf("owner %v; want c", rp.Owner)
	}
}

// A claim reads the log from its floor: O(records since the floor), not
// one read per checkpoint ever recorded.
func TestClaimAfterCompactionReadsOnlySinceTheFloor(t *testing.T) {
	for _, after := range []int{8, 1000} {
		st := slotStorage(t)
		j := &journal{RecordStorage: st}
		a := compactingMember(t, st, j, "a", 1, after)
		a.claim()
		for id := int64(1); id <= 100; id++ {
			a.checkpoint(id)
		}
		before := j.readCount()
		b := compactingMember(t, st, j, "b", 2, after)
		b.claim()
		b.wantRestore(100, 1, 101)
		reads := j.readCount() - before
		t.Logf("compaction after %d records: a claim after 100 checkpoints read %d records", after, reads)
		if after == 1000 && reads != 101 {
			t.Fatalf("an uncompacted log of 101 records took %d reads to claim; want 101", reads)
		}
		if after == 8 && reads > after+1 {
			t.Fatalf("a claim read %d records; the log holds at most %d since its floor, and the floor", reads, after)
		}
	}
}

// A zombie (it read the log before a newer claim, and sleeps) appends at
// the position after what it read, which compaction has deleted since:
// the create succeeds, but the position is below a floor's marker, so the
// record does not count: the zombie reads the log, finds it lost the
// slot, and is never told to commit. A stale claimant that confirmed
// before the compaction and claims at a deleted position is refused the
// same way. Readers never see either record.
func TestZombieAppendingWhileTheLogIsCompactedDoesNotCount(t *testing.T) {
	st := slotStorage(t)
	j := &journal{RecordStorage: st}
	const after = 4
	a := compactingMember(t, st, j, "a", 1, after)
	a.claim()
	a.checkpoint(1)

	// d read the log and confirmed while still assigned; it sleeps before
	// its append.
	d := compactingMember(t, st, j, "d", 2, after)
	dActs := d.step(d.step(d.o.Start()))
	if ap, ok := dActs[0].(Append); !ok || ap.Record.Seq != 3 {
		t.Fatalf("d would do %v; want its claim's append at position 3", dActs)
	}

	b := compactingMember(t, st, j, "b", 3, after)
	b.claim() // position 3
	for id := int64(2); id <= 9; id++ {
		b.checkpoint(id)
	}
	if b.compactions == 0 {
		t.Fatal("the log was never compacted")
	}
	if _, err := st.ReadRecord(RecordName(3)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("position 3 = %v; want it deleted by compaction", err)
	}

	a.checkpoint(10) // a's next position is 3: deleted, so free
	a.wantNotified(1)
	a.wantStopped(ErrSlotLost, "b")
	if _, err := st.ReadRecord(RecordName(3)); err != nil {
		t.Fatalf("the zombie's record at the deleted position 3 is not there (%v); the test shows nothing", err)
	}
	rp := sameRestorePointIgnoring(t, j, 3)
	if rp.Owner.Member != "b" || rp.Checkpoint != 9 {
		t.Fatalf("the log decides %+v; want b's checkpoint 9", rp)
	}

	d.stale = true
	if err := st.DeleteRecord(RecordName(3)); err != nil { // free position 3 again
		t.Fatal(err)
	}
	d.run(dActs)
	d.wantStopped(ErrNotAssigned, "b")
	if len(d.restored) != 0 {
		t.Fatalf("the stale claimant restored %v", d.restored)
	}

	c := compactingMember(t, st, j, "c", 4, after)
	c.claim()
	c.wantRestore(9, 2, 11)
}

// sameRestorePointIgnoring is sameRestorePoint for a storage where records
// were created again at deleted position seq: they are not in the log.
func sameRestorePointIgnoring(t *testing.T, j *journal, seq int64) RestorePoint {
	t.Helper()
	j.mu.Lock()
	j.all = slices.DeleteFunc(j.all, func(r Record) bool { return r.Seq == seq && r.Member != "b" })
	j.mu.Unlock()
	return sameRestorePoint(t, j)
}

// A crash between the floor record and its deletions (the marker not
// written, nothing deleted) leaves a log that reads from the floor,
// decides as before, and is cleaned up by the next compaction.
func TestCrashBetweenFloorAndDeletionsLeavesTheLogWhole(t *testing.T) {
	st := slotStorage(t)
	j := &journal{RecordStorage: st}
	const after = 4
	a := compactingMember(t, st, j, "a", 1, after)
	a.skipCompact = true
	a.claim()
	for id := int64(1); id <= 5; id++ {
		a.checkpoint(id)
	}
	if a.compactions != 1 {
		t.Fatalf("%d compactions; want the one floor", a.compactions)
	}
	if top, err := HighestFloorMarker(st); err != nil || top != 0 {
		t.Fatalf("floor marker %d, %v; want none (crashed before it)", top, err)
	}
	total := logRecordsStored(t, st)
	before := j.readCount()
	b := compactingMember(t, st, j, "b", 2, after)
	b.claim()
	b.wantRestore(5, 1, 6)
	if reads := j.readCount() - before; reads >= total {
		t.Fatalf("the claim read %d records of %d; want it to stop at the floor", reads, total)
	}
	sameRestorePoint(t, j)
	for id := int64(6); id <= 10; id++ {
		b.checkpoint(id)
	}
	if b.compactions == 0 {
		t.Fatal("b never compacted")
	}
	if n := logRecordsStored(t, st); n > after+2 {
		t.Fatalf("after b's compaction the storage holds %d log records; the crashed one's should be gone", n)
	}
	sameRestorePoint(t, j)
}

// A floor whose append's answer was lost: the owner fails, starts again,
// reads the log from its own floor and goes on governing, without a
// second floor; the records the floor replaced are deleted by the next
// compaction.
func TestFloorWithLostAnswerIsNotWrittenTwice(t *testing.T) {
	st := slotStorage(t)
	j := &journal{RecordStorage: st}
	const after = 2
	a := compactingMember(t, st, j, "a", 1, after)
	a.claim()
	a.checkpoint(1)
	a.appendFault, a.faultOn = errors.New("connection reset"), Floor
	a.checkpoint(2) // recorded and notified, then the floor's answer is lost
	a.wantNotified(1, 2)
	if a.failed == nil || a.compactions != 0 {
		t.Fatalf("failed %v, %d compactions; want the failure and no compaction yet", a.failed, a.compactions)
	}
	a.failed = nil
	a.run(a.o.Start())
	if !a.o.Owns() || a.stopped != nil {
		t.Fatalf("after starting again a owns the slot: %v (stopped %v)", a.o.Owns(), a.stopped)
	}
	floors := 0
	for _, r := range j.all {
		if r.Kind == Floor {
			floors++
		}
	}
	if floors != 1 {
		t.Fatalf("%d floors written; want the one whose answer was lost", floors)
	}
	sameRestorePoint(t, j)
	for id := int64(3); id <= 6; id++ {
		a.checkpoint(id)
	}
	a.wantNotified(1, 2, 3, 4, 5, 6)
	if n := logRecordsStored(t, st); n > after+2 {
		t.Fatalf("the storage holds %d log records; the next compaction should have deleted the old ones", n)
	}
	b := compactingMember(t, st, j, "b", 2, after)
	b.claim()
	b.wantRestore(6, 1, 7)
}
