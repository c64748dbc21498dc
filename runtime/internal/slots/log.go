package slots

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/splitflow/splitflow/runtime/checkpoint"
)

// Kind says what a record of a slot's ownership log is.
type Kind string

const (
	// Claim: Member owns the slot from Epoch on, having been assigned it
	// in group generation Generation. Recorded before the member restores
	// anything.
	Claim Kind = "claim"
	// Completed: checkpoint Checkpoint of the slot, written by Member
	// under Epoch, is complete. Recorded after its metadata is durable and
	// before any sink is told to commit it.
	Completed Kind = "checkpoint"
	// Floor: what the log says below this position, summed up, written by
	// the governing owner (Epoch, Member, Generation are its claim's);
	// the records below may be deleted. Checkpoint is the restore point
	// (0: none) and RestoreEpoch the epoch it was written under;
	// MaxCheckpoint the highest checkpoint id below.
	Floor Kind = "floor"
)

// Record is one entry of a slot's ownership log. The log is the slot's
// records in the slot's checkpoint storage (checkpoint.RecordStorage),
// named log-<seq>; each is created once by a conditional write at the seq
// after the last one its writer read, so the log is one total order of
// every claim and every completed checkpoint of the slot, whichever
// process wrote them.
type Record struct {
	// Seq is the record's position in the log, from 1.
	Seq int64
	Kind
	// Epoch is the claim's epoch, or the epoch a checkpoint was written
	// under. A claim's epoch is one above the highest claim in the log
	// its claimant read: epochs belong to the log, not to the group, so
	// they keep growing when the group's generations start again.
	Epoch int64
	// Generation is the consumer group generation in which Member was
	// assigned the slot (Claim only): it tells a member its own claim,
	// and tells a reader of the log who claimed when.
	Generation int64
	// Member is the owner: the claimant, or the checkpoint's writer.
	Member string
	// Checkpoint is the completed checkpoint's id (Completed), or the
	// restore point below a floor (Floor; 0 for none).
	Checkpoint int64
	// RestoreEpoch and MaxCheckpoint sum up a floor's log (Floor only).
	RestoreEpoch  int64
	MaxCheckpoint int64
}

func (r Record) String() string {
	switch r.Kind {
	case Completed:
		return fmt.Sprintf("#%d checkpoint %d (epoch %d, %s)", r.Seq, r.Checkpoint, r.Epoch, r.Member)
	case Floor:
		return fmt.Sprintf("#%d floor by %s (epoch %d, generation %d): restore %d of epoch %d, ids up to %d", r.Seq, r.Member, r.Epoch, r.Generation, r.Checkpoint, r.RestoreEpoch, r.MaxCheckpoint)
	}
	return fmt.Sprintf("#%d claim of epoch %d by %s (generation %d)", r.Seq, r.Epoch, r.Member, r.Generation)
}

const (
	logPrefix = "log-"
	// logVersion is the record format's version; a record of another
	// version fails to decode, so a newer build's log is never misread.
	logVersion = 1
)

// RecordName is the storage record name of log position seq: zero-padded
// to the width of any int64, so that names sort as positions do.
func RecordName(seq int64) string { return fmt.Sprintf("%s%019d", logPrefix, seq) }

// parseRecordName is RecordName's inverse.
func parseRecordName(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, logPrefix)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || seq < 1 || RecordName(seq) != name {
		return 0, false
	}
	return seq, true
}

type wireRecord struct {
	Version    int    `json:"version"`
	Kind       Kind   `json:"kind"`
	Epoch      int64  `json:"epoch"`
	Generation int64  `json:"generation,omitempty"`
	Member     string `json:"member"`
	Checkpoint int64  `json:"checkpoint,omitempty"`
	// A floor's summary.
	RestoreEpoch  int64 `json:"restore_epoch,omitempty"`
	MaxCheckpoint int64 `json:"max_checkpoint,omitempty"`
}

func (r Record) validate() error {
	switch {
	case r.Seq < 1:
		return fmt.Errorf("slots: log record at position %d; positions start at 1", r.Seq)
	case r.Kind != Claim && r.Kind != Completed && r.Kind != Floor:
		return fmt.Errorf("slots: log record %d has kind %q; want %q, %q or %q", r.Seq, r.Kind, Claim, Completed, Floor)
	case r.Epoch < 1:
		return fmt.Errorf("slots: log record %d has epoch %d; epochs start at 1", r.Seq, r.Epoch)
	case r.Member == "":
		return fmt.Errorf("slots: log record %d names no member", r.Seq)
	case r.Kind == Completed && r.Checkpoint < 1:
		return fmt.Errorf("slots: log record %d completes checkpoint %d; ids start at 1", r.Seq, r.Checkpoint)
	case r.Kind == Claim && r.Checkpoint != 0:
		return fmt.Errorf("slots: claim %d carries checkpoint %d", r.Seq, r.Checkpoint)
	case r.Kind != Completed && r.Generation < 1:
		return fmt.Errorf("slots: %s %d has group generation %d; generations start at 1", r.Kind, r.Seq, r.Generation)
	case r.Kind == Floor && (r.Checkpoint < 0 || r.RestoreEpoch < 0 || r.RestoreEpoch > r.Epoch || r.MaxCheckpoint < r.Checkpoint || (r.Checkpoint == 0) != (r.RestoreEpoch == 0)):
		return fmt.Errorf("slots: floor %d sums up restore point %d of epoch %d and ids up to %d under epoch %d: inconsistent", r.Seq, r.Checkpoint, r.RestoreEpoch, r.MaxCheckpoint, r.Epoch)
	case r.Kind != Floor && (r.RestoreEpoch != 0 || r.MaxCheckpoint != 0):
		return fmt.Errorf("slots: %s %d carries a floor's summary", r.Kind, r.Seq)
	case r.Kind == Completed && r.Generation != 0:
		return fmt.Errorf("slots: checkpoint record %d carries generation %d; only claims do", r.Seq, r.Generation)
	}
	return nil
}

