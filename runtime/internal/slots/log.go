package slots

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
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
	// Checkpoint is the completed checkpoint's id (Completed only).
	Checkpoint int64
}

func (r Record) String() string {
	if r.Kind == Completed {
		return fmt.Sprintf("#%d checkpoint %d (epoch %d, %s)", r.Seq, r.Checkpoint, r.Epoch, r.Member)
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
}

func (r Record) validate() error {
	switch {
	case r.Seq < 1:
		return fmt.Errorf("slots: log record at position %d; positions start at 1", r.Seq)
	case r.Kind != Claim && r.Kind != Completed:
		return fmt.Errorf("slots: log record %d has kind %q; want %q or %q", r.Seq, r.Kind, Claim, Completed)
	case r.Epoch < 1:
		return fmt.Errorf("slots: log record %d has epoch %d; epochs start at 1", r.Seq, r.Epoch)
	case r.Member == "":
		return fmt.Errorf("slots: log record %d names no member", r.Seq)
	case r.Kind == Completed && r.Checkpoint < 1:
		return fmt.Errorf("slots: log record %d completes checkpoint %d; ids start at 1", r.Seq, r.Checkpoint)
	case r.Kind == Claim && r.Checkpoint != 0:
		return fmt.Errorf("slots: claim %d carries checkpoint %d", r.Seq, r.Checkpoint)
	case r.Kind == Claim && r.Generation < 1:
		return fmt.Errorf("slots: claim %d has group generation %d; generations start at 1", r.Seq, r.Generation)
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
	return json.Marshal(wireRecord{Version: logVersion, Kind: r.Kind, Epoch: r.Epoch, Generation: r.Generation, Member: r.Member, Checkpoint: r.Checkpoint})
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
	r := Record{Seq: seq, Kind: w.Kind, Epoch: w.Epoch, Generation: w.Generation, Member: w.Member, Checkpoint: w.Checkpoint}
	return r, r.validate()
}

// LoadLog reads a slot's whole ownership log from its storage, in order.
// Records that are not log entries are left alone.
func LoadLog(rs checkpoint.RecordStorage) ([]Record, error) {
	names, err := rs.ListRecords()
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, name := range names {
		seq, ok := parseRecordName(name)
		if !ok {
			continue
		}
		b, err := rs.ReadRecord(name)
		if err != nil {
			return nil, err
		}
		r, err := DecodeRecord(seq, b)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
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
	// Owner is the governing claim: the first claim of the highest epoch.
	// Zero when nobody has claimed the slot.
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
//     none at all when no checkpoint counts.
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