// EncodeRecord is the stored form of r (without its position, which is
// its name).
func EncodeRecord(r Record) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(wireRecord{Version: logVersion, Kind: r.Kind, Epoch: r.Epoch, Generation: r.Generation, Member: r.Member, Checkpoint: r.Checkpoint, RestoreEpoch: r.RestoreEpoch, MaxCheckpoint: r.MaxCheckpoint})
}

// DecodeRecord reads the record stored at position seq.
func DecodeRecord(seq int64, b []byte) (Record, error) {
	var w wireRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, fmt.Errorf("slots: log record %d: %w", seq, err)
	}
	if w.Version != logVersion {
		return Record{}, fmt.Errorf("slots: log record %d has format version %d; this build reads %d (a newer build wrote it?)", seq, w.Version, logVersion)
	}
	r := Record{Seq: seq, Kind: w.Kind, Epoch: w.Epoch, Generation: w.Generation, Member: w.Member, Checkpoint: w.Checkpoint, RestoreEpoch: w.RestoreEpoch, MaxCheckpoint: w.MaxCheckpoint}
	return r, r.validate()
}

// LoadLog reads a slot's ownership log from its storage, in order: from
// its highest floor (read backwards from the last position until a floor)
// to its end, so O(records since the floor) reads; the whole log when it
// has no floor. Records that are not log entries are left alone. A
// position listed and gone when read was deleted by a compaction that
// wrote a newer floor meanwhile: the log is listed and read again.
func LoadLog(rs checkpoint.RecordStorage) ([]Record, error) {
	const attempts = 5
	var err error
	for range attempts {
		var out []Record
		if out, err = loadLog(rs); !errors.Is(err, checkpoint.ErrNotFound) {
			return out, err
		}
	}
	return nil, fmt.Errorf("slots: the log kept changing under its reader (%d attempts): %w", attempts, err)
}

func loadLog(rs checkpoint.RecordStorage) ([]Record, error) {
	names, err := rs.ListRecords()
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, name := range names {
		if seq, ok := parseRecordName(name); ok {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	var out []Record
	for i := len(seqs) - 1; i >= 0; i-- {
		b, err := rs.ReadRecord(RecordName(seqs[i]))
		if err != nil {
			return nil, err
		}
		r, err := DecodeRecord(seqs[i], b)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		if r.Kind == Floor {
			break
		}
	}
	slices.Reverse(out)
	return out, nil
}

const floorMarkerPrefix = "floor-"

// FloorMarkerName is the name of the marker a compaction creates for the
// floor at position seq before it deletes anything below it.
func FloorMarkerName(seq int64) string { return fmt.Sprintf("%s%019d", floorMarkerPrefix, seq) }

// HighestFloorMarker lists the storage's records and returns the position
// of the highest floor marker, 0 when there is none. A record created at
// a position below it was created after compaction deleted that position
// (every deletion follows the marker of a floor above it): it is not in
// the log.
func HighestFloorMarker(rs checkpoint.RecordStorage) (int64, error) {
	names, err := rs.ListRecords()
	if err != nil {
		return 0, err
	}
	var top int64
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, floorMarkerPrefix)
		if !ok {
			continue
		}
		if seq, err := strconv.ParseInt(rest, 10, 64); err == nil && FloorMarkerName(seq) == name {
			top = max(top, seq)
		}
	}
	return top, nil
}

// CompactLog deletes what the floor at position floor makes unneeded, in
// this order: it creates the floor's marker (so that a record created
// again at a deleted position is known not to be in the log), deletes
// log positions below the floor in ascending order, then older markers.
// It stops at the first error; what is left is deleted by a later
// compaction, and readers never read below the highest floor.
func CompactLog(rs checkpoint.RecordStorage, floor int64) error {
	if err := rs.CreateRecord(FloorMarkerName(floor), nil); err != nil && !errors.Is(err, checkpoint.ErrRecordExists) {
		return err
	}
	names, err := rs.ListRecords()
	if err != nil {
		return err
	}
	var seqs []int64
	var markers []string
	for _, name := range names {
		if seq, ok := parseRecordName(name); ok && seq < floor {
			seqs = append(seqs, seq)
		}
		if rest, ok := strings.CutPrefix(name, floorMarkerPrefix); ok {
			if seq, err := strconv.ParseInt(rest, 10, 64); err == nil && seq < floor {
				markers = append(markers, name)
			}
		}
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		if err := rs.DeleteRecord(RecordName(seq)); err != nil {
			return err
		}
	}
	for _, name := range markers {
		if err := rs.DeleteRecord(name); err != nil {
			return err
		}
	}
	return nil
}

// StoreRecord creates r at its position; an error wrapping
// checkpoint.ErrRecordExists when another writer took the position first.
func StoreRecord(rs checkpoint.RecordStorage, r Record) error {
	b, err := EncodeRecord(r)
	if err != nil {
		return err
	}
	return rs.CreateRecord(RecordName(r.Seq), b)
}

// RestorePoint is what a slot's ownership log says about the slot.
type RestorePoint struct {
	// Owner is the governing claim: the first claim of the highest epoch
	// (as a floor sums it up when it is below the log's floor: Seq is
	// then the floor's). Zero when nobody has claimed the slot.
	Owner Record
	// Checkpoint is the checkpoint to restore: the last one recorded
	// under the claim that governed the log when it was recorded; 0 when
	// there is none (a fresh start).
	Checkpoint int64
	// Epoch is the epoch Checkpoint was written under.
	Epoch int64
	// Ignored are the checkpoint records that do not count: written under
	// an epoch older than a claim recorded before them (a zombie's), or
	// by a member that did not hold the claim.
	Ignored []Record
	// MaxCheckpoint is the highest checkpoint id anywhere in the log,
	// ignored ones included: ids are never reused.
	MaxCheckpoint int64
}

// Decide applies the epoch rules to a slot's log (records in log order):
//
//   - a claim governs from its position on if its epoch is higher than
//     the governing claim's; a claim of an epoch already claimed, or of
//     an older one, is ignored (its writer lost a race or is stale);
//   - a checkpoint record counts only if it was written by the member of
//     the claim governing at its position, under that claim's epoch: a
//     checkpoint written under an older epoch after a newer claim is
//     ignored;
//   - the restore point is the last checkpoint record that counts, so the
//     latest completed checkpoint of the highest epoch that has one, and
//     none at all when no checkpoint counts;
//   - a floor written by the governing claim's member under its epoch (or
//     one with nothing before it: the log read from its floor) stands for
//     everything before it: Decide goes on from its summary, which is
//     Decide's answer for the records it replaced. Another floor is
//     ignored.
func Decide(records []Record) RestorePoint {
	var rp RestorePoint
	for _, r := range records {
		switch r.Kind {
		case Claim:
			if r.Epoch > rp.Owner.Epoch {
				rp.Owner = r
			}
		case Completed:
			rp.MaxCheckpoint = max(rp.MaxCheckpoint, r.Checkpoint)
			if rp.Owner.Seq == 0 || r.Epoch != rp.Owner.Epoch || r.Member != rp.Owner.Member {
				rp.Ignored = append(rp.Ignored, r)
				continue
			}
			rp.Checkpoint, rp.Epoch = r.Checkpoint, r.Epoch
		case Floor:
			if rp.Owner.Seq != 0 && (r.Epoch != rp.Owner.Epoch || r.Member != rp.Owner.Member) {
				rp.Ignored = append(rp.Ignored, r)
				continue
			}
			rp.Owner = Record{Seq: r.Seq, Kind: Claim, Epoch: r.Epoch, Generation: r.Generation, Member: r.Member}
			rp.Checkpoint, rp.Epoch = r.Checkpoint, r.RestoreEpoch
			rp.MaxCheckpoint = max(rp.MaxCheckpoint, r.MaxCheckpoint)
		}
	}
	return rp
}

// checkLog refuses a log that is not in order with each position once.
func checkLog(records []Record) error {
	if !slices.IsSortedFunc(records, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) }) {
		return errors.New("slots: ownership log records are not in position order")
	}
	for i := 1; i < len(records); i++ {
		if records[i].Seq == records[i-1].Seq {
			return fmt.Errorf("slots: ownership log position %d given twice", records[i].Seq)
		}
	}
	return nil
}

// InspectRecords opens the record storage at path (a slot's log, the
// job's start record) to read it, writing nothing: a directory that does
// not exist is never created, and reports missing (nothing was ever
// recorded there).
func InspectRecords(path string, log *slog.Logger) (rs checkpoint.RecordStorage, missing bool, err error) {
	if !checkpoint.IsS3URL(path) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, true, nil
		} else if err != nil {
			return nil, false, err
		}
	}
	st, err := checkpoint.OpenStorageForInspection(path, checkpoint.WithLogger(log))
	if err != nil {
		return nil, false, err
	}
	rs, ok := st.(checkpoint.RecordStorage)
	if !ok {
		return nil, false, fmt.Errorf("storage %s keeps no records (%T)", path, st)
	}
	return rs, false, nil
}
